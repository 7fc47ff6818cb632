"""One error type for a failed attempt, whatever the provider: `CallError`.

Each provider's wire classifies its own SDK's failures into it (`transport.openai_call_error`,
`anthropic_api.anthropic_call_error`, a batch line's status in `batch`), so the policies around a wire
(`retry`, `request_rules`, `limits`, `caller`) read one vocabulary: what went wrong (`kind`), the HTTP
status, how long the server asked us to wait, the parameter it rejected, and the server's own words.
No provider's exception class leaves its module, and nothing is dressed up as a response it was not.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import JsonValue

from judgebench_flows.core.errors import FatalEndpointError
from judgebench_flows.core.secrets import redact

Kind = Literal["timeout", "connection", "status", "bad_answer", "other"]
# HTTP statuses worth another try besides 5xx: a timeout, a conflict, too early, a rate limit.
RETRIED_STATUSES = frozenset({408, 409, 425, 429})
# How a gateway says "no such model" with a 400 (LiteLLM: "Invalid model name passed in model=...", Bedrock:
# "The provided model identifier is invalid.").
UNKNOWN_MODEL = re.compile(
    r"invalid model name|model[^.;:]{0,80}(does not exist|not found|is not supported)|no such model|unknown model"
    r"|model identifier is invalid",  # AWS Bedrock's ValidationException
    re.IGNORECASE,
)


def retried_status(status: int) -> bool:
    """Whether an HTTP error answer may go otherwise if sent again (429, 5xx, 408/409/425); any other
    4xx rejects the request itself and fails the same way however often it is sent."""
    return status in RETRIED_STATUSES or status >= 500


class CallError(Exception):
    """A failed attempt: `kind` "timeout", "connection" (failed or dropped), "status" (an HTTP error
    answer: `status`, the body's `error` object, `message` the server's words whole and redacted,
    `retry_after` seconds if it asked, `param` the parameter it rejected when it named one), "bad_answer"
    (a 200 whose body is not a usable answer: `transport.BadAnswerBody`), or "other" (`message` says what).
    Its properties and methods are the one place each decision about a failure is made: retried or not,
    fatal for the run, how it reads."""

    def __init__(
        self,
        kind: Kind,
        status: int = 0,
        message: str = "",
        error: dict[str, JsonValue] | None = None,
        retry_after: float | None = None,
        param: str | None = None,
    ):
        self.kind, self.status, self.message = kind, status, message
        self.error = dict(error or {})
        self.retry_after, self.param = retry_after, param
        super().__init__(self.describe())

    def __reduce__(self):  # Prefect and Dask pickle exceptions
        return (CallError, (self.kind, self.status, self.message, self.error, self.retry_after, self.param))

    @property
    def code(self) -> str:
        """The error's code when it says more than the HTTP status (vLLM and LiteLLM put the status there)."""
        text = str(self.error.get("code") or self.error.get("type") or "")
        return "" if not text or text == str(self.status) else text

    @property
    def retryable(self) -> bool:
        """Timeouts, dropped connections, a broken answer, 408/409/425, 429 and 5xx (Anthropic's 529
        "overloaded" too)."""
        if self.kind in ("timeout", "connection", "bad_answer"):
            return True
        return self.kind == "status" and retried_status(self.status)

    @property
    def rate_limited(self) -> bool:
        return self.kind == "status" and self.status == 429

    @property
    def unknown_model(self) -> bool:
        """A 400 or 404 that says the model is unknown: the same mistake as OpenAI's 404, on any server."""
        return self.status in (400, 404) and (
            str(self.error.get("code") or "") == "model_not_found" or bool(UNKNOWN_MODEL.search(self.message))
        )

    @property
    def fatal(self) -> bool:
        """No later call to this endpoint can succeed either: a refused key, an unknown model or API."""
        return self.status in (401, 403, 404) or self.unknown_model

    @property
    def server_message(self) -> str:
        """What the server said about this failure, whole and on one line (redacted); "" if it said nothing."""
        return self.message if self.kind == "status" else ""

    def failure_kind(self) -> str:
        """The failure without the server's words: calls failing "alike" share it (the early stop's test)."""
        if self.kind == "status":
            return f"HTTP {self.status}" + (f" ({self.code})" if self.code else "")
        return self.describe()

    def describe(self) -> str:
        """The failure in one line, free of secrets; an HTTP error keeps the server's message whole
        (`HTTP 400 (context_length_exceeded): This model's maximum ...`)."""
        if self.kind == "timeout":
            return "request timed out"
        if self.kind == "connection":
            return "connection failed or dropped"
        if self.kind == "bad_answer":
            return "the endpoint answered 200 with a body that is not a JSON object"
        if self.kind == "status":
            return redact(self.failure_kind() + (f": {self.message}" if self.message else ""))
        return redact(self.message)

    def fatal_error(
        self, base_url: str, model: str, api: str = "chat", key_source: str = "$OPENAI_API_KEY"
    ) -> FatalEndpointError:
        """The run-stopping error of a `fatal` failure: no later call to this endpoint can succeed either.
        `key_source` names where the key came from, never the key."""
        if self.status == 404 or self.unknown_model:
            return FatalEndpointError(
                f"the endpoint {base_url} does not know model '{model}' or its "
                f"{API_NAMES.get(api, api + ' API')} ({self.describe()})"
            )
        said = f": {self.message}" if self.message else ""  # what it refused: the key, a signature, the model
        return FatalEndpointError(
            f"the endpoint {base_url} rejected the API key (HTTP {self.status}{said}); check {key_source}"
        )


# What each endpoint API is called in messages (`CallError.fatal_error`).
API_NAMES = {
    "chat": "chat completions API",
    "completions": "completions API (/completions)",
    "pooling": "Pooling API (/pooling)",
}


def error_object(body: Any) -> dict[str, JsonValue]:
    """The error object of an error answer's body, whatever its shape (empty when it has none).

    `{"error": {...}}` (OpenAI, current vLLM, LiteLLM, Anthropic's `{"type": "error", "error": {...}}`)
    or the object itself (older vLLM: `{"object": "error", "message": ...}`); a proxy's `{"detail": "..."}`
    (FastAPI) becomes its message, `{"error": "text"}` too.
    """
    error = body.get("error", body) if isinstance(body, dict) else {}
    if isinstance(error, str):
        return {"message": error}
    if not isinstance(error, dict):
        return {}
    if "message" not in error and isinstance(error.get("detail"), str):
        return {**error, "message": error["detail"]}
    return error


def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds the server asked us to wait (`retry-after-ms` or `retry-after`), if it said."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = (headers or {}).get(name)
        if value:
            try:
                return max(0.0, float(value) * scale)
            except ValueError:
                continue
    return None


def http_error(
    status: int, body: Any, headers: Mapping[str, str] | None = None, text: str = "", param: str | None = None
) -> CallError:
    """The `CallError` of an HTTP error answer: its status, error object and the server's words (the body's
    message, else its text unless that is an HTML page), on one line and redacted."""
    error = error_object(body)
    said = error.get("message")
    if not isinstance(said, str) or not said.strip():
        said = text if text.strip() and not text.lstrip().startswith("<") else ""
    if param:
        error = {**error, "code": "unsupported_parameter", "param": param}
    message = redact(" ".join(str(said).split()))
    return CallError("status", status, message, error, retry_after(headers), param)

"""Which failed attempts are worth another try, how long to wait before it, and how a failure reads.

429, 5xx, 408/409/425, timeouts, dropped connections and a 200 whose body is not a JSON object are
retried with exponential backoff and full jitter (tenacity), never sooner than the server's
`Retry-After`; a bad key or an unknown model is fatal for the run (`fatal_error`); any other 4xx fails
that one call with its reason (`describe`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import openai
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from judgebench_flows.calls.transport import BadAnswerBody
from judgebench_flows.core.errors import FatalEndpointError
from judgebench_flows.core.secrets import redact


def retryable(exc: BaseException) -> bool:
    if isinstance(exc, BadAnswerBody):
        return True
    if isinstance(
        exc, (openai.APITimeoutError, openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError)
    ):
        return True
    return isinstance(exc, openai.APIStatusError) and (exc.status_code in (408, 409, 425) or exc.status_code >= 500)


def retry_after(exc: BaseException | None) -> float | None:
    """Seconds the server asked us to wait (`retry-after-ms` or `retry-after`), if it said."""
    response = getattr(exc, "response", None)
    if response is None:
        return None
    headers = response.headers
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value:
            try:
                return max(0.0, float(value) * scale)
            except ValueError:
                continue
    return None


def error_of(exc: openai.APIStatusError) -> dict[str, Any]:
    """The `error` object of an error answer's body (empty when it has none)."""
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error", body) if isinstance(body, dict) else {}
    return error if isinstance(error, dict) else {}


def describe(exc: BaseException) -> str:
    """A failure in one line, free of secrets: what a failed judgment records as its reason."""
    if isinstance(exc, openai.APITimeoutError):
        return "request timed out"
    if isinstance(exc, openai.APIConnectionError):
        return "connection failed or dropped"
    if isinstance(exc, BadAnswerBody):
        return "the endpoint answered 200 with a body that is not a JSON object"
    if isinstance(exc, openai.APIStatusError):
        error = error_of(exc)
        detail = error.get("code") or error.get("message")
        return redact(f"HTTP {exc.status_code}" + (f" ({detail})" if detail else ""))
    return redact(f"{type(exc).__name__}: {exc}")


FATAL = (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError)


def fatal_error(exc: BaseException, base_url: str, model: str) -> FatalEndpointError:
    """The run-stopping error for one of `FATAL`: no later call to this endpoint can succeed either."""
    if isinstance(exc, openai.NotFoundError):
        return FatalEndpointError(
            f"the endpoint {base_url} does not know model '{model}' or its chat API ({describe(exc)})"
        )
    return FatalEndpointError(
        f"the endpoint {base_url} rejected the API key ({describe(exc).split(' (')[0]}); check OPENAI_API_KEY"
    )


@dataclass
class RetryPolicy:
    max_retries: int = 6
    initial_wait: float = 1.0
    max_wait: float = 60.0

    def wait(self, state: RetryCallState) -> float:
        """Exponential backoff with full jitter, but never sooner than the server's Retry-After.

        `max_wait` caps our own backoff only: retrying before the server's Retry-After just earns another
        429 and burns an attempt, so an explicit Retry-After is honoured even when it is longer.
        """
        exponential = min(self.max_wait, self.initial_wait * 2 ** (state.attempt_number - 1))
        jittered = random.uniform(exponential / 2, exponential)
        asked = retry_after(state.outcome.exception() if state.outcome else None)
        if asked is not None:
            return max(asked, 0.0) + random.uniform(0, 0.1 * max(asked, 0.01))
        return jittered

    def attempts(self) -> AsyncRetrying:
        """The attempts of one call (iterate with `async for`); the last failure is re-raised as is."""
        return AsyncRetrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=self.wait,
            retry=retry_if_exception(retryable),
            reraise=True,
        )

"""`--provider gemini` and `--provider vertex`: Google's OpenAI-compatible chat endpoints on the OpenAI wire.

Both serve chat completions, so the wire is `transport.Transport` (the openai SDK, one attempt, no
retries), with what Google adds:

- gemini: the Gemini API (`config.GEMINI_API_ROOT`), its key (`GEMINI_API_KEY`) sent as a bearer key. Google
  answers a wrong key with a 400 `API_KEY_INVALID`, not a 401: it is read as the bad key it is (the
  run stops at once, naming where the key came from).
- vertex: Vertex AI's endpoint for a project and location (`google_adc.vertex_base_url`), models named
  `google/<model>` as JudgeBench's `GeminiAPI` sends them, and an OAuth access token from Application
  Default Credentials through google-auth (`VertexToken`). JudgeBench fetched one token per run, so its
  runs past the token's hour failed; here one token per run and credentials (`state.CallState`) is shared
  by every call, shard and event loop, refreshed before it expires and once more when a call is answered 401.
- An answer without a message (Gemini under load; JudgeBench retries it) is retried like a 5xx.
- Google's error bodies (`[{"error": {"code", "message", "status"}}]`) are read as OpenAI's, and a 400
  refusing a parameter by name carries `code`/`param`, so the run drops it (`request_rules.Learned`).
- Gemini 2.5 thinking models count their thinking against `max_tokens` (`GEMINI_MODELS`): the judge's
  `max_tokens` is its answer's budget, so room for thinking is added, within the model's output cap.

No token, key or service-account content is ever logged, stored or put in an error: the token is
registered for redaction the moment it is read, and only google-auth reads the credentials file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import openai

from judgebench_flows.calls.errors import CallError, http_error
from judgebench_flows.calls.tokens import RefreshedToken
from judgebench_flows.calls.transport import (
    BadAnswerBody,
    JsonBody,
    Transport,
    completion_from,
    json_messages,
    openai_call_error,
)
from judgebench_flows.core.completion import Completion, Sampling
from judgebench_flows.core.google_adc import default_credentials
from judgebench_flows.core.secrets import redact

CHAT_PATH = "/chat/completions"
# How a 400 refuses a parameter in Google's words (not a value out of range: that is our input's error).
REFUSED = re.compile(r"unknown name|cannot find field|not supported|unsupported|invalid json payload", re.IGNORECASE)
BAD_KEY = re.compile(r"api key not valid|api_key_invalid", re.IGNORECASE)


def vertex_model(model: str) -> str:
    """The model name Vertex's OpenAI-compatible endpoint expects: `google/<model>` for Google's own."""
    return model if "/" in model else f"google/{model}"


@dataclass(frozen=True)
class GeminiModel:
    """What a Gemini family enforces: its cap on one answer (thinking included), and how much thinking
    it may do by default (dynamic thinking; 0: it does not think unless asked)."""

    max_output_tokens: int
    thinking_tokens: int = 0


# Model-name prefix -> limits; the longest matching prefix wins (names after any `google/`).
GEMINI_MODELS: dict[str, GeminiModel] = {
    "gemini-1.5": GeminiModel(8192),
    "gemini-2.0": GeminiModel(8192),
    "gemini-2.5-pro": GeminiModel(65536, thinking_tokens=32768),
    "gemini-2.5-flash": GeminiModel(65536, thinking_tokens=24576),
    "gemini-2.5-flash-lite": GeminiModel(65536),
}
# The thinking budget each reasoning_effort stands for on Google's OpenAI-compatible endpoints.
EFFORT_THINKING_TOKENS = {"low": 1024, "medium": 8192, "high": 24576}


def gemini_model(model: str) -> GeminiModel | None:
    name = model.rsplit("/", 1)[-1].lower()
    matches = [prefix for prefix in GEMINI_MODELS if name.startswith(prefix)]
    return GEMINI_MODELS[max(matches, key=len)] if matches else None


def token_budget(model: str, sampling: Sampling) -> Sampling:
    """The sampling with `max_tokens` as the model takes it: the judge's answer budget plus room for the
    thinking a 2.5 model spends from the same budget, never above the model's cap (which it refuses)."""
    limits = gemini_model(model)
    asked = sampling.get("max_tokens")
    if limits is None or not isinstance(asked, int):
        return sampling
    effort = sampling.get("reasoning_effort")
    thinking = EFFORT_THINKING_TOKENS.get(str(effort), limits.thinking_tokens) if limits.thinking_tokens else 0
    return {**sampling, "max_tokens": min(limits.max_output_tokens, asked + thinking)}


def google_error(exc: openai.APIStatusError, sent: JsonBody) -> CallError:
    """The `CallError` of a Google error answer: its list body read as OpenAI's `{"error": {...}}`, a bad
    key as 401, a refused parameter named (`param`)."""
    body: Any = exc.body
    if isinstance(body, list) and body and isinstance(body[0], dict):
        body = body[0]
    if not isinstance(body, dict):
        return openai_call_error(exc)
    error = dict(body.get("error") or {}) if isinstance(body.get("error"), dict) else {}
    message = str(error.get("message") or exc.message)
    status = exc.status_code
    param = None
    if status in (400, 403) and BAD_KEY.search(message + json.dumps(error.get("details") or "")):
        status = 401
    elif status == 400 and REFUSED.search(message):
        param = next(
            (
                name
                for name in sorted(sent, key=len, reverse=True)
                if name not in ("model", "messages") and re.search(rf"(?<![A-Za-z_]){name}(?![A-Za-z_])", message)
            ),
            None,
        )
    error.setdefault("message", message)
    if isinstance(error.get("code"), int):  # Google's numeric code is the HTTP status; its `status` says more
        error["code"] = error.get("status") or error["code"]
    return http_error(status, {"error": error}, exc.response.headers, param=param)


class VertexToken(RefreshedToken):
    """One OAuth access token from Application Default Credentials (or the credentials given), shared by
    every call of a run and refreshed before it expires (`tokens.RefreshedToken`). google-auth's own
    `expired` would refresh 3 min 45 s early; the deadline is the token's own."""

    def __init__(self, credentials: Any = None):
        super().__init__()
        self._credentials = credentials

    def _take(self) -> tuple[str, float]:
        import google.auth.transport.requests

        credentials = self._credentials or default_credentials()[0]
        self._credentials = credentials
        try:
            credentials.refresh(google.auth.transport.requests.Request())
        except Exception as exc:  # noqa: BLE001 - google-auth's errors, as the rest of calls/ reads errors
            raise token_error(exc) from None
        return str(credentials.token), seconds_left(credentials.expiry)


def seconds_left(expiry: datetime | None) -> float:
    """Seconds until google-auth's expiry (a naive UTC time; None: a token without one, taken as an hour)."""
    if expiry is None:
        return 3600.0
    return max(0.0, (expiry.replace(tzinfo=timezone.utc) - datetime.now(timezone.utc)).total_seconds())


def token_error(exc: Exception) -> CallError:
    """A failed token refresh as a `CallError`: retried when google-auth says it may be (the token endpoint
    unreachable or busy), else a rejected credential (the run stops)."""
    import google.auth.exceptions

    reason = redact(" ".join(str(exc.args[0] if exc.args else exc).split())[:300])
    if isinstance(exc, google.auth.exceptions.TransportError) or getattr(exc, "retryable", False):
        return CallError("connection", message=f"token refresh failed: {reason}")
    return CallError("status", 401, f"token refresh refused: {reason}")


class GoogleTransport(Transport):
    """The OpenAI wire for `--provider gemini` and `--provider vertex` (see the module docstring)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str,
        request_timeout: float,
        concurrency: int,
        token: VertexToken | None = None,
    ):
        self.token = token  # Vertex's: a token per request instead of the key
        # Vertex: the key slot is never a secret (each request carries the current token instead).
        super().__init__(base_url, model, "adc" if self.token else api_key, request_timeout, concurrency)
        self.sent_model = vertex_model(model) if self.token else model
        self.closers: list[Callable[[], Awaitable[None]]] = []  # what else closes with it (a batch client)

    def body(self, messages: list[dict[str, str]], sampling: Sampling) -> JsonBody:
        """The chat body sent (and a batch line's): the model as the endpoint names it, the token budget."""
        return {"model": self.sent_model, "messages": json_messages(messages), **token_budget(self.model, sampling)}

    async def post(self, messages: list[dict[str, str]], sampling: Sampling) -> Any:
        body = self.body(messages, sampling)
        client = next(self._next_client)
        stale: str | None = None
        for attempt in range(2 if self.token else 1):
            options: openai.RequestOptions = {}
            if self.token is not None:
                stale = await self.token.bearer(stale)
                options = {"headers": {"Authorization": f"Bearer {stale}"}}
            try:
                return await client.post(CHAT_PATH, cast_to=dict, body=body, options=options)
            except json.JSONDecodeError as exc:
                raise BadAnswerBody() from exc
            except openai.APIStatusError as exc:
                error = google_error(exc, body)
                if error.status == 401 and self.token is not None and attempt == 0:
                    continue  # the token expired or was revoked early: one fresh token, one more try
                raise error from None
            except openai.APIError as exc:
                raise openai_call_error(exc) from None
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        for close in self.closers:
            await close()
        await super().aclose()

    @staticmethod
    def read(response: Any) -> Completion:
        """A chat answer; one without a message (Gemini under load) is a broken answer, retried. Thinking
        tokens Gemini reports only in `total_tokens` are paid as output, as Google bills them."""
        try:
            choices = response.get("choices") if isinstance(response, dict) else None
            choice = choices[0] if isinstance(choices, list) and choices else None
            message = choice.get("message") if isinstance(choice, dict) else None
            if not isinstance(message, dict) or (
                not message.get("content") and choice.get("finish_reason") in (None, "stop")  # type: ignore[union-attr]
            ):
                raise BadAnswerBody()
            completion = completion_from(response)
            usage = response.get("usage") or {}
            thinking = int(usage.get("total_tokens") or 0) - completion.prompt_tokens - completion.completion_tokens
            if thinking > 0 and not completion.reasoning_tokens:
                completion.completion_tokens += thinking
                completion.reasoning_tokens = thinking
            return completion
        except (ValueError, TypeError, AttributeError) as exc:
            raise BadAnswerBody() from exc


class GeminiTransport(GoogleTransport):
    """`--provider gemini` (the factory's uniform constructor)."""

    def __init__(self, base_url: str, model: str, api_key: str, request_timeout: float, concurrency: int):
        super().__init__(base_url, model, api_key, request_timeout, concurrency)


class VertexTransport(GoogleTransport):
    """`--provider vertex` (the factory's uniform constructor, plus the run's token: `state.CallState.
    vertex_token`): an ADC token, never a key."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str,
        request_timeout: float,
        concurrency: int,
        token: VertexToken | None = None,
    ):
        super().__init__(base_url, model, api_key, request_timeout, concurrency, token or VertexToken())

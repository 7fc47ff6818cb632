"""Which failed attempts are worth another try, how long to wait before it, and how a failure reads.

429, 5xx, 408/409/425, timeouts, dropped connections and a 200 whose body is not a JSON object are
retried with exponential backoff and full jitter (tenacity), never sooner than the server's
`Retry-After`; a bad key or an unknown model (a 404, or a gateway's 400 saying so) is fatal for the run
(`fatal_error`); any other 4xx is deterministic (context too long, invalid request): that one call fails
at once with its reason (`describe`), which keeps the server's message whatever the shape of its body.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
from dataclasses import dataclass

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from judgebench_flows.calls.errors import CallError
from judgebench_flows.calls.transport import BadAnswerBody
from judgebench_flows.core.errors import FatalEndpointError
from judgebench_flows.core.secrets import redact


def retryable(exc: BaseException) -> bool:
    return isinstance(exc, BadAnswerBody) or (isinstance(exc, CallError) and exc.retryable)


def retry_after(exc: BaseException | None) -> float | None:
    """Seconds the server asked us to wait, if it said."""
    return exc.retry_after if isinstance(exc, CallError) else None


def server_message(exc: BaseException) -> str:
    """What the server said about this failure, whole and on one line (secrets redacted); "" if nothing."""
    return exc.message if isinstance(exc, CallError) and exc.kind == "status" else ""


def failure_kind(exc: BaseException) -> str:
    """A failure without the server's words: calls failing "alike" share it (the early stop's test)."""
    return exc.failure_kind() if isinstance(exc, CallError) else describe(exc)


def describe(exc: BaseException) -> str:
    """A failure in one line, free of secrets: what a failed judgment records as its reason. An HTTP error
    keeps the server's message whole (`HTTP 400 (context_length_exceeded): This model's maximum ...`)."""
    if isinstance(exc, CallError):
        return exc.describe()
    if isinstance(exc, BadAnswerBody):
        return "the endpoint answered 200 with a body that is not a JSON object"
    return redact(f"{type(exc).__name__}: {exc}")


# A failure's reason as `describe` and the caller write it: "HTTP 400 (...): ...", "HTTP 503 after 3 attempts".
REASON_STATUS = re.compile(r"^HTTP (\d{3})\b")


def deterministic_reason(reason: str | None) -> bool:
    """Whether a recorded failure (`describe`'s reason, a judgment's `error`) is a rejection of the request
    itself (a 4xx that is not retried: context too long, invalid request), which fails the same way however
    often it is sent. Timeouts, dropped connections, 429 and 5xx are not."""
    found = REASON_STATUS.match(reason or "")
    if not found:
        return False
    status = int(found.group(1))
    return 400 <= status < 500 and status not in (408, 409, 425, 429)


# What each endpoint API is called in messages (other_apis).
API_NAMES = {
    "chat": "chat completions API",
    "completions": "completions API (/completions)",
    "pooling": "Pooling API (/pooling)",
}


def unknown_model(exc: BaseException) -> bool:
    """A 400 or 404 that says the model is unknown: the same mistake as OpenAI's 404, on any server."""
    return isinstance(exc, CallError) and exc.unknown_model


def fatal_error(
    exc: CallError, base_url: str, model: str, api: str = "chat", key_source: str = "$OPENAI_API_KEY"
) -> FatalEndpointError:
    """The run-stopping error for a `CallError.fatal` failure: no later call to this endpoint can succeed
    either. `key_source` names where the key came from, never the key."""
    if exc.status == 404 or exc.unknown_model:
        return FatalEndpointError(
            f"the endpoint {base_url} does not know model '{model}' or its {API_NAMES.get(api, api + ' API')} "
            f"({describe(exc)})"
        )
    said = f": {exc.message}" if exc.message else ""  # what it refused: the key, a signature, access to the model
    return FatalEndpointError(
        f"the endpoint {base_url} rejected the API key (HTTP {exc.status}{said}); check {key_source}"
    )


@dataclass
class RetryPolicy:
    max_retries: int = 6
    initial_wait: float = 1.0
    max_wait: float = 60.0
    # Set when no retry can help any more (the endpoint is unreachable): waits between attempts end at once.
    wake: asyncio.Event | None = None

    async def _sleep(self, seconds: float) -> None:
        if self.wake is None:
            await asyncio.sleep(seconds)
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.wake.wait(), seconds)

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

    def attempts(self, left: int | None = None) -> AsyncRetrying:
        """The attempts of one call (iterate with `async for`), `left` of them if fewer than the policy's
        (`budget`); the last failure is re-raised as is."""
        return AsyncRetrying(
            stop=stop_after_attempt(self.max_retries + 1 if left is None else left),
            wait=self.wait,
            retry=retry_if_exception(retryable),
            reraise=True,
            sleep=self._sleep,
        )

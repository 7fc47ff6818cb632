"""The retry policy: which failed attempts get another try, and how long to wait before it.

What a failure is (retried or not, fatal for the run, how it reads) is `CallError`'s to say
(`CallError.retryable`, `.fatal`, `.describe()`); the policy retries what it calls retryable with
exponential backoff and full jitter (tenacity), never sooner than the server's `Retry-After`, and
nothing else: any other exception is not a failed attempt and ends the call as it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
from dataclasses import dataclass

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from judgebench_flows.calls.errors import CallError, retried_status

# A failure's reason as `CallError.describe` and the caller write it: "HTTP 400 (...): ...", "HTTP 503 after
# 3 attempts".
REASON_STATUS = re.compile(r"^HTTP (\d{3})\b")


def deterministic_reason(reason: str | None) -> bool:
    """Whether a recorded failure (a judgment's `error`) is a rejection of the request itself (a 4xx that
    is not retried: context too long, invalid request), which fails the same way however often it is sent.
    Timeouts, dropped connections, 429 and 5xx are not."""
    found = REASON_STATUS.match(reason or "")
    return found is not None and 400 <= int(found.group(1)) < 500 and not retried_status(int(found.group(1)))


@dataclass
class RetryPolicy:
    max_retries: int = 6
    initial_wait: float = 1.0
    max_wait: float = 60.0
    # Set when no retry can help any more (the endpoint is unreachable): waits between attempts end at once.
    wake: asyncio.Event | None = None

    @staticmethod
    def retries(exc: BaseException) -> bool:
        """Whether `exc` is a failed attempt worth another (`CallError.retryable`); any other exception
        (a stopped run, a spent budget, a bug) is not."""
        return isinstance(exc, CallError) and exc.retryable

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
        failed = state.outcome.exception() if state.outcome else None
        asked = failed.retry_after if isinstance(failed, CallError) else None
        if asked is not None:
            return max(asked, 0.0) + random.uniform(0, 0.1 * max(asked, 0.01))
        return jittered

    def attempts(self, left: int | None = None) -> AsyncRetrying:
        """The attempts of one call (iterate with `async for`), `left` of them if fewer than the policy's
        (`budget`); the last failure is re-raised as is."""
        return AsyncRetrying(
            stop=stop_after_attempt(self.max_retries + 1 if left is None else left),
            wait=self.wait,
            retry=retry_if_exception(self.retries),
            reraise=True,
            sleep=self._sleep,
        )

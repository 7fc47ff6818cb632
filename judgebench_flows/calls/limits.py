"""How many attempts may be in flight, and how fast they may start.

One `asyncio.Semaphore` per endpoint and event loop (`state.CallState.shared_limits`: every caller of
that endpoint in the run with the same limits, e.g. the nightly matrix's cells on one endpoint, shares it)
bounds attempts in flight across all shards and runs; an optional requests-per-minute pacer spaces their starts; with
`--adaptive-concurrency` the in-process limit halves on a 429 and grows back slowly. Across processes
(Dask workers, separate runs) the run holds slots of a Prefect global concurrency limit for each shard
(`global_limits`), and the shard's semaphore is its share: attempts take no slot of their own.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from typing_extensions import NotRequired, TypedDict  # pydantic validates these (the night's event) on Python < 3.12

from judgebench_flows.calls.errors import CallError
from judgebench_flows.calls.global_limits import wait_for_rate

T = TypeVar("T")
# What limits are shared by: endpoint label, concurrency, request timeout, rpm, adaptive, global rate limit.
LimitKey = tuple[str, int, float, float | None, bool, str | None]


class UsageSeen(TypedDict):
    """What one limit's endpoint did: attempts sent, busy seconds, the most attempts in flight at once."""

    calls: int
    busy_s: float
    max_in_flight: int


class EndpointUse(UsageSeen):
    """One endpoint's usage over a run's limits, with its concurrency (the night's summary and event),
    and its busy share: busy time over the night's wall time (set by the night once it ends)."""

    concurrency: int
    busy_share: NotRequired[float]


class RatePacer:
    """Spaces request starts to stay under a requests-per-minute budget (in this process)."""

    def __init__(self, rpm: float):
        self.interval = 60.0 / rpm
        self._next = 0.0
        self._lock = asyncio.Lock()

    async def wait(self) -> None:
        async with self._lock:
            now = time.monotonic()
            delay = self._next - now
            self._next = max(now, self._next) + self.interval
        if delay > 0:
            await asyncio.sleep(delay)


class AdaptiveLimit:
    """An in-process limit that halves on a 429 and grows back by one after `limit` successes in a row.

    An endpoint that throttles us is better served by fewer calls in flight than by every call backing
    off and retrying at once. Only a 429 to a call that started after the last cut cuts again, so one
    burst of 429s (all those calls were sent under the old limit) halves the limit once, not to 1.
    Waiting calls are let in first come, first served.
    """

    def __init__(self, maximum: int):
        self.maximum = maximum
        self.limit = maximum
        self.lowest = maximum
        self._in_use = 0
        self._successes = 0
        self._epoch = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def acquire(self) -> int:
        """Take a slot; returns the epoch the call starts in (for `rate_limited`)."""
        if self._in_use < self.limit and not self._waiters:
            self._in_use += 1
            return self._epoch
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # the releaser counted us in
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            raise
        return self._epoch

    def release(self) -> None:
        self._in_use -= 1
        self._let_in()

    def rate_limited(self, epoch: int) -> None:
        if epoch == self._epoch:
            self.limit = max(1, self.limit // 2)
            self.lowest = min(self.lowest, self.limit)
            self._epoch += 1
            self._successes = 0

    def succeeded(self) -> None:
        self._successes += 1
        if self._successes >= self.limit and self.limit < self.maximum:
            self._successes = 0
            self.limit += 1
            self._let_in()

    def _let_in(self) -> None:
        while self._waiters and self._in_use < self.limit:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self._in_use += 1
                waiter.set_result(None)


class CallLimits:
    """Every limit one attempt passes before it is sent, held while it is in flight."""

    def __init__(
        self,
        concurrency: int,
        request_timeout: float,
        rpm: float | None = None,
        adaptive: bool = False,
        global_rate_limit: str | None = None,
    ):
        self.slots = asyncio.Semaphore(concurrency)
        self.pacer = RatePacer(rpm) if rpm else None
        self.adaptive = AdaptiveLimit(concurrency) if adaptive else None
        self.global_rate_limit = global_rate_limit
        self.usage = EndpointUsage()

    async def run(self, send: Callable[..., Awaitable[T]], *args: Any) -> T:
        """`send(*args)` (one attempt) once the rate budget and a slot allow it."""
        if self.pacer:
            await self.pacer.wait()
        if self.global_rate_limit:
            await wait_for_rate(self.global_rate_limit)
        if self.adaptive is None:  # the default: nothing but the semaphore
            async with self.slots:
                return await self.usage.timed(send, *args)
        return await self._adaptive(self.adaptive, send, *args)

    async def _adaptive(self, adaptive: AdaptiveLimit, send: Callable[..., Awaitable[T]], *args: Any) -> T:
        """A slot of the adaptive limit, cut when the endpoint answers 429."""
        epoch = await adaptive.acquire()
        try:
            response = await self.usage.timed(send, *args)
        except CallError as exc:
            if exc.rate_limited:
                adaptive.rate_limited(epoch)
            raise
        finally:
            adaptive.release()
        adaptive.succeeded()
        return response


# Busy periods a limit keeps (wall-clock [start, end] seconds, for a pool night's union across cell runs);
# past this many, the two closest are joined (the gap between them then counts as busy: never less).
MAX_BUSY_PERIODS = 2000


class EndpointUsage:
    """What one limit's endpoint did in this process: attempts sent, the most in flight at once, and
    its busy time (seconds with at least one attempt in flight), for the night's summary; with its busy
    periods in wall-clock time, so a pool night can take the union of its cell runs' periods on one
    endpoint (flows/pool_cells.py) instead of summing overlaps twice."""

    def __init__(self) -> None:
        self.calls = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.busy_s = 0.0
        self._busy_since = 0.0
        self._busy_since_wall = 0.0
        self.periods: list[tuple[float, float]] = []

    async def timed(self, send: Callable[..., Awaitable[T]], *args: Any) -> T:
        self.calls += 1
        if not self.in_flight:
            self._busy_since, self._busy_since_wall = time.monotonic(), time.time()
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await send(*args)
        finally:
            self.in_flight -= 1
            if not self.in_flight:
                self.busy_s += time.monotonic() - self._busy_since
                self._close_period(time.time())

    def _close_period(self, end: float) -> None:
        self.periods.append((self._busy_since_wall, max(end, self._busy_since_wall)))
        if len(self.periods) > MAX_BUSY_PERIODS:
            gaps = [b[0] - a[1] for a, b in zip(self.periods, self.periods[1:], strict=False)]
            i = gaps.index(min(gaps))
            self.periods[i : i + 2] = [(self.periods[i][0], self.periods[i + 1][1])]

    def seen(self) -> UsageSeen:
        busy = self.busy_s + (time.monotonic() - self._busy_since if self.in_flight else 0.0)
        return {"calls": self.calls, "busy_s": round(busy, 3), "max_in_flight": self.max_in_flight}

    def busy_periods(self) -> list[tuple[float, float]]:
        """The wall-clock periods with at least one attempt in flight, the current one up to now."""
        return [*self.periods, (self._busy_since_wall, time.time())] if self.in_flight else list(self.periods)


def union_seconds(periods: list[tuple[float, float]]) -> float:
    """Seconds covered by at least one of `periods` (overlaps counted once): an endpoint's busy time
    over runs that overlapped."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(periods):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def endpoint_label(provider: str, base_url: str) -> str:
    """An endpoint as limits are shared and reported: provider, scheme, host, port and path, never the
    credentials a URL may hold (the matrix's `endpoint_of` names it the same way)."""
    parts = urlsplit(base_url.strip().rstrip("/"))
    if not parts.scheme:
        return f"{provider} {base_url}"
    host = (parts.hostname or "").lower() + (f":{parts.port}" if parts.port else "")
    return f"{provider} {parts.scheme.lower()}://{host}{parts.path}"

"""How many attempts may be in flight, and how fast they may start.

One `asyncio.Semaphore` per caller (one caller per endpoint and event loop) bounds attempts in flight
across all shards; an optional requests-per-minute pacer spaces their starts; with
`--adaptive-concurrency` the in-process limit halves on a 429 and grows back slowly; on Dask a Prefect
global concurrency limit (`global_limits`) also bounds every worker together.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from judgebench_flows.calls.errors import CallError
from judgebench_flows.calls.global_limits import GlobalSlots, wait_for_rate

T = TypeVar("T")


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
        global_limit: str | None = None,
        global_rate_limit: str | None = None,
    ):
        self.slots = asyncio.Semaphore(concurrency)
        self.pacer = RatePacer(rpm) if rpm else None
        self.adaptive = AdaptiveLimit(concurrency) if adaptive else None
        self.global_slots = GlobalSlots(global_limit, request_timeout) if global_limit else None
        self.global_rate_limit = global_rate_limit
        self._only_semaphore = self.adaptive is None and self.global_slots is None

    async def run(self, send: Callable[..., Awaitable[T]], *args: Any) -> T:
        """`send(*args)` (one attempt) once the rate budget and a slot allow it."""
        if self.pacer:
            await self.pacer.wait()
        if self.global_rate_limit:
            await wait_for_rate(self.global_rate_limit)
        if self._only_semaphore:  # the default: nothing but the semaphore
            async with self.slots:
                return await send(*args)
        return await self._limited(send, *args)

    async def _limited(self, send: Callable[..., Awaitable[T]], *args: Any) -> T:
        """An in-process slot (adaptive, or the semaphore), then a slot of the global limit.

        The in-process slot is freed first and the global one given back a loop tick later, so the call
        that was waiting for the in-process slot is already waiting for a global one and takes the lease
        over directly. With equal limits (in-process runs) every lease would otherwise go back to the
        Prefect server and be asked for again.
        """
        epoch = 0
        if self.adaptive:
            epoch = await self.adaptive.acquire()
        else:
            await self.slots.acquire()
        lease = None
        try:
            if self.global_slots:
                lease = await self.global_slots.take()
            try:
                response = await send(*args)
            except CallError as exc:
                if self.adaptive and exc.rate_limited:
                    self.adaptive.rate_limited(epoch)
                raise
        finally:
            if self.adaptive:
                self.adaptive.release()
            else:
                self.slots.release()
            if lease is not None:
                await asyncio.sleep(0)
                await self.global_slots.give_back(lease)  # type: ignore[union-attr]
        if self.adaptive:
            self.adaptive.succeeded()
        return response

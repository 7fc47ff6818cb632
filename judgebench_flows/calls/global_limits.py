"""One concurrency limit and one requests-per-minute limit per endpoint and model, for every process.

In-process shards share one `asyncio.Semaphore`, but Dask workers are separate processes (and each shard
task runs in its own event loop there), so a limit that must hold across all of them lives in the
Prefect server: a global concurrency limit named after the endpoint and model. Every HTTP attempt holds
one of its slots while it is in flight; the local semaphore stays in front of it, so a process never asks
the server for more than its own share.

Why not `prefect.concurrency.asyncio.concurrency()` around each attempt: measured against a local Prefect
server it costs ~190 ms per call (each use starts a lease-renewal thread with its own client and emits
events) and, with 160 calls of 50 ms at limit 4, took 55 s instead of 2 s, because waiters poll with the
server's Retry-After (derived from average occupancy, up to 30 s). Here one lease is taken per attempt
with the same server API (`increment-with-lease`), without renewal: an attempt is bounded by the
request timeout, so the lease only has to outlive that; if a worker dies its slots come back when the
lease expires. A lease that a finished attempt no longer needs goes straight to the next waiting attempt
of the same event loop for up to `REUSE_SECONDS` (no round trip), then back to the server so other
workers get their turn. Only one request per event loop polls the server for a slot, on its own short
backoff rather than the server's Retry-After, so a freed slot is not left idle for seconds. Measured
with `benchmarks/bench_global_limit.py`: ~18-25 ms per call when calls run one at a time (two API
requests), and two workers x 100 calls of 50 ms at limit 4 in 2.9 s (bound 2.5 s) with 10-13 leases.

Requests per minute use Prefect's `rate_limit()` on a second limit whose slots decay at rpm/60 per
second: that path takes one request per call and no lease, and its waits are long anyway.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import random
import time
from collections import deque
from dataclasses import dataclass, field
from uuid import UUID

import httpx

from judgebench_flows.core.errors import UserError

REUSE_SECONDS = 2.0  # how long a lease may pass from one attempt to the next inside a process
POLL_MIN_SECONDS = 0.01  # first wait after the server says the limit is full
POLL_MAX_SECONDS = 0.25  # longest wait between polls: bounds how long a freed slot can stay unused
LEASE_MARGIN_SECONDS = 60.0
GIVE_UP_SECONDS = 60.0  # a Prefect server that keeps failing this long fails the run
RELEASE_TRIES = 8
LOCKED = 423
TRANSIENT = frozenset({408, 429, 500, 502, 503, 504})


class GlobalLimitError(UserError):
    """The Prefect server cannot give out the run's slots (limit deleted, server gone)."""


def limit_names(base_url: str, model: str) -> tuple[str, str]:
    """(concurrency limit, rate limit) names: a hash of endpoint and model, so no URL, user or key
    ever appears in the Prefect UI, and every run against the same endpoint and model shares them."""
    digest = hashlib.sha256(f"{base_url.rstrip('/')}\0{model}".encode()).hexdigest()[:12]
    return f"judgebench-{digest}", f"judgebench-{digest}-rpm"


async def ensure_limit(name: str, limit: int, slot_decay_per_second: float = 0.0) -> None:
    """Create the global limit, or update it when its size or decay differs (the latest run's settings
    win for every run sharing the endpoint). Concurrency limits must not decay: a decaying slot would be
    freed while its call is still in flight."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate, GlobalConcurrencyLimitUpdate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    async with get_client() as client:
        try:
            current = await client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            try:
                await client.create_global_concurrency_limit(
                    GlobalConcurrencyLimitCreate(name=name, limit=limit, slot_decay_per_second=slot_decay_per_second)
                )
                return
            except ObjectAlreadyExists:  # another run created it just now
                current = await client.read_global_concurrency_limit_by_name(name)
        if (
            current.limit != limit
            or abs((current.slot_decay_per_second or 0.0) - slot_decay_per_second) > 1e-9
            or not current.active
        ):
            await client.update_global_concurrency_limit(
                name,
                GlobalConcurrencyLimitUpdate(limit=limit, slot_decay_per_second=slot_decay_per_second, active=True),
            )


async def ensure_limits(
    concurrency_name: str | None, concurrency: int, rate_name: str | None, rpm: float | None
) -> None:
    """Both limits of a run, before any shard starts (workers only use them, with strict checks)."""
    try:
        if concurrency_name:
            await ensure_limit(concurrency_name, concurrency)
        if rate_name and rpm:
            await ensure_limit(rate_name, 1, rpm / 60.0)
    except httpx.HTTPError as exc:
        raise GlobalLimitError(f"cannot create the global concurrency limit on the Prefect server: {exc}") from None


async def wait_for_rate(name: str) -> None:
    """One request's share of the requests-per-minute budget, across all workers."""
    from prefect.concurrency.asyncio import ConcurrencySlotAcquisitionError, rate_limit

    try:
        await rate_limit(name, occupy=1, strict=True)
    except ConcurrencySlotAcquisitionError as exc:
        raise GlobalLimitError(
            f"cannot take from the requests-per-minute limit '{name}' on the Prefect server: {exc}"
        ) from None


@dataclass
class _Lease:
    id: UUID
    taken: float = field(default_factory=time.monotonic)


@dataclass
class SlotStats:
    """Where this process's slots came from: the server (`acquired`) or a finished attempt (`reused`)."""

    acquired: int = 0
    reused: int = 0
    released: int = 0
    denied: int = 0


class GlobalSlots:
    """Slots of one global concurrency limit for the attempts of one event loop (see the module doc)."""

    def __init__(self, name: str, request_timeout: float):
        self.name = name
        self.lease_seconds = min(86400.0, max(60.0, REUSE_SECONDS + 2 * request_timeout + LEASE_MARGIN_SECONDS))
        self.stats = SlotStats()
        self._waiters: deque[asyncio.Future[_Lease]] = deque()
        self._poller: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._api_context: contextvars.Context | None = None

    async def take(self) -> _Lease:
        """Wait for a slot: a lease passed on by a finished attempt of this loop, or a new one."""
        waiter: asyncio.Future[_Lease] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        if self._poller is None:
            self._poller = asyncio.create_task(self._poll(), context=self._context())
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                task = asyncio.ensure_future(self.give_back(waiter.result()))  # granted as we were cancelled
                self._background.add(task)
                task.add_done_callback(self._background.discard)
            raise

    def _hand_over(self, lease: _Lease) -> bool:
        """Give the lease to the oldest attempt still waiting; False when none is."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(lease)
                return True
        return False

    async def give_back(self, lease: _Lease) -> None:
        """To the next waiting attempt while the lease is young, else to the server, before returning:
        a shard's event loop may end right after its last call, and a slot must not outlive it."""
        if time.monotonic() - lease.taken < REUSE_SECONDS and self._hand_over(lease):
            self.stats.reused += 1
            return
        self.stats.released += 1
        await asyncio.create_task(self._release(lease), context=self._context())

    def _waiting(self) -> bool:
        return any(not waiter.done() for waiter in self._waiters)

    def _context(self) -> contextvars.Context:
        """This context with the Prefect client's own retries off, for our requests to the server.

        The client answers a 503 (a busy SQLite-backed server says "database is locked") by sleeping 2, 4,
        8 s; a release stuck in that sleep keeps its slot idle. We retry such answers ourselves within
        tens of milliseconds instead. Built once per event loop (the settings copy costs ~50 ms).
        """
        if self._api_context is None:
            from prefect.context import SettingsContext, get_settings_context
            from prefect.settings import PREFECT_CLIENT_MAX_RETRIES

            current = get_settings_context()
            settings = current.settings.copy_with_update(updates={PREFECT_CLIENT_MAX_RETRIES: 0})
            context = contextvars.copy_context()
            context.run(SettingsContext.__var__.set, SettingsContext(profile=current.profile, settings=settings))
            self._api_context = context
        return self._api_context.copy()

    async def _poll(self) -> None:
        """Ask the server for slots, one request at a time, while attempts of this loop wait for one.

        The decision to stop and clearing `_poller` happen with no await in between, so an attempt that
        starts waiting right after always finds either this poller still looping or none at all.
        """
        from prefect.client.orchestration import get_client

        backoff, failing_since = POLL_MIN_SECONDS, None
        try:
            async with get_client() as client:
                while self._waiting():
                    try:
                        lease = await self._acquire(client)
                    except (httpx.TransportError, httpx.HTTPStatusError) as exc:
                        if isinstance(exc, httpx.HTTPStatusError) and exc.response.status_code not in TRANSIENT:
                            raise
                        failing_since = failing_since or time.monotonic()
                        if time.monotonic() - failing_since > GIVE_UP_SECONDS:
                            raise
                        lease = None
                    else:
                        failing_since = None
                    if lease is None:
                        self.stats.denied += 1
                        await asyncio.sleep(random.uniform(backoff / 2, backoff))
                        backoff = min(POLL_MAX_SECONDS, backoff * 2)
                        continue
                    backoff = POLL_MIN_SECONDS
                    self.stats.acquired += 1
                    if not self._hand_over(lease):
                        self.stats.released += 1
                        await self._release(lease)
                self._poller = None
        except BaseException as exc:
            self._poller = None
            self._fail_waiters(exc)
            if not isinstance(exc, Exception):
                raise

    def _fail_waiters(self, exc: BaseException) -> None:
        error = (
            exc
            if isinstance(exc, GlobalLimitError)
            else GlobalLimitError(
                f"cannot get a slot of the global concurrency limit '{self.name}' from the Prefect server: {type(exc).__name__}: {exc}"
            )
        )
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(error)

    async def _acquire(self, client) -> _Lease | None:
        """One lease, or None when the limit is full."""
        try:
            response = await client.increment_concurrency_slots_with_lease(
                names=[self.name], slots=1, mode="concurrency", lease_duration=self.lease_seconds
            )
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code == LOCKED:
                return None
            raise
        body = response.json()
        if not body.get("limits"):
            raise GlobalLimitError(
                f"the global concurrency limit '{self.name}' does not exist on the Prefect server (deleted during the run?)"
            )
        return _Lease(UUID(body["lease_id"]))

    async def _release(self, lease: _Lease) -> None:
        """Give the slot back to the server, retrying a busy server briefly; if that still fails the
        lease simply expires (`lease_seconds`) and the server frees the slot then."""
        from prefect.client.orchestration import get_client

        wait = POLL_MIN_SECONDS
        async with get_client() as client:
            for _ in range(RELEASE_TRIES):
                try:
                    await client.release_concurrency_slots_with_lease(lease_id=lease.id)
                    return
                except (httpx.TransportError, httpx.HTTPStatusError) as exc:
                    if isinstance(exc, httpx.HTTPStatusError) and exc.response.status_code not in TRANSIENT:
                        return
                    await asyncio.sleep(random.uniform(wait / 2, wait))
                    wait = min(POLL_MAX_SECONDS, wait * 2)

"""One concurrency limit and one requests-per-minute limit per endpoint and model, for every process.

The limit that must hold across Dask workers, separate runs and nightly cells lives in the Prefect
server: a global concurrency limit named after the endpoint and model. Its slots are taken in groups,
not per HTTP attempt: the process that runs a run (the flow, which lives as long as the run) takes a
shard's share of slots before it sends the shard to a worker and gives them back when the shard is done,
so a Dask worker that dies holds no slot (Dask runs its shard elsewhere, under the same slots) and a slot
costs a few API requests per shard, not two per call. In-process runs with `--global-limit` hold their
`--concurrency` for the run; `endpoint_slots` lets any other caller (a matrix of cells) do the same.

Prefect gives the leases and expires them; what it does not do, and this module adds:

- **Renewal by one thread per process**, not one per lease (Prefect's `concurrency()` starts a thread and
  a client per use): leases of `LEASE_SECONDS` (the server's minimum, 60 s), renewed every third of that,
  so the slots of a process that dies come back within about 75 s (the lease plus the server's
  repossessor loop of 15 s), whatever the request timeout.
- **Lost leases healed.** A Prefect server keeps leases in memory by default: a restart loses every lease
  while the limit's slot count survives in its database, and releasing a lost lease frees nothing. A
  holder whose renewal says its lease is gone gives the slots back by count (`release_concurrency_slots`)
  and leases them again; a release first renews, so a lost lease is given back by count too.
- **Repair at run start** (`repair_limit`): each lease is noted as a Prefect variable (`<limit>-lease-<id>`),
  so a run can count the slots that live leases hold; a limit holding more (their holders died and the
  server lost their leases) is set back to that count. Without this, every later run against the endpoint
  waited for slots nobody would return.

Requests per minute use Prefect's `rate_limit()` on a second limit whose slots decay at rpm/60 per
second: one request per call and no lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import logging
import random
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import httpx

from judgebench_flows.core.errors import UserError

LEASE_SECONDS = 60.0  # the shortest lease the Prefect server gives: how long a dead holder's slots stay taken
RENEW_EVERY_SECONDS = LEASE_SECONDS / 3  # two renewals may fail before a lease expires
POLL_MIN_SECONDS = 0.05  # first wait after the server says the limit is full
POLL_MAX_SECONDS = 0.25  # longest wait between asks: bounds how long freed slots stay unused
RETURN_SECONDS = LEASE_SECONDS  # how long `close` waits for a server away to take slots back
UNREACHABLE_SECONDS = 600.0  # a wait for slots ends when the server has not answered this long
LOCKED, NOT_FOUND = 423, 404
TRANSIENT = frozenset({408, 429, 500, 502, 503, 504})
LEASE_TAG = "judgebench-lease"

logger = logging.getLogger("judgebench_flows.global_limits")


class GlobalLimitError(UserError):
    """The Prefect server cannot give out the run's slots (limit deleted, server gone)."""


def limit_names(base_url: str, model: str) -> tuple[str, str]:
    """(concurrency limit, rate limit) names: a hash of endpoint and model, so no URL, user or key
    ever appears in the Prefect UI, and every run against the same endpoint and model shares them."""
    digest = hashlib.sha256(f"{base_url.rstrip('/')}\0{model}".encode()).hexdigest()[:12]
    return f"judgebench-{digest}", f"judgebench-{digest}-rpm"


def endpoint_limit_names(endpoint: str) -> tuple[str, str]:
    """(concurrency limit, rate limit) names of one endpoint, whatever the model: a hash of the
    endpoint as `calls.limits.endpoint_label` names it (provider and credential-free URL), so every cell
    of a matrix on that endpoint, on any worker, shares one limit (`cells: pool`)."""
    digest = hashlib.sha256(f"endpoint\0{endpoint}".encode()).hexdigest()[:12]
    return f"judgebench-endpoint-{digest}", f"judgebench-endpoint-{digest}-rpm"


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
    concurrency_name: str | None, concurrency: int, rate_name: str | None, rpm: float | None, repair: bool = True
) -> None:
    """Both limits of a run, before any shard starts; the concurrency limit repaired if its leases were
    lost (`repair_limit`). `repair=False` for a cell of a pool night: the night repaired the limit before
    its first cell started, and a cell repairing it again could give back the slots a sibling cell on
    another machine has just leased and not yet noted (measured: 4 calls in flight under a limit of 2)."""
    try:
        if concurrency_name:
            await ensure_limit(concurrency_name, concurrency)
            if repair:
                await asyncio.to_thread(_in_context(repair_limit), concurrency_name)
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


def _in_context(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function` run in a copy of this context (the Prefect settings a run points at), from any thread."""
    context = contextvars.copy_context()
    return lambda *args: context.run(function, *args)


def _status(exc: Exception) -> int | None:
    return exc.response.status_code if isinstance(exc, httpx.HTTPStatusError) else None


def _note_name(limit: str, lease_id: UUID) -> str:
    return f"{limit}-lease-{lease_id.hex}"


def _note(client: Any, limit: str, lease_id: UUID, slots: int) -> None:
    """The lease as a Prefect variable, so `repair_limit` can count what live leases hold."""
    from prefect.client.schemas.actions import VariableCreate

    try:
        client.create_variable(VariableCreate(name=_note_name(limit, lease_id), value=slots, tags=[LEASE_TAG]))
    except Exception as exc:  # without the note, a repair undercounts until this lease ends: say so
        logger.warning("could not note lease %s of %s: %s", lease_id, limit, exc)


def _forget(client: Any, limit: str, lease_id: UUID) -> None:
    with contextlib.suppress(Exception):
        client.delete_variable_by_name(_note_name(limit, lease_id))


def _noted_leases(client: Any, limit: str) -> dict[UUID, int]:
    """Every lease noted for `limit` (live or not), with its slots."""
    prefix = f"{limit}-lease-"
    found: dict[UUID, int] = {}
    offset = 0
    while True:
        response = client.request(
            "POST",
            "/variables/filter",
            json={"variables": {"name": {"like_": prefix}}, "limit": 200, "offset": offset},
        )
        page = response.json()
        for variable in page:
            if variable["name"].startswith(prefix):
                with contextlib.suppress(ValueError, TypeError):
                    found[UUID(variable["name"][len(prefix) :])] = int(variable["value"])
        if len(page) < 200:
            return found
        offset += 200


def _renew(client: Any, lease_id: UUID) -> bool:
    """Whether the lease still exists (renewed now); raises when the server does not answer."""
    try:
        client.renew_concurrency_lease(lease_id=lease_id, lease_duration=LEASE_SECONDS)
        return True
    except httpx.HTTPStatusError as exc:
        if _status(exc) in (NOT_FOUND, 410):
            return False
        raise


def repair_limit(name: str) -> int:
    """Give back the slots of `name` that no live lease holds; returns how many.

    Counts the slots of the noted leases that still exist (asking the server to renew one is the only
    public way to know), forgets the others, and sets the limit's active slots to that count when it
    holds more. A holder that takes a lease between the count and the update is undercounted until it
    gives its slots back: at worst a few calls over the limit, once, instead of a limit blocked for good.
    """
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitUpdate

    with get_client(sync_client=True) as client:
        limit = client.read_global_concurrency_limit_by_name(name)
        if not limit.active_slots:
            return 0
        live = 0
        for lease_id, slots in _noted_leases(client, name).items():
            if _renew(client, lease_id):
                live += slots
            else:
                _forget(client, name, lease_id)
        current = client.read_global_concurrency_limit_by_name(name).active_slots
        if current <= live:
            return 0
        client.update_global_concurrency_limit(name, GlobalConcurrencyLimitUpdate(active_slots=live))
    logger.warning("global concurrency limit %s: %d slots held by no live lease were given back", name, current - live)
    return current - live


@dataclass
class Held:
    """Slots this process holds: under `lease_id`, or under none while a lost lease is replaced."""

    slots: int
    lease_id: UUID | None
    taken: float = field(default_factory=time.monotonic)


class SlotLeases:
    """This process's slots of one global concurrency limit, in groups, with one renewal thread.

    Thread-safe and synchronous (the Dask driver loop is a thread; `endpoint_slots` wraps it for asyncio).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._held: dict[int, Held] = {}
        self._lock = threading.Lock()
        self._next = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._local = threading.local()
        self.requests = 0  # API requests made for slots (the benchmark reports them)
        self.unreachable_since: float | None = None
        self._unreturned: list[Held] = []  # given back while the server did not answer

    def _client(self) -> Any:
        client = getattr(self._local, "client", None)
        if client is None:
            from prefect.client.orchestration import get_client

            client = get_client(sync_client=True)
            client.__enter__()
            self._local.client = client
        return client

    def try_take(self, slots: int) -> int | None:
        """A handle to `slots` slots, or None when the limit has not that many free now."""
        lease_id = self._lease(slots)
        if lease_id is None:
            return None
        with self._lock:
            self._next += 1
            self._held[self._next] = Held(slots, lease_id)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=_in_context(self._renew_all), name="judgebench-slots", daemon=True
                )
                self._thread.start()
            return self._next

    def take(self, slots: int, stop: threading.Event | None = None) -> int:
        """Wait for `slots` slots (polling with a short backoff, not the server's Retry-After of up to
        30 s, so freed slots are not left idle); `stop` ends the wait with `GlobalLimitError`, and so
        does a server that has not answered for `UNREACHABLE_SECONDS`."""
        wait = POLL_MIN_SECONDS
        while True:
            handle = self.try_take(slots)
            if handle is not None:
                return handle
            self.raise_if_unreachable()
            if (stop or self._stop).wait(random.uniform(wait / 2, wait)):
                raise GlobalLimitError(f"stopped waiting for slots of the global concurrency limit '{self.name}'")
            wait = min(POLL_MAX_SECONDS, wait * 2)

    def raise_if_unreachable(self) -> None:
        """End a wait for slots (`take`'s, the Dask dispatch's) with `GlobalLimitError` once the server has
        not answered for `UNREACHABLE_SECONDS`."""
        if self.unreachable_since and time.monotonic() - self.unreachable_since > UNREACHABLE_SECONDS:
            raise GlobalLimitError(
                f"the Prefect server did not answer for {UNREACHABLE_SECONDS:g} s: no slots of '{self.name}'"
            )

    def give_back(self, handle: int) -> None:
        """Return the slots of `handle`: by lease if it still exists, else by count (it was lost). While
        the server does not answer (restarting), the renewal thread and `close` try again."""
        with self._lock:
            held = self._held.pop(handle, None)
        if held is None or held.lease_id is None:
            return
        self._try_return(held)

    def _try_return(self, held: Held) -> bool:
        try:
            self._return(held)
            return True
        except (httpx.HTTPError, GlobalLimitError):
            with self._lock:
                self._unreturned.append(held)
            return False

    def _retry_returns(self) -> bool:
        """Try again to give back what the server did not take; whether everything is back."""
        with self._lock:
            pending, self._unreturned = self._unreturned, []
        return all([self._try_return(held) for held in pending])

    def close(self) -> None:
        """Give back every slot still held and stop renewing; a server away (restarting) is waited for
        up to `RETURN_SECONDS`, then its leases are left to expire (or, lost, to the next run's repair)."""
        self._stop.set()
        with self._lock:
            held, self._held = list(self._held.values()), {}
        for one in held:
            if one.lease_id is not None:
                self._try_return(one)
        deadline = time.monotonic() + RETURN_SECONDS
        while self._unreturned and time.monotonic() < deadline and not self._retry_returns():
            time.sleep(1.0)
        if self._unreturned:
            logger.warning("could not give back %d groups of slots of %s", len(self._unreturned), self.name)
        client = getattr(self._local, "client", None)
        if client is not None:
            with contextlib.suppress(Exception):
                client.__exit__(None, None, None)
            self._local.client = None

    def _lease(self, slots: int) -> UUID | None:
        """A lease on `slots` slots, or None when the limit is full or the server does not answer now
        (restarting: the run's server watch bounds how long that may last)."""
        client = self._client()
        self.requests += 1
        try:
            response = client.increment_concurrency_slots_with_lease(
                names=[self.name], slots=slots, mode="concurrency", lease_duration=LEASE_SECONDS
            )
        except httpx.HTTPStatusError as exc:
            if _status(exc) == LOCKED:
                self.unreachable_since = None
                return None
            if _status(exc) in TRANSIENT:
                self.unreachable_since = self.unreachable_since or time.monotonic()
                return None
            raise GlobalLimitError(f"the Prefect server refused slots of '{self.name}': {exc}") from None
        except httpx.TransportError:
            self.unreachable_since = self.unreachable_since or time.monotonic()
            return None
        self.unreachable_since = None
        body = response.json()
        if not body.get("limits"):
            raise GlobalLimitError(
                f"the global concurrency limit '{self.name}' does not exist on the Prefect server (deleted during the run?)"
            )
        lease_id = UUID(body["lease_id"])
        self.requests += 1
        _note(client, self.name, lease_id, slots)
        return lease_id

    def _return(self, held: Held) -> None:
        client = self._client()
        assert held.lease_id is not None
        self.requests += 3
        if _renew(client, held.lease_id):
            client.release_concurrency_slots_with_lease(lease_id=held.lease_id)
        else:  # lost (a server restart): releasing it would free nothing
            self._release_by_count(client, held)
        _forget(client, self.name, held.lease_id)

    def _release_by_count(self, client: Any, held: Held) -> None:
        client.release_concurrency_slots(
            names=[self.name], slots=held.slots, occupancy_seconds=max(0.001, time.monotonic() - held.taken)
        )

    def _renew_all(self) -> None:
        """Every third of a lease: renew each lease; a lost one is given back by count and leased again."""
        while not self._stop.wait(RENEW_EVERY_SECONDS):
            with self._lock:
                held = list(self._held.items())
            for handle, one in held:
                try:
                    self._renew_one(handle, one)
                except Exception as exc:  # the server is away: the next round tries again (server_watch bounds it)
                    logger.warning("could not renew slots of %s: %s", self.name, exc)
            self._retry_returns()

    def _renew_one(self, handle: int, held: Held) -> None:
        client = self._client()
        if held.lease_id is not None:
            self.requests += 1
            if _renew(client, held.lease_id):
                return
            logger.warning("a lease on %s was lost (Prefect server restarted?): its slots are given back", self.name)
            self._release_by_count(client, held)
            _forget(client, self.name, held.lease_id)
            held.lease_id = None
        lease_id = self._lease(held.slots)  # the shard goes on meanwhile: over the limit until this succeeds
        with self._lock:
            if handle in self._held:
                held.lease_id = lease_id
                return
        if lease_id is not None:  # given back meanwhile
            self._return(Held(held.slots, lease_id))


@contextlib.asynccontextmanager
async def endpoint_slots(name: str, slots: int, leases: SlotLeases | None = None) -> AsyncIterator[None]:
    """Hold `slots` slots of the endpoint's global concurrency limit `name` (see `limit_names`) inside
    the block: a run, a shard or a cell of a matrix sharing the endpoint's `--concurrency` with every other
    holder on the same Prefect server. Create the limit first (`ensure_limit`). Several holders in one
    process may share `leases` (one renewal thread)."""
    own = leases is None
    keeper = leases or SlotLeases(name)
    stop = threading.Event()
    handle = None
    try:
        handle = await asyncio.to_thread(_in_context(keeper.take), slots, stop)
        yield
    finally:
        stop.set()
        if handle is not None:
            await asyncio.to_thread(_in_context(keeper.give_back), handle)
        if own:
            await asyncio.to_thread(_in_context(keeper.close))


__all__ = [
    "LEASE_SECONDS",
    "GlobalLimitError",
    "SlotLeases",
    "endpoint_slots",
    "ensure_limit",
    "ensure_limits",
    "limit_names",
    "repair_limit",
    "wait_for_rate",
]

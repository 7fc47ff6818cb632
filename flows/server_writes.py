"""A night's writes to a Prefect server on this machine, tried again within a second when its SQLite
database is locked, instead of 2 to 32 s later.

On SQLite (the background server a first run starts) each cell's subflow run is created with two writes
that read before they write (`POST /api/task_runs/`, `POST /api/flow_runs/`). When another writer
committed meanwhile, SQLite refuses them at once (its busy timeout does not apply to a read turning
writer), Prefect's server answers 503 and Prefect's client waits 2, 4, 8, 16 s before trying again
(`2 ** attempt`, no setting shortens it): a small cell started half a minute late, and the night waited for
it (docs/performance.md). Such a 503 rolled its transaction back and costs the server a millisecond, so
the night's client here tries it again after 20 ms to 1 s, jittered, for up to `PATIENCE_SECONDS`, before
Prefect's own retries see it: the writes queue behind the one holding the lock instead of backing off.
Anything else (a 503 Prefect's server marks as maintenance, other answers, errors) passes unchanged,
and past the patience Prefect's own retries apply as before.

It applies to a server on this machine over plain HTTP (a loopback address: the background server, or
one started by hand), where a SQLite database can sit; a remote server (PostgreSQL behind it, or Prefect Cloud) keeps
Prefect's client as it is. It is one Prefect client for the night, put in Prefect's client context
(`prefect.context.AsyncClientContext`), so the cells' subflows, tasks and artifacts, which take the
context's client, use it; the night's own flow run keeps the client its engine made.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import httpx
from prefect.client.orchestration import PrefectClient, get_client
from prefect.context import AsyncClientContext
from prefect.settings import get_current_settings

PATIENCE_SECONDS = 10.0  # quick tries of one request; then Prefect's own backoff
FIRST_PAUSE_SECONDS = 0.02
LONGEST_PAUSE_SECONDS = 1.0
LOCKED = 503
# Prefect's own client: at most 16 connections, 8 kept alive for 25 s (PrefectClient's defaults, which
# a transport of one's own must carry itself).
LIMITS = httpx.Limits(max_connections=16, max_keepalive_connections=8, keepalive_expiry=25)
LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}


class QueuedWrites(httpx.AsyncBaseTransport):
    """Sends a request again, after a short jittered pause, while the server answers 503 (not for
    maintenance), for up to `patience` seconds; then returns what the server said."""

    def __init__(self, inner: httpx.AsyncBaseTransport, patience: float = PATIENCE_SECONDS, seed: int = 0) -> None:
        self._inner = inner
        self._patience = patience
        self._random = random.Random(seed)  # the pauses' jitter; its seed makes a night's pauses repeatable
        self.tries_again = 0  # how many requests were sent again (the benchmark and the tests read it)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        waited, longest = 0.0, FIRST_PAUSE_SECONDS
        while True:
            response = await self._inner.handle_async_request(request)
            if not _locked(response) or waited >= self._patience:
                return response
            await response.aclose()
            pause = self._random.uniform(longest / 2, longest)
            await asyncio.sleep(pause)
            self.tries_again += 1
            waited, longest = waited + pause, min(longest * 2, LONGEST_PAUSE_SECONDS)

    async def aclose(self) -> None:
        await self._inner.aclose()


def _locked(response: httpx.Response) -> bool:
    return response.status_code == LOCKED and response.headers.get("Prefect-Maintenance") != "true"


def on_this_machine(api_url: str | None) -> bool:
    """Whether the Prefect API is served over plain HTTP on a loopback address (where its database may
    be SQLite)."""
    if not api_url:
        return False
    parts = urlsplit(str(api_url))
    return parts.scheme == "http" and (parts.hostname or "") in LOOPBACK


class _NightClientContext(AsyncClientContext):
    """Prefect's client context holding a client made here: `get_client()` and Prefect's engines below
    it take this client (it was made with no httpx settings of the caller's, as they ask)."""

    def __init__(self, client: PrefectClient) -> None:
        super(AsyncClientContext, self).__init__(client=client)


@contextlib.asynccontextmanager
async def queued_writes() -> AsyncIterator[QueuedWrites | None]:
    """Inside: Prefect's requests of this task and the tasks it starts go through a client that
    queues writes refused for a locked database (`QueuedWrites`), when the server is on this machine;
    yields that transport (None: Prefect's client as it is)."""
    api_url = get_current_settings().api.url
    if not on_this_machine(api_url):
        yield None
        return
    # Plain HTTP to a loopback address: no TLS context to load, no proxy to go through.
    transport = QueuedWrites(httpx.AsyncHTTPTransport(retries=3, limits=LIMITS, verify=False, trust_env=False))
    client = get_client(httpx_settings={"transport": transport})
    async with _NightClientContext(client):
        yield transport


__all__ = ["QueuedWrites", "on_this_machine", "queued_writes"]

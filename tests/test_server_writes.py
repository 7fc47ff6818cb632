"""A night's Prefect writes refused for a locked database are tried again at once, not 2-32 s later.

The Prefect server here is a real HTTP server on loopback that answers 503 (as Prefect's server does when
its SQLite database is locked) to its first requests and then as the real one would; Prefect's own
retries are turned off (PREFECT_CLIENT_MAX_RETRIES 0), so only the night's client can be what got the
request through. The last test runs a real subflow on a real Prefect server inside the night's client.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import prefect
import pytest
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.context import FlowRunContext
from prefect.exceptions import PrefectHTTPStatusError
from prefect.settings import PREFECT_API_URL, PREFECT_CLIENT_MAX_RETRIES, temporary_settings

from judgebench_flows.flows.server_writes import QueuedWrites, on_this_machine, queued_writes


@dataclass
class Locked:
    """How many requests to /hello are refused (503) before one is answered, and what was seen."""

    refusals: int
    maintenance: bool = False
    seen: list[str] = field(default_factory=list)


def handler(locked: Locked) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/admin/version"):  # the client checks it first
                return self._answer(200, prefect.__version__)
            locked.seen.append(self.path)
            if len(locked.seen) <= locked.refusals:
                return self._answer(503, {"exception_message": "Service Unavailable"})
            self._answer(200, "👋")

        def _answer(self, status: int, body: object) -> None:
            text = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(text)))
            if status == 503 and locked.maintenance:
                self.send_header("Prefect-Maintenance", "true")
            self.end_headers()
            self.wfile.write(text)

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@pytest.fixture()
def locked() -> Iterator[tuple[str, Locked]]:
    state = Locked(refusals=3)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler(state))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/api", state
    finally:
        server.shutdown()
        server.server_close()


def test_a_request_refused_for_a_locked_database_is_sent_again_until_answered(locked) -> None:
    api, state = locked

    async def main() -> None:
        with temporary_settings({PREFECT_API_URL: api, PREFECT_CLIENT_MAX_RETRIES: 0}):
            async with queued_writes() as writes:
                assert isinstance(writes, QueuedWrites)
                answer = await get_client().hello()  # the context's client: the night's
                assert answer.status_code == 200
                assert writes.tries_again == 3
        assert len(state.seen) == 4

    asyncio.run(main())


def test_without_the_night_client_the_same_refusal_fails_the_request(locked) -> None:
    """The control: Prefect's client with its retries off gives up at the first 503."""
    api, state = locked

    async def main() -> None:
        with temporary_settings({PREFECT_API_URL: api, PREFECT_CLIENT_MAX_RETRIES: 0}):
            async with get_client() as client:
                with pytest.raises(PrefectHTTPStatusError, match="503"):
                    await client.hello()
        assert len(state.seen) == 1

    asyncio.run(main())


def test_a_server_in_maintenance_is_left_to_prefects_own_retries(locked) -> None:
    """Prefect's client waits out a server that says it is in maintenance, uncounted; the night's
    client does not send those requests again itself."""
    api, state = locked
    state.maintenance, state.refusals = True, 1

    async def main() -> None:
        with temporary_settings({PREFECT_API_URL: api, PREFECT_CLIENT_MAX_RETRIES: 0}):
            async with queued_writes() as writes:
                assert (await get_client().hello()).status_code == 200
                assert writes is not None and writes.tries_again == 0
        assert len(state.seen) == 2  # the second sent by Prefect's client, after its own pause

    asyncio.run(main())


def test_past_its_patience_the_refusal_is_what_prefect_sees(locked) -> None:
    api, state = locked
    state.refusals = 1000

    async def main() -> None:
        transport = QueuedWrites(httpx.AsyncHTTPTransport(), patience=0.2, seed=1)
        async with httpx.AsyncClient(transport=transport, base_url=api) as client:
            answer = await client.get("/hello")
        assert answer.status_code == 503
        assert 2 <= transport.tries_again == len(state.seen) - 1 < 20  # pauses of 10 ms and more

    asyncio.run(main())


@pytest.mark.parametrize(
    ("api", "here"),
    [
        ("http://127.0.0.1:4200/api", True),
        ("http://localhost:4200/api", True),
        ("http://[::1]:4200/api", True),
        ("https://127.0.0.1:4200/api", False),  # TLS: Prefect's client, with its certificate settings
        ("http://10.0.0.7:4200/api", False),
        ("https://api.prefect.cloud/api/accounts/a/workspaces/w", False),
        (None, False),
    ],
)
def test_only_a_server_on_this_machine_gets_the_night_client(api: str | None, here: bool) -> None:
    assert on_this_machine(api) is here


def test_a_remote_server_keeps_prefects_client() -> None:
    async def main() -> None:
        with temporary_settings({PREFECT_API_URL: "http://10.0.0.7:4200/api"}):
            async with queued_writes() as writes:
                assert writes is None

    asyncio.run(main())


@flow(name="server-writes-child")
async def child() -> bool:
    context = FlowRunContext.get()
    return context is not None and context.client is get_client()


@flow(name="server-writes-parent")
async def parent() -> tuple[bool, bool, int]:
    async with queued_writes() as writes:
        night_client = get_client()
        inside = await child()
        same = FlowRunContext.get() is not None and get_client() is night_client
        return bool(inside), same, 0 if writes is None else 1


def test_a_cells_subflow_is_created_and_run_through_the_night_client(prefect_server: str) -> None:
    """Prefect's engine takes the context's client for the subflow it creates and runs."""
    with temporary_settings({PREFECT_API_URL: prefect_server}):
        inside, same, queued = asyncio.run(parent())
    assert queued == 1 and same and inside

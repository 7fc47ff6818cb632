"""A Prefect server too busy to create a cell's subflow run fails that cell, not the night.

A server whose database is locked answers 503 (SQLite under load) past its client's retries; the
night's other cells go on, and the cell counts as a failure that may pass, tried again after the
night's `retry_delay_seconds` (flows/nightly.py `subflow_state`). The server here is a real HTTP
server on loopback that answers 503 to every request.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
from collections.abc import Iterator

import prefect
import pytest
from prefect import flow
from prefect.settings import PREFECT_API_URL, PREFECT_CLIENT_MAX_RETRIES, temporary_settings

from judgebench_flows.core.config import RunConfig
from judgebench_flows.flows.nightly import outcome_of, subflow_state
from judgebench_flows.judging.matrix import MatrixEntry


class Busy(http.server.BaseHTTPRequestHandler):
    """Says its version (the client checks it first), and 503 to every other request."""

    def _answer(self) -> None:
        version = self.path.rstrip("/").endswith("/admin/version")
        body = json.dumps(prefect.__version__ if version else {"exception_message": "Service Unavailable"})
        self.send_response(200 if version else 503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def busy_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Busy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/api"
    finally:
        server.shutdown()
        server.server_close()


@flow(name="judgebench")
async def cell(config: RunConfig, retried_if_transient: bool = False) -> dict:
    return {"never": "run"}


def test_a_cell_whose_run_the_server_cannot_create_fails_for_a_passing_reason(busy_server: str) -> None:
    entry = MatrixEntry(name="vanilla__m__file", config=RunConfig(model="m", base_url="http://127.0.0.1:9/v1"))

    async def main() -> None:
        with temporary_settings({PREFECT_API_URL: busy_server, PREFECT_CLIENT_MAX_RETRIES: 0}):
            state = await subflow_state(cell, entry.config, retried_if_transient=True)
        assert state.is_failed()
        outcome = await outcome_of(entry, state)
        assert outcome.status == "failed" and outcome.transient  # tried again after the night's delay
        assert "503" in (outcome.message or "")

    asyncio.run(main())

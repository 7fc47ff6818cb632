"""A configured Prefect server (PREFECT_API_URL) killed with SIGKILL mid-run: restarted on the same database
within `--server-lost-timeout`, the run goes on and ends with every judgment, no call paid twice, and the
endpoint's global concurrency limit whole again (a restarted server has lost every lease in memory: a
limit that kept their slots would block every later run for good); not restarted in time, the run ends
with exit 5 and one line, and the same command then finishes it without paying any answered call again.

Real parts: `prefect server start` processes on one SQLite database, `judgebench run --global-limit` as a
subprocess, the bundled OpenAI-compatible endpoint, SIGKILL. Before this, a Dask run whose server was
restarted hung for good with all 16 slots of its limit taken.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from judgebench_flows.calls.global_limits import limit_names
from judgebench_flows.runtime.server_watch import answers
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._helpers import GatedAnswers
from tests._runs import GPT4O_PATH, free_port, run_argv
from tests.conftest import CANARY_KEY, requires_shared

pytestmark = [
    pytest.mark.slow,  # boots real Prefect servers, twice per case
    pytest.mark.skipif(sys.platform == "win32", reason="signals"),
]

VERDICT = "My final verdict is [[A>B]]"
PAIRS = 20  # 40 calls
ANSWERED_FIRST = 8
CONCURRENCY = 4
BOOT_SECONDS = 600  # a first boot on a loaded 2-core machine (creating the database) takes tens of seconds
LOST_TIMEOUT = 120  # --server-lost-timeout: the restart comes back well within it
GONE_TIMEOUT = 5  # ... and here it does not come back in time
ENDS_WITHIN = 90


class PrefectServer:
    """`prefect server start` in the foreground, on its own port and PREFECT_HOME (its SQLite database)."""

    def __init__(self, home: Path) -> None:
        self.home, self.port = home, free_port()
        self.url = f"http://127.0.0.1:{self.port}/api"
        self.process: subprocess.Popen | None = None

    def start(self) -> PrefectServer:
        env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
        env.update(PREFECT_HOME=str(self.home), PREFECT_SERVER_ANALYTICS_ENABLED="false")
        log = open(self.home / "server.log", "a")  # noqa: SIM115 - the server's output for as long as it runs
        self.process = subprocess.Popen(
            [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(self.port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + BOOT_SECONDS
        while not answers(self.url, timeout=2.0):
            assert self.process.poll() is None, (self.home / "server.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the Prefect server did not boot"
            time.sleep(0.3)
        return self

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()


def rows(db: Path, query: str) -> list[tuple]:
    with sqlite3.connect(db) as connection:
        return connection.execute(query).fetchall()


def active_slots(api_url: str, name: str) -> int:
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    async def read() -> int:
        async with get_client() as client:
            return (await client.read_global_concurrency_limit_by_name(name)).active_slots

    with temporary_settings(updates={PREFECT_API_URL: api_url}):
        return asyncio.run(read())


@requires_shared
@pytest.mark.parametrize("back", [True, False], ids=["restarted-in-time", "not-back-in-time"])
def test_a_run_outlives_a_restarted_prefect_server_or_ends_with_exit_5_and_resumes(tmp_path, back):
    home = tmp_path / "prefect-home"
    home.mkdir()
    server = PrefectServer(home).start()
    db, out = tmp_path / "r.db", tmp_path / "r"
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(GPT4O_PATH.read_text().splitlines(keepends=True)[:PAIRS]))
    env = {
        **os.environ,
        "PREFECT_API_URL": server.url,
        "PREFECT_HOME": str(home),
        "OPENAI_API_KEY": CANARY_KEY,
        "JUDGEBENCH_CACHE_DIR": str(tmp_path / "cache"),
    }
    timeout = LOST_TIMEOUT if back else GONE_TIMEOUT
    gate = GatedAnswers(ANSWERED_FIRST, VERDICT, BOOT_SECONDS)
    try:
        with FakeOpenAIServer(gate) as endpoint:
            command = run_argv(
                endpoint.base_url,
                out,
                None,
                "--concurrency",
                str(CONCURRENCY),
                "--global-limit",
                "--server-lost-timeout",
                str(timeout),
                data_path=data,
                db_url=f"sqlite:///{db}",
            )
            port, base_url = endpoint.port, endpoint.base_url
            run = subprocess.Popen(
                command, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            try:
                deadline = time.monotonic() + BOOT_SECONDS
                while gate.seen < ANSWERED_FIRST + CONCURRENCY:
                    assert run.poll() is None, run.communicate()[1][-3000:]
                    assert time.monotonic() < deadline, "the run never started judging"
                    time.sleep(0.1)
                server.kill()
                killed = time.monotonic()
                if back:  # the run judges on while its server is down, and ends judging before it is back
                    gate.release.set()
                    time.sleep(3)
                    server.start()  # same PREFECT_HOME: the same database, none of the leases
                try:
                    _, stderr = run.communicate(timeout=ENDS_WITHIN + timeout)
                except subprocess.TimeoutExpired:
                    pytest.fail(f"the run did not end within {ENDS_WITHIN + timeout} s of its server's death")
                ended_after = time.monotonic() - killed
            finally:
                gate.release.set()
                if run.poll() is None:
                    run.kill()
                    run.wait()
            answered_first = endpoint.answered_keys()
        name, _ = limit_names(base_url, "judge")
        if back:
            assert run.returncode == 0, stderr[-3000:]
            assert rows(db, "select status from runs") == [("completed",)]
            assert rows(db, "select count(*) from judgments")[0][0] == 2 * PAIRS
            assert max(answered_first.values()) == 1, "a call was paid twice"
            assert active_slots(server.url, name) == 0, "slots of lost leases were never given back"
            return
        assert run.returncode == 5, (ended_after, stderr[-3000:])
        last = stderr.strip().splitlines()[-1]
        assert last.startswith("error: the Prefect server") and "run the same command again" in last, stderr[-3000:]
        assert "Traceback" not in stderr, stderr[-3000:]
        assert ended_after < GONE_TIMEOUT + ENDS_WITHIN
        status, message = rows(db, "select status, message from runs")[0]
        assert status == "failed" and "Prefect server" in message

        server.start()  # the operator brings it back: the same command finishes the run
        with FakeOpenAIServer(VERDICT, port=port) as again:
            done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=BOOT_SECONDS)
            assert done.returncode == 0, done.stderr[-3000:]
            assert not set(again.answered_keys()) & set(answered_first), "calls answered before were paid again"
        assert active_slots(server.url, name) == 0  # the dead run's slots, lost with the server, repaired
    finally:
        server.kill()

"""A Prefect server that dies (or hangs) during a run ends the run within seconds: exit 5, one line saying
so, the run's row not left "running", and every call answered before the death in the call cache, so the
same command resumes without paying for any of them again.

Real parts: `judgebench run` as a subprocess without PREFECT_API_URL (Prefect's background server of
its PREFECT_HOME), the bundled OpenAI-compatible endpoint in this process, and signals to the server's
real process. Before server_watch these runs went on judging and ended 70-100 s after the death with
exit 3 and tracebacks (a hung server: minutes).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest

from judgebench_flows.runtime.server_watch import alive, answers
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._helpers import GatedAnswers
from tests._runs import (
    GPT4O_PATH,
    background_pid,
    gone_within,
    local_server_env,
    run_argv,
    server_processes,
    stop_background_server,
)
from tests.conftest import requires_shared

pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds processes through /proc (Linux)")

VERDICT = "My final verdict is [[A>B]]"
PAIRS = 20  # 40 calls, one at a time
ANSWERED_FIRST = 6  # answered before the gate holds the next calls in flight
# Generous for a loaded 2-core machine: a first boot with a fresh PREFECT_HOME takes tens of seconds.
START_SECONDS = 600
ENDS_WITHIN = 30  # from the death to the run's exit (measured about 1 s idle; a hang is minutes)
LOST_TIMEOUT = 10  # JUDGEBENCH_SERVER_LOST_TIMEOUT for the hung server


def rows(db: Path, query: str) -> list[tuple]:
    with sqlite3.connect(db) as connection:
        return connection.execute(query).fetchall()


def judging_row(db: Path) -> bool:
    """The flow has recorded its run (it judges now)."""
    try:
        return bool(rows(db, "select 1 from runs where status = 'running'"))
    except sqlite3.Error:
        return False


def pairs_file(tmp_path: Path) -> Path:
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(GPT4O_PATH.read_text().splitlines(keepends=True)[:PAIRS]))
    return path


@pytest.mark.slow  # boots real Prefect servers, twice per case
@requires_shared
@pytest.mark.parametrize("how", ["kill", "stop"], ids=["server-killed", "server-hung"])
def test_a_server_that_dies_mid_run_ends_it_with_exit_5_and_nothing_is_paid_twice(tmp_path, how):
    home, db, out = tmp_path / "prefect-home", tmp_path / "r.db", tmp_path / "r"
    hung = {"JUDGEBENCH_SERVER_LOST_TIMEOUT": str(LOST_TIMEOUT)} if how == "stop" else {}
    env = local_server_env(home, **hung)
    gate = GatedAnswers(ANSWERED_FIRST, VERDICT, START_SECONDS)
    with FakeOpenAIServer(gate) as endpoint:
        command = run_argv(
            endpoint.base_url, out, None, "--concurrency", "1", data_path=pairs_file(tmp_path), db_url=f"sqlite:///{db}"
        )
        port = endpoint.port
        run = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        server = None
        try:
            deadline = time.monotonic() + START_SECONDS
            while not (judging_row(db) and gate.seen > ANSWERED_FIRST and server_processes(home)):
                assert run.poll() is None, run.communicate()[1][-3000:]
                assert time.monotonic() < deadline, "the run never started judging"
                time.sleep(0.2)
            server = background_pid(home)
            answered_before = endpoint.answered_keys()
            died = time.monotonic()
            server_signal = signal.SIGKILL if how == "kill" else signal.SIGSTOP
            os.kill(server, server_signal)
            try:
                stdout, stderr = run.communicate(timeout=ENDS_WITHIN + (LOST_TIMEOUT + 30 if how == "stop" else 0))
            except subprocess.TimeoutExpired:
                pytest.fail(f"the run did not end within {ENDS_WITHIN} s of its server's death")
            ended_after = time.monotonic() - died
        finally:
            gate.release.set()
            if run.poll() is None:
                run.kill()
                run.wait()
            if server is not None and how == "stop" and alive(server):
                os.kill(server, signal.SIGKILL)  # a stopped server would hold a re-run's attach
        assert run.returncode == 5, (ended_after, stderr[-3000:])
        last = stderr.strip().splitlines()[-1]
        assert last.startswith("error: the Prefect server") and "stopped" in last, stderr[-3000:]
        assert "cached" in last and "run the same command again" in last, last
        assert "Traceback" not in stderr, stderr[-3000:]
        assert sum(line.startswith("error:") for line in stderr.splitlines()) == 1, stderr[-3000:]
        status, message = rows(db, "select status, message from runs")[0]
        assert status == "failed" and "Prefect server" in message and "stopped" in message
        cached = rows(db, "select count(*) from call_cache")[0][0]
        assert cached >= len(answered_before) >= ANSWERED_FIRST, (cached, len(answered_before))

    with FakeOpenAIServer(VERDICT, port=port) as again:  # the same endpoint: the same cache keys
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=START_SECONDS)
        finally:
            stop_background_server(env)
        assert done.returncode == 0, done.stderr[-3000:]
        paid_again = set(again.answered_keys()) & set(endpoint.answered_keys())
        assert not paid_again, f"{len(paid_again)} calls answered before the death were paid again"
        assert again.answered == 2 * PAIRS - cached
    assert gone_within(home, 60), "a server outlived the test's runs"


def test_a_server_answers_unless_it_is_gone_or_behind_a_failing_gateway():
    """What the watch counts as an answer (a real HTTP server): any status but a gateway's 502/503/504;
    Prefect Cloud answers /health with 401 or 404. A closed port or a silent server is no answer."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Status(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            code = int(self.path.split("/")[1])
            if code == 0:  # silent: holds the request
                time.sleep(3)
                return
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Status)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        assert answers(f"{base}/200/api") and answers(f"{base}/404/api") and answers(f"{base}/401/api")
        assert answers(f"{base}/500/api")  # the server itself answered, however badly
        assert not any(answers(f"{base}/{code}/api") for code in (502, 503, 504))
        assert not answers(f"{base}/0/api", timeout=0.5)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert not answers(f"{base}/200/api")

"""SIGTERM to `judgebench run` (how systemd, Docker, Kubernetes and CI stop a process): one line, exit 143,
the run recorded `interrupted` (not failed), and the same command resumes paying only for the calls that
were in flight when it stopped.

Real parts: `judgebench run` as a subprocess against the session's Prefect server, the bundled
OpenAI-compatible endpoint in this process, and a real SIGTERM to the run's process. Before this, the run
printed a 13-frame `TerminationSignal` traceback and exited 1 (the code of a regression).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._helpers import GatedAnswers
from tests._runs import GPT4O_PATH, run_argv
from tests.conftest import CANARY_KEY, requires_shared

VERDICT = "My final verdict is [[A>B]]"
PAIRS = 20  # 40 calls
ANSWERED_FIRST = 8  # answered before the gate holds the next calls in flight
CONCURRENCY = 2
START_SECONDS = 300
ENDS_WITHIN = 30  # from SIGTERM to the run's exit (measured about 1 s)


def rows(db: Path, query: str) -> list[tuple]:
    with sqlite3.connect(db) as connection:
        return connection.execute(query).fetchall()


@requires_shared
def test_sigterm_ends_a_run_with_one_line_and_exit_143_and_the_same_command_resumes(tmp_path, prefect_server):
    db, out = tmp_path / "r.db", tmp_path / "r"
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(GPT4O_PATH.read_text().splitlines(keepends=True)[:PAIRS]))
    env = {**os.environ, "OPENAI_API_KEY": CANARY_KEY, "JUDGEBENCH_CACHE_DIR": str(tmp_path / "cache")}
    gate = GatedAnswers(ANSWERED_FIRST, VERDICT, START_SECONDS)
    with FakeOpenAIServer(gate) as endpoint:
        command = run_argv(
            endpoint.base_url, out, None, "--concurrency", str(CONCURRENCY), data_path=data, db_url=f"sqlite:///{db}"
        )
        port = endpoint.port
        run = subprocess.Popen(
            command, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            deadline = time.monotonic() + START_SECONDS
            while gate.seen < ANSWERED_FIRST + CONCURRENCY:  # answered some, the next ones in flight
                assert run.poll() is None, run.communicate()[1][-3000:]
                assert time.monotonic() < deadline, "the run never started judging"
                time.sleep(0.1)
            time.sleep(0.5)  # the answered calls' cache writes
            answered_before = endpoint.answered_keys()
            os.kill(run.pid, signal.SIGTERM)
            try:
                _, stderr = run.communicate(timeout=ENDS_WITHIN)
            except subprocess.TimeoutExpired:
                pytest.fail(f"the run did not end within {ENDS_WITHIN} s of SIGTERM")
        finally:
            gate.release.set()
            if run.poll() is None:
                run.kill()
                run.wait()
        assert run.returncode == 143, stderr[-3000:]
        lines = stderr.strip().splitlines()
        assert lines[-1].startswith("stopped by SIGTERM") and "run the same command again" in lines[-1], stderr
        assert "Traceback" not in stderr and "Crash detected" not in stderr, stderr[-3000:]
        status, message = rows(db, "select status, message from runs")[0]
        assert status == "interrupted", (status, message)
        cached = rows(db, "select count(*) from call_cache")[0][0]
        assert cached >= len(answered_before) >= ANSWERED_FIRST, (cached, len(answered_before))

    with FakeOpenAIServer(VERDICT, port=port) as again:  # the same endpoint: the same cache keys
        done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=START_SECONDS)
        assert done.returncode == 0, done.stderr[-3000:]
        paid_again = set(again.answered_keys()) & set(answered_before)
        assert not paid_again, f"{len(paid_again)} calls answered before SIGTERM were paid again"
        assert again.answered == 2 * PAIRS - cached
    statuses = [status for (status,) in rows(db, "select status from runs order by started")]
    assert statuses == ["interrupted", "completed"], statuses

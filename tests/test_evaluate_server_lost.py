"""`evaluate()` runs the command's run path, server watch included: its Prefect server killed mid-run ends
the call within seconds with `PrefectServerError` (the command's exit 5), saying how to resume, the run
marked failed and the answered calls cached; the process (a notebook's kernel) is not ended.

Before the shared run path, evaluate() had no watch: a lost server surfaced as Prefect's own error once its
client gave up, a minute or more later. Now the watch cancels the flow within a second of the kill, and the
flow's shutdown (Prefect's client retrying its report to the dead server) is waited for 20 s at most
(`CANCEL_GRACE_SECONDS`): measured 19-24 s from the kill to the call's end. Real parts: evaluate() in a subprocess without PREFECT_API_URL
(the background server of its PREFECT_HOME, started by the run), the bundled endpoint holding the calls
after the first few, SIGKILL to the server's real process.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._helpers import GatedAnswers
from tests._runs import GPT4O_PATH, background_pid, local_server_env, server_processes, stop_background_server
from tests.conftest import requires_shared

pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds processes through /proc (Linux)")

VERDICT = "My final verdict is [[A>B]]"
PAIRS = 10
ANSWERED_FIRST = 4
START_SECONDS = 600  # a first boot of a fresh PREFECT_HOME's server on a loaded 2-core machine
ENDS_WITHIN = 30  # from the death to the call's end (the command's bound, test_server_death.py)

SCRIPT = """
import json, sys
import judgebench_flows

try:
    judgebench_flows.evaluate(**json.loads(sys.argv[1]))
except BaseException as exc:
    print(json.dumps({"raised": type(exc).__name__, "message": str(exc)}))
    sys.exit(3)
"""


def rows(db: Path, query: str) -> list[tuple]:
    with sqlite3.connect(db) as connection:
        return connection.execute(query).fetchall()


@pytest.mark.slow  # boots a real Prefect server
@requires_shared
def test_a_server_killed_mid_run_ends_evaluate_with_prefect_server_error(tmp_path) -> None:
    home, db = tmp_path / "prefect-home", tmp_path / "r.db"
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(GPT4O_PATH.read_text().splitlines(keepends=True)[:PAIRS]))
    env = {**local_server_env(home), "JUDGEBENCH_CACHE_DIR": str(tmp_path / "cache")}
    script = tmp_path / "evaluate_lost.py"
    script.write_text(textwrap.dedent(SCRIPT))
    gate = GatedAnswers(ANSWERED_FIRST, VERDICT, START_SECONDS)
    with FakeOpenAIServer(gate) as endpoint:
        opts = {
            "model": "judge",
            "base_url": endpoint.base_url,
            "data_path": str(data),
            "concurrency": 1,
            "db_url": f"sqlite:///{db}",
            "result_path": str(tmp_path / "r.json"),
            "output_dir": str(tmp_path / "r"),
            "report": False,
        }
        with (tmp_path / "out.txt").open("w") as out, (tmp_path / "err.txt").open("w") as err:
            run = subprocess.Popen([sys.executable, str(script), json.dumps(opts)], env=env, stdout=out, stderr=err)
        try:
            deadline = time.monotonic() + START_SECONDS
            while not (gate.seen > ANSWERED_FIRST and server_processes(home)):
                assert run.poll() is None, (tmp_path / "err.txt").read_text()[-3000:]
                assert time.monotonic() < deadline, "the run never started judging"
                time.sleep(0.2)
            answered_before = endpoint.answered_keys()
            died = time.monotonic()
            os.kill(background_pid(home), signal.SIGKILL)
            try:
                run.wait(timeout=ENDS_WITHIN)
            except subprocess.TimeoutExpired:
                pytest.fail(f"evaluate() did not end within {ENDS_WITHIN} s of its server's death")
            ended_after = time.monotonic() - died
        finally:
            gate.release.set()
            if run.poll() is None:
                run.kill()
                run.wait()
            stop_background_server(env)
    stderr = (tmp_path / "err.txt").read_text()
    assert run.returncode == 3, (ended_after, stderr[-3000:])  # the script's own exit: the process lived on
    outcome = json.loads((tmp_path / "out.txt").read_text().strip().splitlines()[-1])
    assert outcome["raised"] == "PrefectServerError", outcome
    assert "Prefect server" in outcome["message"] and "call evaluate() again" in outcome["message"], outcome
    status, message = rows(db, "select status, message from runs")[0]
    assert status == "failed" and "Prefect server" in message, (status, message)
    cached = rows(db, "select count(*) from call_cache")[0][0]
    assert cached >= len(answered_before) >= ANSWERED_FIRST, (cached, len(answered_before))
    print(f"evaluate() ended {ended_after:.1f} s after its server was killed")

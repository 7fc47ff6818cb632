"""The external-table run (`judgebench run --judge-type external` on a table) is watched as a JudgeBench
run is: its Prefect server killed mid-run ends it within seconds, exit 5 and one line, not a hang while
Prefect's client retries a dead server.

Real parts: the command as a subprocess without PREFECT_API_URL (the background server of its own
PREFECT_HOME, started by the run), an external judge file that holds its rows until the server is gone,
SIGKILL to the server's real process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests._runs import background_pid, gone_within, local_server_env, server_processes, stop_background_server

pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds processes through /proc (Linux)")

START_SECONDS = 600  # a first boot of a fresh PREFECT_HOME's server on a loaded 2-core machine
ENDS_WITHIN = 45  # from the kill to the command's exit (the watch: within a second; the cancel grace: 20 s)

JUDGE = """
import os, time
from pathlib import Path


def evaluate(row, config):
    Path(config["started"]).touch()
    while not Path(config["release"]).exists():  # held until the test lets go
        time.sleep(0.1)
    return str(row["response"]), 1.0
"""


@pytest.mark.slow  # boots a real Prefect server
def test_an_external_table_run_whose_server_is_killed_ends_with_exit_5(tmp_path: Path) -> None:
    home = tmp_path / "prefect-home"
    (tmp_path / "judge.py").write_text(JUDGE)
    (tmp_path / "table.csv").write_text("id,model_input,response,ground_truth\n1,q1,a,a\n2,q2,b,b\n")
    started, release = tmp_path / "started", tmp_path / "release"
    config = f'{{"started": "{started}", "release": "{release}"}}'
    command = [sys.executable, "-m", "judgebench_flows.cli.main", "run", "--judge-type", "external"]
    command += ["--external-judge-path", "judge.py", "--external-judge-config", config, "--data-path", "table.csv"]
    command += ["--output-dir", str(tmp_path / "out")]
    env = {**local_server_env(home), "JUDGEBENCH_CACHE_DIR": str(tmp_path / "cache")}
    run = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + START_SECONDS
        while not (started.exists() and server_processes(home)):
            assert run.poll() is None, run.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the run never started judging"
            time.sleep(0.2)
        os.kill(background_pid(home), signal.SIGKILL)
        killed = time.monotonic()
        try:
            _, stderr = run.communicate(timeout=ENDS_WITHIN)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the external run did not end within {ENDS_WITHIN} s of its server's death")
        ended_after = time.monotonic() - killed
    finally:
        release.touch()
        if run.poll() is None:
            run.kill()
            run.wait()
        stop_background_server(env)
    assert run.returncode == 5, (ended_after, stderr[-3000:])
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("error: the Prefect server") and "stopped" in last, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert gone_within(home, 60), "a server outlived the test's run"

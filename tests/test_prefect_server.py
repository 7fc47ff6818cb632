"""`judgebench run` without a Prefect server: it starts a temporary one and never leaves it behind.

No PREFECT_API_URL here, unlike the rest of the suite: the run's helper process reads Prefect's settings
and becomes the temporary server. Its processes are found through /proc by the PREFECT_HOME of the test.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._runs import gone_within, local_server_env, processes_with, run_argv
from tests.conftest import requires_shared

pytestmark = [
    pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds server processes through /proc (Linux)"),
    pytest.mark.slow,  # starts real Prefect servers
]


def run_command(server: FakeOpenAIServer, tmp_path: Path, samples: int) -> tuple[list[str], dict[str, str]]:
    env = local_server_env(tmp_path / "prefect-home", 0)  # the server stops with its run (kept: test_server_start.py)
    return run_argv(server.base_url, tmp_path / "results", samples, "--concurrency", "4"), env


@requires_shared
def test_a_run_starts_a_temporary_server_and_stops_it(tmp_path):
    with FakeOpenAIServer(latency=0.01) as server:
        command, env = run_command(server, tmp_path, samples=4)
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr[-3000:]
        assert server.answered == 8
    assert (tmp_path / "results.json").exists()
    assert "deadlock" not in done.stderr and "Traceback" not in done.stderr
    assert (tmp_path / "prefect-home" / "temporary-server.log").exists(), (
        "the server logs to PREFECT_HOME, not the terminal"
    )
    assert gone_within(tmp_path / "prefect-home", 5), "the temporary Prefect server outlived its run"


@requires_shared
def test_a_killed_run_takes_its_temporary_server_with_it(tmp_path):
    with FakeOpenAIServer(latency=0.5) as server:
        command, env = run_command(server, tmp_path, samples=200)
        run = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while server.requests == 0 or len(processes_with(tmp_path / "prefect-home")) < 2:
                assert run.poll() is None and time.monotonic() < deadline, "the run ended or never started judging"
                time.sleep(0.1)
        finally:
            run.send_signal(signal.SIGKILL)
            run.wait()
        assert gone_within(tmp_path / "prefect-home", 10), "a killed run left its temporary Prefect server running"

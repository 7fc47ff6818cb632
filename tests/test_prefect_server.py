"""`judgebench run` without a Prefect server: it starts a temporary one and never leaves it behind.

No PREFECT_API_URL here, unlike the rest of the suite: the run's helper process reads Prefect's settings
and becomes the temporary server. Its processes are found through /proc by the PREFECT_HOME of the test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests.conftest import CANARY_KEY, GPT4O_FILE, SHARED, requires_shared

pytestmark = [
    pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds server processes through /proc (Linux)"),
    pytest.mark.slow,  # starts real Prefect servers
]


def processes_with(prefect_home: Path) -> list[int]:
    """Live processes (not zombies) whose environment holds this PREFECT_HOME."""
    marker = f"PREFECT_HOME={prefect_home}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (
                marker in (entry / "environ").read_bytes().split(b"\0")
                and "Z" not in (entry / "stat").read_text().split(")")[-1][:3]
            ):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def run_command(server: FakeOpenAIServer, tmp_path: Path, samples: int) -> tuple[list[str], dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(
        OPENAI_API_KEY=CANARY_KEY,
        PREFECT_HOME=str(tmp_path / "prefect-home"),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        JUDGEBENCH_SERVER_KEEPALIVE="0",
    )  # the server stops with its run (kept servers: test_server_start.py)
    command = [
        sys.executable,
        "-m",
        "judgebench_flows.cli.main",
        "run",
        "--data-path",
        str(SHARED / "data" / GPT4O_FILE),
        "--max-samples",
        str(samples),
        "--model",
        "judge",
        "--base-url",
        server.base_url,
        "--no-progress",
        "--db-url",
        f"sqlite:///{tmp_path / 'results.db'}",
        "--result-path",
        str(tmp_path / "results.json"),
        "--output-dir",
        str(tmp_path / "run"),
        "--no-report",
        "--concurrency",
        "4",
    ]
    return command, env


def gone_within(prefect_home: Path, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while processes_with(prefect_home):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


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

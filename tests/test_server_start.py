"""The temporary Prefect server on a busy machine: it starts however slow the boot, is kept for the next
run, stops when idle, and a server that cannot start is exit 5 with advice, not "bad input".

Real parts: `judgebench run` as a subprocess without PREFECT_API_URL, the bundled OpenAI-compatible
endpoint, and busy processes spinning beside the runs (the machine's two cores fully taken).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from judgebench_flows.cli.local_server import DEFAULT_KEEPALIVE, alive
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._runs import gone_within, local_server_env, processes_with, record_of, run_argv, stop_kept_server
from tests.conftest import requires_shared

pytestmark = [
    pytest.mark.slow,
    requires_shared,
    pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds processes through /proc (Linux)"),
]

NOISE = ("Error logging to API", "EventsWorker", "Still processing items", "Traceback")


@contextmanager
def busy_processes(n: int = 2) -> Iterator[None]:
    """Processes that take a whole core each, as other jobs on a shared CI machine do."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def judgebench(
    server: FakeOpenAIServer,
    where: Path,
    samples: int = 2,
    keepalive: float = DEFAULT_KEEPALIVE,
    extra_env: dict[str, str] | None = None,
    timeout: float = 900,
    extra: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    """One run as a new user makes it: fresh HOME unless `where` is reused, no PREFECT_API_URL."""
    (where / "home").mkdir(parents=True, exist_ok=True)
    env = local_server_env(where / "prefect-home", keepalive, HOME=str(where / "home"), **(extra_env or {}))
    command = run_argv(server.base_url, where / f"run-{time.monotonic_ns()}", samples, *extra)
    return subprocess.run(command, env=env, cwd=where, capture_output=True, text=True, timeout=timeout)


def test_three_first_runs_beside_two_busy_processes_all_succeed(tmp_path):
    """Each run boots a server in a fresh HOME and PREFECT_HOME (creating Prefect's database) while two
    processes keep both cores busy: a fixed 20 s wait failed most of these."""
    with FakeOpenAIServer("My final verdict is [[A>B]]", latency=0.2) as server, busy_processes(2):
        for attempt in range(3):
            where = tmp_path / f"user{attempt}"
            try:
                done = judgebench(server, where)  # the default: the server is kept for later runs
                assert done.returncode == 0, done.stderr[-3000:]
                assert not any(noise in done.stderr for noise in NOISE), done.stderr[-3000:]
            finally:
                stop_kept_server(where / "prefect-home")
            assert gone_within(where / "prefect-home", 30)


def test_the_next_run_attaches_to_the_kept_server(tmp_path):
    """(Stopping once idle: test_a_killed_run_releases_its_kept_server.)"""
    home = tmp_path / "prefect-home"
    with FakeOpenAIServer("My final verdict is [[A>B]]", latency=0.05) as server:
        try:
            first = judgebench(server, tmp_path, keepalive=300)
            assert first.returncode == 0, first.stderr[-3000:]
            kept = record_of(home)
            assert alive(kept["server_pid"]), "the server was not kept after its run"
            second = judgebench(server, tmp_path, keepalive=300, extra=("--no-cache",))  # pays again: proof it judged
            assert second.returncode == 0, second.stderr[-3000:]
            assert record_of(home)["server_pid"] == kept["server_pid"], "the second run started its own server"
            assert server.answered == 8
            for done in (first, second):
                assert not any(noise in done.stderr + done.stdout for noise in NOISE), done.stderr[-3000:]
        finally:
            stop_kept_server(home)
        assert gone_within(home, 60), "the kept server did not stop when told"
        assert not list((home / "judgebench-server").glob("*.json")), "a stopped server is still recorded"


def test_a_stale_record_is_replaced(tmp_path):
    """A record whose supervisor died (a reboot, kill -9) must not send runs to a dead port."""
    home = tmp_path / "prefect-home"
    with FakeOpenAIServer("My final verdict is [[A>B]]", latency=0.05) as server:
        try:
            assert judgebench(server, tmp_path, keepalive=60).returncode == 0
            kept = record_of(home)
            os.kill(kept["supervisor_pid"], signal.SIGKILL)  # the server dies with it
            deadline = time.monotonic() + 60
            while alive(kept["server_pid"]) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not alive(kept["server_pid"]), "a server outlived its supervisor"
            again = judgebench(server, tmp_path, keepalive=60)
            assert again.returncode == 0, again.stderr[-3000:]
            assert record_of(home)["server_pid"] != kept["server_pid"]
        finally:
            stop_kept_server(home)


def test_a_killed_run_releases_its_kept_server(tmp_path):
    home = tmp_path / "prefect-home"
    with FakeOpenAIServer("My final verdict is [[A>B]]", latency=0.5) as server:
        env = local_server_env(home, 3)
        command = run_argv(server.base_url, tmp_path / "r", 200, "--concurrency", "4")
        run = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 600
            while server.requests == 0 or len(processes_with(home)) < 3:  # run, supervisor, server
                assert run.poll() is None and time.monotonic() < deadline, "the run ended or never started judging"
                time.sleep(0.2)
        finally:
            run.send_signal(signal.SIGKILL)
            run.wait()
        try:
            assert gone_within(home, 3 + 60), "a killed run's kept server never stopped"
        finally:
            stop_kept_server(home)


def test_a_server_that_cannot_start_is_exit_5_with_advice(tmp_path):
    with FakeOpenAIServer("My final verdict is [[A>B]]") as server:
        done = judgebench(
            server,
            tmp_path,
            keepalive=0,
            extra_env={"PREFECT_API_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{tmp_path}/no-such-dir/prefect.db"},
        )
    assert done.returncode == 5, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: the temporary Prefect server") and "PREFECT_API_URL" in last, done.stderr
    assert "temporary-server.log" in last and "Traceback" not in done.stderr

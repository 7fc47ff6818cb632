"""Prefect's background server on a busy machine: a run without PREFECT_API_URL starts it however slow
the boot, the next run uses it (no second server), a server that died is replaced, and a server that
cannot start is exit 5 with advice, not "bad input".

Real parts: `judgebench run` as a subprocess without PREFECT_API_URL, Prefect's own `prefect server
start` (detached, as a run starts it) / `prefect server stop`, the bundled OpenAI-compatible endpoint, and busy processes
spinning beside the runs (the machine's two cores fully taken).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest

from judgebench_flows.runtime.prefect_server import PORT_FILE, SERVER_LOG
from judgebench_flows.runtime.server_watch import alive
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._runs import background_pid, local_server_env, run_argv, server_processes, stop_background_server
from tests.conftest import requires_shared

pytestmark = [
    pytest.mark.slow,
    requires_shared,
    pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds processes through /proc (Linux)"),
]

NOISE = ("Error logging to API", "EventsWorker", "Still processing items", "Traceback", "Error flushing")


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
    server: FakeOpenAIServer, where: Path, env: dict[str, str], samples: int = 2, extra: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """One run as a user makes it in `where` (its HOME), no PREFECT_API_URL."""
    (where / "home").mkdir(parents=True, exist_ok=True)
    command = run_argv(server.base_url, where / f"run-{time.monotonic_ns()}", samples, *extra)
    return subprocess.run(
        command, env={**env, "HOME": str(where / "home")}, cwd=where, capture_output=True, text=True, timeout=900
    )


def test_three_first_runs_beside_two_busy_processes_all_succeed(tmp_path):
    """Three users' first runs at once, each booting Prefect's server in a fresh HOME and PREFECT_HOME
    (creating its database) while two processes keep both cores busy: each run waits for its server as
    long as the boot takes, not a fixed time."""
    users = [tmp_path / f"user{n}" for n in range(3)]
    envs = [local_server_env(where / "prefect-home") for where in users]
    with FakeOpenAIServer("My final verdict is [[A>B]]", latency=0.2) as server, busy_processes(2):
        try:
            with ThreadPoolExecutor(len(users)) as pool:
                runs = list(pool.map(lambda user: judgebench(server, *user), zip(users, envs, strict=True)))
        finally:
            for env in envs:
                stop_background_server(env)
    for done in runs:
        assert done.returncode == 0, done.stderr[-3000:]
        assert not any(noise in done.stderr for noise in NOISE), done.stderr[-3000:]


def environment_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def test_the_next_run_uses_the_running_server(tmp_path):
    """Also: the server a run starts for a user who did not set PREFECT_SERVER_ANALYTICS_ENABLED runs without
    Prefect's telemetry (offline, its failure is a warning about 20 s after starting), and a warning the
    server logs does not end it: a malformed request (uvicorn's "Invalid HTTP request received.") ended a
    `prefect server start --background` server within 10 s here (its output a pipe to the exited CLI:
    rich's console raises SystemExit on the broken pipe); this one logs it to its file and answers on."""
    home = tmp_path / "prefect-home"
    env = local_server_env(home)
    del env["PREFECT_SERVER_ANALYTICS_ENABLED"]  # as a new user's shell: the variable is not set
    with FakeOpenAIServer("My final verdict is [[A>B]]", latency=0.05) as server:
        try:
            first = judgebench(server, tmp_path, env)
            assert first.returncode == 0, first.stderr[-3000:]
            kept = background_pid(home)
            assert alive(kept), "the server was not kept after its run"
            assert environment_of(kept).get("PREFECT_SERVER_ANALYTICS_ENABLED", "").lower() == "false"
            port = int(env["PREFECT_SERVER_API_PORT"])
            with socket.create_connection(("127.0.0.1", port), timeout=30) as malformed:
                malformed.sendall(b"NOT HTTP\r\n\r\n")
                malformed.recv(200)  # uvicorn's 400 (a closed connection: the server is going)
            log = home / SERVER_LOG
            deadline = time.monotonic() + 60
            while "Invalid HTTP request received" not in log.read_text() and time.monotonic() < deadline:
                time.sleep(0.5)
            time.sleep(10)  # a --background server was gone within 10 s of that request
            assert "Invalid HTTP request received" in log.read_text() and alive(kept), log.read_text()[-2000:]
            second = judgebench(server, tmp_path, env, extra=("--no-cache",))  # pays again: proof it judged
            assert second.returncode == 0, second.stderr[-3000:]
            assert background_pid(home) == kept and server_processes(home) == [kept], "a second server was started"
            assert server.answered == 8
            for done in (first, second):
                assert not any(noise in done.stderr + done.stdout for noise in NOISE), done.stderr[-3000:]
        finally:
            stop_background_server(env)
        assert not server_processes(home), "`prefect server stop` did not stop it"


def test_a_server_that_died_is_replaced(tmp_path):
    """A pid file whose server was killed (a reboot, kill -9) must not send runs to a dead port."""
    home = tmp_path / "prefect-home"
    env = local_server_env(home)
    with FakeOpenAIServer("My final verdict is [[A>B]]", latency=0.05) as server:
        try:
            assert judgebench(server, tmp_path, env).returncode == 0
            dead = background_pid(home)
            os.kill(dead, signal.SIGKILL)
            deadline = time.monotonic() + 60
            while alive(dead) and time.monotonic() < deadline:
                time.sleep(0.2)
            again = judgebench(server, tmp_path, env)
            assert again.returncode == 0, again.stderr[-3000:]
            assert background_pid(home) != dead
        finally:
            stop_background_server(env)


def test_a_server_that_cannot_start_is_exit_5_with_advice(tmp_path):
    env = local_server_env(
        tmp_path / "prefect-home",
        PREFECT_API_DATABASE_CONNECTION_URL=f"sqlite+aiosqlite:///{tmp_path}/no-such-dir/prefect.db",
    )
    with FakeOpenAIServer("My final verdict is [[A>B]]") as server:
        try:
            done = judgebench(server, tmp_path, env)
        finally:
            stop_background_server(env)
    assert done.returncode == 5, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: the Prefect server") and "PREFECT_API_URL" in last, done.stderr
    assert "prefect server start" in last and "Traceback" not in done.stderr


def flow_runs_on(api_url: str) -> int:
    """How many flow runs the Prefect server behind `api_url` records (its public REST API)."""
    import json
    import urllib.request

    request = urllib.request.Request(
        f"{api_url}/flow_runs/count", data=b"{}", headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return int(json.loads(answer.read()))


def flow_run_names_on(api_url: str) -> list[str]:
    """The names of every flow run the server behind `api_url` records (its public REST API)."""
    import json
    import urllib.request

    request = urllib.request.Request(
        f"{api_url}/flow_runs/filter", data=b"{}", headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return [run["name"] for run in json.loads(answer.read())]


def test_a_foreign_server_on_the_default_port_gets_nothing(tmp_path):
    """Another user's Prefect server (another PREFECT_HOME) listens on the port this user's settings name
    (Prefect's "default" here: the test's PREFECT_SERVER_API_PORT). A new user's run with a fresh HOME
    starts its own server on a free port, says so (wrapped to the terminal), remembers the port, and
    completes; the stranger's server records no flow run. The next run reuses the remembered server,
    silently. The user's server's UI talks to its own API (`/ui-settings`), each run prints the link to
    its flow run's page there, and the run is named by what it judged."""
    foreign_env = local_server_env(tmp_path / "stranger-home")
    port = foreign_env["PREFECT_SERVER_API_PORT"]
    foreign_url = f"http://127.0.0.1:{port}/api"
    mine = tmp_path / "new-user" / "prefect-home"
    env = {**local_server_env(mine), "PREFECT_SERVER_API_PORT": port}
    try:  # the stranger's server as this project starts one (until it answers), not `--background`'s (a
        # warning it logs ends that one: see test_the_next_run_uses_the_running_server)
        started = subprocess.run(
            [sys.executable, "-m", "judgebench_flows.cli.prefect_server"],
            env=foreign_env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert started.returncode == 0 and started.stdout.strip() == foreign_url, started.stdout + started.stderr
        with FakeOpenAIServer("My final verdict is [[A>B]]", latency=0.05) as server:
            first = judgebench(server, tmp_path / "new-user", env)
            second = judgebench(server, tmp_path / "new-user", env, extra=("--no-cache",))
        assert first.returncode == 0, first.stderr[-3000:]
        assert second.returncode == 0, second.stderr[-3000:]
        assert flow_runs_on(foreign_url) == 0, "the run reported to a stranger's server"
        said = " ".join(first.stderr.split())
        assert said.count(f"port {port} is held") == 1 and "PREFECT_API_URL to use a server" in said, said[-3000:]
        wide = [line for line in first.stderr.splitlines() if len(line) > 80 and " " in line.strip()]
        assert not wide, first.stderr  # wrapped at words; only a path longer than a line stays whole
        assert "starting Prefect's server" in first.stderr and "Prefect's server is up" in first.stderr
        own_port = (mine / PORT_FILE).read_text().split()[1]
        assert own_port != port
        own_url = f"http://127.0.0.1:{own_port}/api"
        assert flow_runs_on(own_url) >= 2, "the runs are not on this home's own server"
        from judgebench_flows.runtime.prefect_server import ui_api_url

        assert ui_api_url(own_url) == own_url, "the UI of the user's own server talks to another API"
        for done in (first, second):
            links = [line for line in done.stderr.splitlines() if line.startswith("UI: ")]
            assert len(links) == 1, done.stderr[-3000:]
            assert links[0].startswith(f"UI: http://127.0.0.1:{own_port}/runs/flow-run/"), links
        names = flow_run_names_on(own_url)
        assert len(names) >= 2 and all(name == "arena_hard · judge · gpt-4o" for name in names), names
        assert "held" not in second.stderr and "starting Prefect's server" not in second.stderr, second.stderr
        assert server_processes(mine) == [background_pid(mine)], "a second server of this home was started"
    finally:
        stop_background_server(env)
        stop_background_server(foreign_env)

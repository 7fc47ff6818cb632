"""`judgebench run` as a user starts it without PREFECT_API_URL (Prefect's background server of its
PREFECT_HOME), and that server's processes: shared by test_server_start.py and test_server_death.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from judgebench_flows.runtime.prefect_server import PID_FILE
from tests.conftest import CANARY_KEY, GPT4O_FILE, SHARED

GPT4O_PATH = SHARED / "data" / GPT4O_FILE


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def local_server_env(prefect_home: Path, **extra: str) -> dict[str, str]:
    """This process's environment without PREFECT_API_URL: the run uses (or starts) the background server
    of `prefect_home`, on a port of its own (not Prefect's 4200, which other servers on the machine use)."""
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(
        PREFECT_HOME=str(prefect_home),
        PREFECT_SERVER_API_PORT=str(free_port()),
        OPENAI_API_KEY=CANARY_KEY,
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        **extra,
    )
    return env


def run_argv(
    base_url: str,
    out: Path,
    samples: int | None,
    *extra: str,
    data_path: Path = GPT4O_PATH,
    db_url: str | None = None,
) -> list[str]:
    """`judgebench run` on `data_path` (a seeded subset of `samples` pairs, or all), its database, results
    and JSONL named by `out`, no progress bar and no report."""
    return [
        sys.executable,
        "-m",
        "judgebench_flows.cli.main",
        "run",
        "--data-path",
        str(data_path),
        *(("--max-samples", str(samples)) if samples is not None else ()),
        "--model",
        "judge",
        "--base-url",
        base_url,
        "--no-progress",
        "--db-url",
        db_url or f"sqlite:///{out}.db",
        "--result-path",
        f"{out}.json",
        "--output-dir",
        str(out),
        "--no-report",
        *extra,
    ]


def processes_with(prefect_home: Path) -> list[int]:
    """Live processes (not zombies) whose environment holds this PREFECT_HOME (found through /proc)."""
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


def server_processes(prefect_home: Path) -> list[int]:
    """The Prefect API servers among `processes_with(prefect_home)`: uvicorn (`--background`'s) or the
    `prefect server start` a run starts."""
    found = []
    for pid in processes_with(prefect_home):
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"uvicorn" in args or (b"server" in args and b"start" in args):
                found.append(pid)
        except OSError:
            continue
    return found


def gone_within(prefect_home: Path, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while processes_with(prefect_home):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def background_pid(prefect_home: Path) -> int:
    """The process of the background server Prefect recorded in this PREFECT_HOME."""
    return int((prefect_home / PID_FILE).read_text().strip())


def stop_background_server(env: dict[str, str]) -> None:
    """`prefect server stop` for the PREFECT_HOME of `env`, then wait until its processes are gone."""
    subprocess.run([sys.executable, "-m", "prefect", "server", "stop"], env=env, capture_output=True, timeout=120)
    gone_within(Path(env["PREFECT_HOME"]), 60)

"""`judgebench run` as a user starts it without PREFECT_API_URL (a temporary Prefect server), and the
processes that server leaves: shared by the tests of the temporary server (test_prefect_server.py,
test_server_start.py, test_server_death.py)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from judgebench_flows.cli.local_server import alive
from tests.conftest import CANARY_KEY, GPT4O_FILE, SHARED

GPT4O_PATH = SHARED / "data" / GPT4O_FILE


def local_server_env(prefect_home: Path, keepalive: float | str, **extra: str) -> dict[str, str]:
    """This process's environment without PREFECT_API_URL: the run starts (or attaches to) a temporary
    server in `prefect_home`, kept `keepalive` seconds after it (conftest makes 0 the suite's default)."""
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(
        PREFECT_HOME=str(prefect_home),
        OPENAI_API_KEY=CANARY_KEY,
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        JUDGEBENCH_SERVER_KEEPALIVE=str(keepalive),
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
    """The Prefect API servers (uvicorn) among `processes_with(prefect_home)`."""
    found = []
    for pid in processes_with(prefect_home):
        try:
            if b"uvicorn" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
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


def record_of(prefect_home: Path) -> dict:
    """The one kept server recorded in this PREFECT_HOME."""
    records = list((prefect_home / "judgebench-server").glob("*.json"))
    assert len(records) == 1, records
    return json.loads(records[0].read_text())


def stop_kept_server(prefect_home: Path) -> None:
    for path in (prefect_home / "judgebench-server").glob("*.json"):
        pid = json.loads(path.read_text())["supervisor_pid"]
        if alive(pid):
            os.kill(pid, signal.SIGTERM)
    gone_within(prefect_home, 60)

"""The server watch cancels the run and the main thread ends it (cli/server_watch): a process whose Prefect
server's process ended gets SIGTERM in its main thread, and one whose main thread stays stuck after that is
ended by the main thread's SIGALRM handler within `CANCEL_GRACE_SECONDS`: one line, exit 5, the run's row
`failed`. The watch's own thread never ends the process.

Real parts: a child Python process running `ServerWatch` as `command_run` does, a real process standing in
for the server (killed mid-run) and a real SQLite results database.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes through /proc (Linux)")

GRACE = 1.0
# The child: a "server" process, a watch on it, a run row in the results database, then a main thread that
# either handles the cancellation (raises, as Prefect's and cli/main's handlers do) or stays stuck.
CHILD = textwrap.dedent(
    """
    import signal, subprocess, sys, time
    from judgebench_flows.runtime import server_watch
    from judgebench_flows.data import db

    server_watch.CANCEL_GRACE_SECONDS = {grace}
    how, db_url = sys.argv[1], sys.argv[2]
    engine = db.open_database(db_url)
    db.start_run(engine, "r1", config_key="k", judge_type="j", model="m")
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    class Cancelled(BaseException):
        pass
    def cancelled(signum, frame):
        if how == "handles":
            raise Cancelled()
    signal.signal(signal.SIGTERM, cancelled)
    watch = server_watch.ServerWatch("http://127.0.0.1:9/api", server.pid, db_url, timeout=60).start()
    if how == "no-alarm":
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
    print("watching", flush=True)
    server.kill(); server.wait()
    try:
        deadline = time.monotonic() + {grace} + 4
        while time.monotonic() < deadline:
            time.sleep(0.05)
    except Cancelled:
        watch.disarm()
        print("cancelled:", watch.lost, flush=True)
        sys.exit(5)
    print("still running", flush=True)
    """
)


def run_child(tmp_path: Path, how: str) -> tuple[subprocess.CompletedProcess, float]:
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(grace=GRACE))
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(script), how, f"sqlite:///{tmp_path / 'r.db'}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done, time.monotonic() - began


def status_of(tmp_path: Path) -> tuple[str, str]:
    with sqlite3.connect(tmp_path / "r.db") as connection:
        return connection.execute("select status, message from runs").fetchone()


def test_a_lost_server_cancels_the_run_in_its_main_thread(tmp_path: Path) -> None:
    done, took = run_child(tmp_path, "handles")
    assert done.returncode == 5, done.stderr[-2000:]
    assert "cancelled: the Prefect server stopped during the run" in done.stdout, done.stdout
    assert took < 15, took
    assert status_of(tmp_path)[0] == "running"  # the run's own path records it (command_run: `failed`)


def test_a_run_stuck_after_the_cancellation_is_ended_by_the_main_threads_alarm(tmp_path: Path) -> None:
    done, took = run_child(tmp_path, "stuck")
    assert done.returncode == 5, (done.stdout, done.stderr[-2000:])
    assert "still running" not in done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the Prefect server stopped during the run"), lines
    assert "run the same command again" in lines[0]
    status, message = status_of(tmp_path)
    assert status == "failed" and "Prefect server stopped" in message
    assert took < 15, took


def test_the_watch_thread_never_ends_the_process(tmp_path: Path) -> None:
    """With the main thread's alarm ignored, nothing ends the process early: no thread calls os._exit."""
    done, _ = run_child(tmp_path, "no-alarm")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "still running" in done.stdout

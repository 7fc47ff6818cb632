"""The session's finalizer (conftest `no_process_left_behind`) finds what tests left running by the
PREFECT_HOME they gave it, and stops it: one that ignores SIGTERM too (SIGKILL after the grace)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import _processes
from tests._processes import processes_of_homes_under, stop_processes_of_homes_under

pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds processes through /proc (Linux)")

STUBBORN = "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(600)"


def test_processes_of_the_sessions_homes_are_found_and_stopped(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(_processes, "GRACE_SECONDS", 1.0)
    ours, theirs = tmp_path / "session", tmp_path / "elsewhere"
    started = {
        where: subprocess.Popen(
            [sys.executable, "-c", STUBBORN],
            env={**os.environ, "PREFECT_HOME": str(where / "prefect-home")},
            stdout=subprocess.PIPE,
            text=True,
        )
        for where in (ours, theirs)
    }
    try:
        for process in started.values():
            assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        assert processes_of_homes_under(ours) == [started[ours].pid]
        assert stop_processes_of_homes_under(ours) == [started[ours].pid]
        assert started[ours].wait(timeout=10) == -9  # it ignored SIGTERM
        assert started[theirs].poll() is None, "a process of another home was stopped"
    finally:
        for process in started.values():
            process.kill()
            process.wait()


def test_this_interpreters_resource_tracker_is_not_a_leftover(tmp_path: Path, monkeypatch) -> None:
    """A local Dask cluster's workers start multiprocessing's resource tracker in this process: it ends with
    this process, and is not reported as left behind."""
    from multiprocessing import resource_tracker

    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect-home"))
    tracker = resource_tracker._resource_tracker
    if tracker._pid is not None:
        pytest.skip("this process's resource tracker already runs, with another environment")
    tracker.ensure_running()
    try:
        assert tracker._pid is not None
        assert tracker._pid not in processes_of_homes_under(tmp_path)
    finally:
        tracker._stop()

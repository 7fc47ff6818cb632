"""The bookkeeping of a kept temporary Prefect server: which runs may share it, which leases are live, and
the progress signal a booting server gives (real processes, real files; no Prefect server needed)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from judgebench_flows.cli.local_server import Slot, alive, cpu_ticks, server_key, start_timeout

linux_only = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")


def test_runs_share_a_server_only_with_the_same_home_and_server_settings(tmp_path):
    base = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_LOGGING_LEVEL": "WARNING"}
    key = server_key(tmp_path / "a", base, "3.8.8")
    assert key == server_key(tmp_path / "a", {**base, "PREFECT_LOGGING_LEVEL": "DEBUG"}, "3.8.8"), (
        "client-only settings split servers"
    )
    assert key != server_key(tmp_path / "b", base, "3.8.8")
    assert key != server_key(
        tmp_path / "a", {**base, "PREFECT_API_DATABASE_CONNECTION_URL": "sqlite+aiosqlite:///x.db"}, "3.8.8"
    )
    assert key != server_key(tmp_path / "a", base, "3.9.0")


def test_leases_of_ended_runs_are_dropped(tmp_path):
    slot = Slot(tmp_path, "k")
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with slot.locked():
            slot.lease(ended.pid)
            slot.lease(running.pid)
            assert slot.live_leases() == 1
        assert not (slot.leases / str(ended.pid)).exists()
    finally:
        running.kill()
        running.wait()
    assert not alive(running.pid)
    assert slot.live_leases() == 0


@linux_only
def test_a_working_process_shows_progress():
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        first = cpu_ticks(spinner.pid)
        deadline = time.monotonic() + 60
        while cpu_ticks(spinner.pid) == first and time.monotonic() < deadline:
            time.sleep(0.1)
        assert cpu_ticks(spinner.pid) != first
    finally:
        spinner.kill()
        spinner.wait()


def test_the_boot_ceiling_is_minutes_and_a_user_may_raise_it(monkeypatch):
    monkeypatch.delenv("JUDGEBENCH_SERVER_START_TIMEOUT", raising=False)
    assert start_timeout(20.0) >= 300, "a fixed 20 s failed first runs on a busy machine"
    assert start_timeout(2000.0) == 2000.0
    monkeypatch.setenv("JUDGEBENCH_SERVER_START_TIMEOUT", "900")
    assert start_timeout(20.0) == 900.0

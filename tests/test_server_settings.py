"""The background Prefect server a first run starts gets the package's server settings, and a user's own
value of one of them wins.

Why: the settings exist for what the server does under a night's load (TASK_RUN_RECORDER: fewer
writers for the cells' subflow run creations to meet on SQLite, docs/performance.md), which no timing
test can pin on a shared machine; what can be checked is that the server really runs with them. Real
parts: `python -m judgebench_flows.cli.prefect_server` starts Prefect's own `prefect server start`
(detached, as a run starts it), and the server says its settings through Prefect's public
`GET /admin/settings`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from judgebench_flows.runtime.prefect_server import TASK_RUN_RECORDER
from tests._runs import local_server_env, stop_background_server

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds processes through /proc (Linux)"),
]

BATCH_SIZE = "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE"
FLUSH_INTERVAL = "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL"


def test_the_started_server_runs_with_the_package_settings_and_the_users_own_win(tmp_path):
    """The server's own settings (not our environment) show the batched task run recorder; the flush
    interval the user set stays the user's, not the package's."""
    assert set(TASK_RUN_RECORDER) == {BATCH_SIZE, FLUSH_INTERVAL}
    env = local_server_env(tmp_path / "prefect-home", **{FLUSH_INTERVAL: "3"})
    env.pop(BATCH_SIZE, None)
    try:
        started = subprocess.run(
            [sys.executable, "-m", "judgebench_flows.cli.prefect_server"],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert started.returncode == 0, started.stdout + started.stderr
        api_url = started.stdout.strip().splitlines()[-1]
        with urllib.request.urlopen(f"{api_url}/admin/settings", timeout=30) as answer:
            recorder = json.loads(answer.read())["server"]["services"]["task_run_recorder"]
    finally:
        stop_background_server(env)
    assert recorder["batch_size"] == int(TASK_RUN_RECORDER[BATCH_SIZE]) != 1, recorder  # 1: Prefect's default
    assert recorder["flush_interval"] == 3.0, recorder  # the user's, not the package's 1

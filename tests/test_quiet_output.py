"""Prefect's background workers stay off the terminal; the runs' warnings are kept in PREFECT_HOME.

A real Prefect log worker sends a real batch to an API address where nothing listens (a server that went
away): Prefect alone prints `--- Error logging to API ---`; with the CLI's logging settings (public:
PREFECT_LOGGING_SETTINGS_PATH, runtime/logging.yml) the terminal stays clean and the runs' warnings and the
workers' messages are in `judgebench-background.log`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # runs a real Prefect log worker against a dead API

SCRIPT = textwrap.dedent("""
    import logging, sys
    if sys.argv[1] == "routed":
        from judgebench_flows.runtime.quiet import quiet_prefect
        quiet_prefect(verbose=False)  # before Prefect is imported, as the CLI does
    from prefect.logging.configuration import ensure_logging_setup
    from prefect.logging.handlers import APILogWorker
    ensure_logging_setup()  # as a flow run does
    APILogWorker.instance().send({"name": "prefect.flow_runs", "level": 40, "message": "shard 3 failed",
                                  "timestamp": "2026-01-01T00:00:00Z", "flow_run_id": None, "task_run_id": None})
    APILogWorker.drain_all()
    logging.getLogger("prefect.flow_runs").warning("shard 3 failed: kept")
    logging.getLogger("EventsWorker").warning("Still processing items: 3 items remaining...")
""")


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(tmp_path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / mode),
        "PREFECT_API_URL": f"http://127.0.0.1:{closed_port()}/api",
        "PREFECT_CLIENT_MAX_RETRIES": "0",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW": "ignore",
    }
    env.pop("PREFECT_LOGGING_SETTINGS_PATH", None)
    return subprocess.run([sys.executable, "-c", SCRIPT, mode], env=env, capture_output=True, text=True, timeout=300)


def test_background_noise_goes_to_a_file_in_prefect_home(tmp_path):
    plain = run(tmp_path, "plain")
    assert "Error logging to API" in plain.stderr, (
        "the scenario no longer makes Prefect's noise: " + plain.stderr[-2000:]
    )
    routed = run(tmp_path, "routed")
    assert routed.returncode == 0, routed.stderr[-2000:]
    assert routed.stderr == "" and routed.stdout == ""
    log = (tmp_path / "routed" / "judgebench-background.log").read_text()
    assert "shard 3 failed: kept" in log, "a run's warning is not kept in the file"
    assert "Still processing items" in log


def test_tracebacks_of_an_unreachable_prefect_api_stay_off_the_console_other_errors_do_not() -> None:
    """A Prefect server that stopped makes Prefect log pages of httpx tracebacks above our one line (exit 5);
    those leave the console, an endpoint's connection error or a bug does not."""
    import logging

    import httpx
    import openai

    from judgebench_flows.runtime.quiet import HideRunErrorsReportedElsewhere

    def record(exc: BaseException, logger: str = "prefect.task_runs") -> logging.LogRecord:
        return logging.LogRecord(logger, logging.ERROR, __file__, 1, "Task run failed", None, (type(exc), exc, None))

    request = httpx.Request("POST", "http://127.0.0.1:4200/api/logs/")
    try:
        try:
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        except httpx.ConnectError as inner:
            raise RuntimeError("publish failed") from inner
    except RuntimeError as chained:
        api_gone = chained
    keep = HideRunErrorsReportedElsewhere()
    assert not keep.filter(record(api_gone))
    assert not keep.filter(record(httpx.ReadTimeout("timed out", request=request), "prefect.flow_runs"))
    assert keep.filter(record(openai.APIConnectionError(request=request)))  # the judge's endpoint: shown
    assert keep.filter(record(ValueError("a bug")))
    assert keep.filter(record(api_gone, "prefect.server"))  # not a run's record: left alone


def test_prefects_crash_records_of_a_stopped_run_stay_off_the_console_from_every_run_logger() -> None:
    """SIGTERM or Ctrl-C while Prefect starts the flow run (the head start judging already) is logged by
    Prefect's engine logger, not the flow run's: `main`'s one line says it, Prefect's records do not."""
    import logging

    from judgebench_flows.runtime.quiet import HideRunErrorsReportedElsewhere

    def record(message: str, logger: str) -> logging.LogRecord:
        return logging.LogRecord(logger, logging.ERROR, __file__, 1, message, None, None)

    keep = HideRunErrorsReportedElsewhere()
    for logger in ("prefect.engine", "prefect.flow_runs"):
        assert not keep.filter(record("Crash detected! Execution was aborted by a termination signal.", logger))
        assert not keep.filter(
            record("Finished in state Crashed('Execution was aborted by an interrupt signal.')", logger)
        )
    assert keep.filter(record("Crash detected! Execution was aborted by a termination signal.", "prefect.server"))
    assert keep.filter(record("Finished in state Failed('a bug')", "prefect.engine"))

"""Where a flow run is seen: its name in Prefect's UI (core/run_names.py) and one line linking its page.

The name is set by the flow itself (`flow_run_name`, read from the run's parameters through
`prefect.runtime`), so a run from the CLI, a deployment or a night's cell is named alike. The link comes
from Prefect's own `url_for` (its UI's route for a flow run), under the UI URL Prefect derives from the
API the run reports to.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime, timezone
from typing import Any

from judgebench_flows.core.config import DEFAULT_DATA_FILE
from judgebench_flows.core.run_names import config_run_name, night_name, run_name
from judgebench_flows.judging.run_context import RunProgress


def flow_run_link() -> str | None:
    """This flow run's page in Prefect's UI, or None outside a flow run or without a known UI."""
    from prefect.runtime import flow_run
    from prefect.utilities.urls import url_for

    run_id = flow_run.id
    return url_for("flow-run", obj_id=run_id) if run_id else None


def link_line() -> str | None:
    """`flow run 'arena_hard · gpt-4o-mini · gpt-4o' in Prefect's UI: http://...`: said once per run."""
    from prefect.runtime import flow_run

    link = flow_run_link()
    return f"flow run '{flow_run.name}' in Prefect's UI: {link}" if link else None


def short_link_line() -> str | None:
    """`UI: http://...`: the terminal's line, within 80 columns with the link whole (a 5-digit port)."""
    link = flow_run_link()
    return f"UI: {link}" if link else None


def say_link(progress: RunProgress | None = None) -> None:
    """The line linking this flow run's page: in the run's log (a deployment's, a night's: `--watch` and
    the worker show it) and to the run's own listeners (the CLI prints it above its progress bar)."""
    from prefect import get_run_logger

    line = link_line()
    if line is None:
        return
    get_run_logger().info(line)
    if progress is not None:
        progress.announce_link(short_link_line() or line)


def night_date() -> date:
    """The night's date: the day it was scheduled for (a rescheduled or retried night keeps it), in UTC."""
    from prefect.runtime import flow_run

    when: Any = flow_run.scheduled_start_time
    if isinstance(when, datetime):
        return when.astimezone(timezone.utc).date()
    return datetime.now(timezone.utc).date()


def judgebench_run_name() -> str:
    """The `judgebench` flow's run name: its configuration's judge, model and data file."""
    from prefect.runtime import flow_run

    return _named(lambda: config_run_name(flow_run.parameters["config"]), "judgebench")


def nightly_run_name() -> str:
    """The night's own run: `nightly 2026-11-27`."""
    return _named(lambda: night_name(night_date()), "nightly-benchmarks")


def adhoc_run_name() -> str:
    """An ad-hoc run: its judge, model and data file. A night's pool cell is named by the night, which
    creates its run (flows/pool_cells.py), with the night's date."""
    from prefect.runtime import flow_run

    def name() -> str:
        given = flow_run.parameters
        if given.get("cell") is not None:  # a night's pool cell: the night named its run when creating it
            return str(flow_run.name or "judgebench-adhoc")
        data = given.get("data_path") or given.get("data_file") or DEFAULT_DATA_FILE
        return run_name(given.get("judge_type") or "arena_hard", given["model"], data)

    return _named(name, "judgebench-adhoc")


def _named(make: Callable[[], Any], fallback: str) -> str:
    """A run name never fails a run: a configuration that cannot be read yet is named by its flow."""
    try:
        return str(make())
    except Exception:  # the flow's own validation reports a bad configuration, with its line
        return fallback


__all__ = [
    "adhoc_run_name",
    "flow_run_link",
    "judgebench_run_name",
    "link_line",
    "night_date",
    "nightly_run_name",
    "say_link",
]

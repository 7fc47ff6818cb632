"""The night's page: the dashboard (views/dashboard.py) written beside the night's outputs, tonight's
wall time and budget from the flow itself, linked from the night's summary artifact and its last log line.

`<output_root>/dashboards/<night's date>.html` is the night's own page and `<output_root>/dashboard.html`
the newest night's, on a path or in object storage alike (data/storage.py). A page that cannot be
written is a warning, never a failed night: the night's measurements are already stored.
"""

from __future__ import annotations

import asyncio
from datetime import date

from prefect import get_run_logger
from prefect.runtime import flow_run

from judgebench_flows.core.pricing import NightSpend
from judgebench_flows.data import storage
from judgebench_flows.data.night_budget import NightTotals
from judgebench_flows.judging.matrix import MatrixEntry, NightlyMatrix
from judgebench_flows.views.dashboard import PAGE_NAME, DashboardFilter, NightFacts

PAGES_FOLDER = "dashboards"
NIGHTS_SHOWN = 30


def night_page_paths(output_root: str, night: date) -> tuple[str, str]:
    """(the night's own page, the newest night's page) under the matrix's output root."""
    return storage.join(output_root, PAGES_FOLDER, f"{night.isoformat()}.html"), storage.join(output_root, PAGE_NAME)


def _write(db_url: str, paths: tuple[str, str], facts: NightFacts) -> str:
    from judgebench_flows.data import db
    from judgebench_flows.scoring.results import write_atomic
    from judgebench_flows.views.dashboard import dashboard_html

    html = dashboard_html(db.open_database(db_url), DashboardFilter(nights=NIGHTS_SHOWN), facts)
    for path in paths:
        write_atomic(path, html, "output_root")
    return str(paths[0])


async def write_night_page(
    matrix: NightlyMatrix,
    entries: list[MatrixEntry],
    night: date,
    wall_s: float,
    budget: NightSpend | NightTotals | None,
) -> str | None:
    """Write the night's page; its path (a URL in a store), or None when it could not be written."""
    facts = NightFacts(
        night_id=str(flow_run.id) if flow_run.id else None,
        wall_s=wall_s,
        max_cost=budget.max_cost if budget is not None else None,
        spent=budget.spent if budget is not None else None,
        held=budget.held if isinstance(budget, NightTotals) else None,
    )
    db_url = entries[0].config.db_url if entries else matrix.db_url
    try:
        return await asyncio.to_thread(_write, db_url, night_page_paths(matrix.output_root, night), facts)
    except Exception as exc:  # the night's results stand without their page
        from judgebench_flows.core.secrets import redact

        get_run_logger().warning("the night's page was not written: %s", redact(f"{type(exc).__name__}: {exc}"))
        return None


__all__ = ["NIGHTS_SHOWN", "PAGES_FOLDER", "night_page_paths", "write_night_page"]

"""A night's budget (the matrix's `max_cost`) over its cells, decided before any call: in the night's
process, split among the cells from their worst cases (`night_budgets`); on the pool, kept in the results
database the cell runs reserve from and settle into (`open_night_budget`, data/night_budget.py). Either
way each cell's own run refuses a worst case above what it was given, before its first call."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from prefect import get_run_logger
from prefect.runtime import flow_run

from judgebench_flows.core.pricing import format_usd
from judgebench_flows.data.night_budget import NightBudget
from judgebench_flows.judging.matrix import MatrixEntry


def within_night_budget(entry: MatrixEntry, left: float | None) -> MatrixEntry:
    """The cell with its budget capped at what the night has left (its own run then refuses a worst case
    above it before any call, so the night never passes its budget by more than a run's calls in flight)."""
    if left is None:
        return entry
    budget = min(entry.config.max_cost, left) if entry.config.max_cost is not None else left
    return entry.model_copy(update={"config": entry.config.model_copy(update={"max_cost": max(budget, 1e-9)})})


def _worst_case(config: Any) -> float | None:
    """A cell's worst case in dollars before any call (None: unpriced, unbounded, or not estimable: its
    own run then says why, before any call)."""
    from judgebench_flows.core.errors import UserError
    from judgebench_flows.judging.estimate import estimate_run

    if not config.needs_endpoint:
        return 0.0
    try:
        return estimate_run(config).worst_usd
    except UserError:
        return None


async def night_budgets(entries: list[MatrixEntry], max_cost: float | None) -> list[float | None]:
    """Each cell's budget under the night's `max_cost`, decided before any call from every cell's worst
    case, since the cells run side by side: in matrix order, a cell whose worst case still fits is
    admitted and gets its worst case plus what no admitted cell reserved; a cell that no longer fits gets
    what is left, so its own run refuses it before any call (exit 2's one line, in the summary)."""
    if max_cost is None:
        return [None] * len(entries)
    worst = await asyncio.to_thread(lambda: [_worst_case(e.config) for e in entries])  # one clone at a time
    admitted: list[bool] = []
    reserved = 0.0
    for cost in worst:
        admitted.append(cost is not None and reserved + cost <= max_cost)
        reserved += cost if admitted[-1] and cost is not None else 0.0
    get_run_logger().info(
        "night budget %s: %d of %d configurations fit, worst case %s together",
        format_usd(max_cost),
        sum(admitted),
        len(entries),
        format_usd(reserved),
    )
    return [
        max_cost - reserved + (cost or 0.0) if fits else max_cost - reserved
        for cost, fits in zip(worst, admitted, strict=True)
    ]


async def open_night_budget(entries: list[MatrixEntry], max_cost: float | None) -> NightBudget | None:
    """A pool night's budget in the results database its cells share (data/night_budget.py), keyed by
    the night's flow run (a night run again keeps what its cells spent); None without a `max_cost`."""
    if max_cost is None or not entries:
        return None
    budget = NightBudget(entries[0].config.db_url, str(flow_run.id or f"night-{time.time_ns()}"))
    await asyncio.to_thread(budget.open, max_cost)
    return budget


__all__ = ["night_budgets", "open_night_budget", "within_night_budget"]

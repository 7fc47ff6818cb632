"""A night's cells checked before their first call, as a single run is (judging/preflight.check_cell: the
judge loads, the price, the credentials, the endpoint reachable and taking the key).

A night in one process checks every cell at its start, side by side (`refused_cells`): a cell that cannot
run is failed at once with its one line and never scheduled, while the other cells judge; without this a
wrong key or a dead endpoint in one cell was found only when that cell's turn came, possibly hours into
the night behind its batch cells. A pool night's cell run, and an ad-hoc run, checks its own cell on its
worker, where its keys are, before judging (`refusal`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from prefect.states import Failed

from judgebench_flows.core.errors import UserError
from judgebench_flows.flows.outcomes import CellOutcome
from judgebench_flows.flows.retries import BenchmarkFailed, failure_line
from judgebench_flows.judging.matrix import MatrixEntry

if TYPE_CHECKING:
    from prefect.states import State

CHECKS_AT_ONCE = 8  # cells checked side by side (threads: a TCP connect and a GET /models each)
CHECK_TIMEOUT_SECONDS = 5.0  # each connect and each request of a cell's check


def check_line(entry: MatrixEntry) -> str | None:
    """The cell's check's one line (None: it can run), in this thread."""
    from judgebench_flows.judging.preflight import check_cell

    try:
        check_cell(entry.config, CHECK_TIMEOUT_SECONDS)
    except UserError as exc:
        return failure_line(exc)
    return None


async def refused_cells(entries: list[MatrixEntry]) -> dict[str, str]:
    """Every cell that cannot run, by name, with its one line: all checked at once, before any cell starts."""
    gate = asyncio.Semaphore(CHECKS_AT_ONCE)

    async def check(entry: MatrixEntry) -> str | None:
        async with gate:
            return await asyncio.to_thread(check_line, entry)

    lines = await asyncio.gather(*(check(entry) for entry in entries))
    return {entry.name: line for entry, line in zip(entries, lines, strict=True) if line is not None}


def refused_outcome(entry: MatrixEntry, line: str) -> CellOutcome:
    """A cell its check refused: failed with the check's line, before any call."""
    return CellOutcome(
        name=entry.name,
        title=entry.title,
        status="failed",
        result_path=entry.config.result_path,
        message=line,
        endpoint=entry.endpoint,
        wait_s=0.0,
        duration_s=0.0,
    )


async def refusal(entry: MatrixEntry) -> tuple[CellOutcome, State] | None:
    """A cell run's own check on its worker: its outcome and a Failed state with the line, or None."""
    line = await asyncio.to_thread(check_line, entry)
    if line is None:
        return None
    return refused_outcome(entry, line), Failed(message=line, data=BenchmarkFailed(line))


def in_matrix_order(
    entries: list[MatrixEntry], refused: dict[str, str], judged: list[CellOutcome]
) -> list[CellOutcome]:
    """The refused cells' outcomes and the judged cells' (in the order of the cells judged), in matrix order."""
    rest = iter(judged)
    return [refused_outcome(e, refused[e.name]) if e.name in refused else next(rest) for e in entries]


__all__ = ["in_matrix_order", "refusal", "refused_cells", "refused_outcome"]

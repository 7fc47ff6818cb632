"""The `nightly` deployment's flow: every configuration of the nightly benchmark matrix.

`nightly_benchmarks` runs every cell of deployments/nightly.yaml as a `judgebench` subflow, side by
side: up to `cells_in_flight` synchronous cells calling at once, each free place going to a cell of the
endpoint with the most work left and room under its limit, whatever the matrix's order, and as many
started ahead (subflow run, database, data ready) so a freed place calls at once (flows/cell_schedule.py;
batch cells, which mostly wait for their provider, all start at once, so their batches are submitted
together), in one event loop, so every cell
calling one endpoint shares that endpoint's one `concurrency` and `rpm` (the night's one run context,
`judging.run_context`, holds them: `calls.state.CallState.shared_limits`;
the matrix gives each endpoint its value). A cell that fails or regresses does not stop the others; the
flow fails at the end, after writing a summary artifact, so the schedule's run is red whenever any cell
needs a look. The summary and the night's event also give the night's wall time, each endpoint's calls,
busy time, busy share (busy time / wall time) and most calls in flight, and each cell's wait for a place
among the cells in flight. Cells on one data file share its clone check and pair index, and their
judges are built once (the night's run context).

Retries: a cell that failed for a reason that may pass (endpoint down or rate limiting past its calls'
own retries, network lost: flows/retries.py) runs once more after `retry_delay_seconds`, its answered
calls and completed shards coming back from the call cache and the shard cache. A regression, bad input
or a repository/ref that does not exist is not retried: the night ends Failed at once, its events sent.
A night whose process dies is Crashed and rescheduled by the automations (deployments/automations.py);
subflows persist their result, so the rescheduled night reuses every cell that had finished.

Events: each cell's judging run emits its `judgebench.run.*` event as it finishes, and each attempt of
the night ends with `judgebench.night.completed|regressed|failed` listing every cell (flows/events.py).

Where the rest lives: each cell's judging subflow and its retry (flows/cell_runs.py), how a cell ended
(flows/outcomes.py), the night's budget over its cells (flows/night_budgets.py), cells on a work pool
(flows/pool_cells.py), the night's page (views/night_summary.py). The `adhoc` deployment's flow,
`judgebench_adhoc`, is flows/adhoc_flow.py's (importable from here too, as the deployments name it).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import date, datetime, timezone
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import acreate_markdown_artifact
from prefect.runtime import flow_run
from prefect.states import Failed, State
from pydantic import JsonValue

from judgebench_flows.calls.limits import EndpointUse
from judgebench_flows.core.artifact_keys import NIGHTLY_KEY
from judgebench_flows.core.heap import settle_heap
from judgebench_flows.core.pricing import NightSpend, format_usd
from judgebench_flows.core.run_setup import RunSetUp
from judgebench_flows.core.text import shorten
from judgebench_flows.data import storage
from judgebench_flows.data.night_budget import NightTotals
from judgebench_flows.flows.adhoc_flow import judgebench_adhoc
from judgebench_flows.flows.cell_preflight import in_matrix_order, refused_cells
from judgebench_flows.flows.cell_runs import cell_flow, judge_cell, subflow_state
from judgebench_flows.flows.cell_schedule import CellSchedule, PlannedCell, planned_judgments
from judgebench_flows.flows.events import NightRefused, emit_night_event
from judgebench_flows.flows.night_budgets import night_budgets, open_night_budget, within_night_budget
from judgebench_flows.flows.night_page import write_night_page
from judgebench_flows.flows.outcomes import CellOutcome, outcome_of, pool_outcome
from judgebench_flows.flows.pool_cells import judge_cells_on_pool, pool_endpoint_usage
from judgebench_flows.flows.retries import BenchmarkFailed, failure_line
from judgebench_flows.flows.run_pages import night_date, nightly_run_name, say_link
from judgebench_flows.flows.server_writes import queued_writes
from judgebench_flows.judging.matrix import MatrixEntry, NightlyMatrix, load_matrix
from judgebench_flows.judging.run_context import NightShare, RunContext, running
from judgebench_flows.scoring.formatting import percent as _pct
from judgebench_flows.views.night_summary import night_markdown, summary_markdown

NIGHTLY_ARTIFACT_KEY = NIGHTLY_KEY  # the night's summary has a key of its own; each cell's artifacts have theirs
# How long synchronous cells wait for the batch cells to start judging (their batches to go out first).
BATCH_HEAD_START_SECONDS = 120.0


def night_start() -> datetime:
    """When the night was scheduled to start (a rescheduled or retried night keeps its deadline), else now."""
    expected: Any = flow_run.scheduled_start_time
    return expected if isinstance(expected, datetime) and expected.tzinfo else datetime.now(timezone.utc)


def with_deadline(entries: list[MatrixEntry], deadline: datetime | None) -> list[MatrixEntry]:
    """Batch cells with the night's deadline: then their open batches are cancelled and what they have
    not answered is judged synchronously (calls.batch), so the morning's report exists."""
    if deadline is None:
        return entries
    get_run_logger().info("deadline %s: unanswered batch requests then go synchronous", deadline.isoformat())
    moment = deadline.isoformat()
    return [
        e.model_copy(
            update={
                "config": e.config.model_copy(
                    update={"endpoint": e.config.endpoint.model_copy(update={"batch_deadline": moment})}
                )
            }
        )
        if e.config.endpoint.batch
        else e
        for e in entries
    ]


def with_busy_share(endpoints: dict[str, EndpointUse], wall_s: float) -> dict[str, EndpointUse]:
    """Each endpoint's usage with its busy share: its busy time over the night's wall time (1.0: it had
    calls in flight all night long; the busiest endpoint's share says how close the night came to its bound)."""
    return {
        name: {**usage, "busy_share": round(min(1.0, usage["busy_s"] / wall_s), 3) if wall_s > 0 else 0.0}
        for name, usage in endpoints.items()
    }


async def night_artifact(
    entries: list[MatrixEntry],
    outcomes: list[CellOutcome],
    wall_s: float,
    endpoints: dict[str, EndpointUse],
    retiring: list[str],
    budget: NightSpend | NightTotals | None = None,
    page: str | None = None,
) -> None:
    """The night's summary: each cell's outcome, the night's timing, retirements, the leaderboard and a
    link to the night's page (flows/night_page.py)."""
    from judgebench_flows.flows.leaderboard_flow import (
        nightly_leaderboard_section,  # the leaderboard with tonight's rows (never raises)
    )

    leaderboard = await nightly_leaderboard_section([e.config for e in entries], [o.run_id for o in outcomes])
    await acreate_markdown_artifact(
        summary_markdown(outcomes, budget, page)
        + "\n"
        + night_markdown(wall_s, endpoints, outcomes)
        + "".join(f"\n\nWarning: {notice}" for notice in retiring)
        + leaderboard,
        key=NIGHTLY_ARTIFACT_KEY,
        description=f"JudgeBench nightly: {len(outcomes)} configurations",
    )


async def preflight_night(matrix_path: str, entries: list[MatrixEntry]) -> State | None:
    """The night's repositories, refs and data files checked once, before the first cell
    (judging/preflight.check_night). A problem ends the night at once: a Failed state whose message is
    the one line, that line in the log, and a `judgebench.night.failed` event naming it; else None."""
    from judgebench_flows.core.errors import UserError
    from judgebench_flows.judging.preflight import check_night

    try:
        await asyncio.to_thread(check_night, [entry.config for entry in entries])
    except UserError as exc:
        line = failure_line(exc)
        get_run_logger().error(line)
        emit_night_event(matrix_path, [NightRefused(message=line)], flow_run.run_count)
        return Failed(message=line, data=BenchmarkFailed(line))
    return None


def retirements(entries: list[MatrixEntry]) -> list[str]:
    """The night's preflight of its models: one line per model past its provider's shutdown date or within
    30 days of it (each model once, however many cells use it)."""
    notices: dict[str, str] = {}
    for entry in entries:
        config = entry.config
        if config.model not in notices:
            notice = config.retirement_notice()
            if notice:
                notices[config.model] = notice
    return list(notices.values())


def night_context(max_cost: float | None) -> RunContext:
    """One run context for the night: its cells share each endpoint's limit; with a night's --max-cost every
    cell's calls count toward the night's budget as they run; each model's retirement notice was said once
    for the night (`retirements`), so its cells do not say it again."""
    spend = NightSpend(max_cost) if max_cost is not None else None
    return RunContext(night=NightShare(spend=spend), setup=RunSetUp(retirement_said=True))


async def judge_cells(
    entries: list[MatrixEntry],
    budgets: list[float | None],
    cells_in_flight: int,
    retry_delay_seconds: float,
    night: RunContext,
    night_day: date | None = None,
) -> list[CellOutcome]:
    """Every cell side by side, up to `cells_in_flight` synchronous ones at once, the next place going to
    the endpoint with the most work left (flows/cell_schedule.py); outcomes in matrix order. `night_day`:
    the night's date, in each cell's run name."""
    logger = get_run_logger()
    planned = [
        PlannedCell(i, e.endpoint, e.config.endpoint.concurrency, planned_judgments(e.config))
        for i, e in enumerate(entries)
        if not e.config.endpoint.batch
    ]
    schedule = CellSchedule(planned, cells_in_flight)
    turns = {cell.index: schedule.ahead(cell) for cell in planned}

    batch_judging = [asyncio.Event() for e in entries if e.config.endpoint.batch]
    batch_started = iter(batch_judging)

    async def run_cell(index: int, budget: float | None) -> CellOutcome:
        """One cell once its turn to start comes, its calls once it has a place among the cells in flight
        (a batch cell needs neither, and the synchronous cells give the batch cells a head start:
        Prefect sets subflows up one at a time)."""
        planned_entry, queued = entries[index], time.monotonic()
        judging = next(batch_started) if planned_entry.config.endpoint.batch else None
        if judging is None and batch_judging:
            waits = [asyncio.create_task(event.wait()) for event in batch_judging]
            await asyncio.wait(waits, timeout=BATCH_HEAD_START_SECONDS)
            for waiting in waits:
                waiting.cancel()
        async with turns.get(index) or contextlib.nullcontext() as place:
            started = time.monotonic()
            entry = within_night_budget(planned_entry, budget)
            try:
                cell_run = night.for_cell(
                    judging.set if judging else None,
                    place.judged if place else None,
                    place.acquire if place else None,  # started ahead: its first call waits for its place
                )
                with running(cell_run):
                    outcome, _ = await judge_cell(entry, retry_delay_seconds, place, entry.run_name(night_day))
            finally:
                if judging:  # failed before judging: nobody waits for it any longer
                    judging.set()
        outcome.endpoint = planned_entry.endpoint  # its wait for its turn to start, and from its start to its end
        outcome.wait_s, outcome.duration_s = round(started - queued, 3), round(time.monotonic() - started, 3)
        log = logger.info if outcome.status == "completed" else logger.error
        log(
            "%s: %s, accuracy %s%s",
            entry.title,
            outcome.status,
            _pct(outcome.accuracy),
            f" ({outcome.message})" if outcome.message else "",
        )
        return outcome

    # Batch cells start first, so their batches are submitted at the start of the night; outcomes stay
    # in matrix order.
    order = sorted(range(len(entries)), key=lambda i: not entries[i].config.endpoint.batch)
    started_cells = {i: asyncio.create_task(run_cell(i, budgets[i])) for i in order}
    outcomes = list(await asyncio.gather(*(started_cells[i] for i in range(len(entries)))))
    return outcomes


async def judge_night_on_pool(
    entries: list[MatrixEntry], matrix: NightlyMatrix
) -> tuple[list[CellOutcome], dict[str, EndpointUse], NightTotals | None]:
    """The night's cells as runs of the ad-hoc deployment (flows/pool_cells.py): their outcomes in matrix
    order, and what each endpoint saw, from the cell runs' artifacts. The budget: in the results database,
    reserved and spent by the cells as they run (data/night_budget.py)."""
    logger = get_run_logger()
    budget = await open_night_budget(entries, matrix.max_cost)
    budgeted = [within_night_budget(e, matrix.max_cost) for e in entries]  # each reserves from the night's
    ended = await judge_cells_on_pool(
        budgeted,
        matrix.deadline(night_start()),
        night_budget=budget.night if budget else None,
        after_deadline_s=matrix.after_deadline_minutes * 60,
        pending_timeout_s=matrix.pending_timeout_minutes * 60,
    )
    outcomes = [pool_outcome(e, run, results) for e, (run, results) in zip(entries, ended, strict=True)]
    endpoints = await pool_endpoint_usage([run.id for run, _ in ended])
    totals = await asyncio.to_thread(budget.totals) if budget is not None else None
    if totals is not None:
        spent, held = format_usd(totals.spent), format_usd(totals.held)
        logger.info("night budget %s: %s spent by its cells, %s still held", format_usd(totals.max_cost), spent, held)
    for outcome in outcomes:
        log = logger.info if outcome.status == "completed" else logger.error
        log("%s: %s%s", outcome.name, outcome.status, f" ({outcome.message})" if outcome.message else "")
    return outcomes, endpoints, totals


@flow(name="nightly-benchmarks", log_prints=False, flow_run_name=nightly_run_name)
async def nightly_benchmarks(
    matrix_path: str = "deployments/nightly.yaml",
    base_url: str | None = None,
    max_samples: int | None = None,
    repo_url: str | None = None,
    ref: str | None = None,
    data_files: list[str] | None = None,
    retry_delay_seconds: float = 60,
) -> list[dict[str, JsonValue]]:
    """Run every configuration of the matrix; fail at the end if any failed or regressed.

    `base_url`, `max_samples`, `repo_url` (another JudgeBench copy: a URL or a local path), `ref` and
    `data_files` override the matrix file, e.g. to point a deployment at a local checkout offline.
    `retry_delay_seconds`: the wait before a configuration that failed for a passing reason runs again.
    """
    settle_heap()  # the imports' objects out of the collector's walks (core/heap.py)
    logger = get_run_logger()
    say_link()
    started = time.monotonic()
    matrix = load_matrix(matrix_path).overridden(repo_url=repo_url, ref=ref, data_files=data_files)
    entries = matrix.entries(base_url=base_url, max_samples=max_samples)
    logger.info(
        "%d configurations from %s on %d endpoints, up to %d at once",
        len(entries),
        matrix_path,
        len({e.endpoint for e in entries}),
        matrix.cells_in_flight,
    )
    refused = await preflight_night(matrix_path, entries)
    if refused is not None:
        return refused  # type: ignore[return-value]
    retiring = retirements(entries)
    for notice in retiring:
        logger.warning(notice)
    entries = with_deadline(entries, matrix.deadline(night_start()))
    endpoints: dict[str, EndpointUse] = {}
    budget: NightSpend | NightTotals | None
    if matrix.cells == "pool":  # each cell its own run of the ad-hoc deployment, on any worker of the pool
        outcomes, endpoints, budget = await judge_night_on_pool(entries, matrix)
    else:
        unable = await refused_cells(entries)  # each cell's preflight, at once: a cell that cannot run fails now
        for entry in entries:
            if entry.name in unable:
                logger.error("%s: failed (%s)", entry.title, unable[entry.name])
        runnable = [e for e in entries if e.name not in unable]
        night = night_context(matrix.max_cost)
        budgets = await night_budgets(runnable, matrix.max_cost)
        async with queued_writes() as writes:  # cells' runs created without Prefect's 2-32 s backoff on SQLite
            with running(night):
                judged = await judge_cells(
                    runnable, budgets, matrix.cells_in_flight, retry_delay_seconds, night, night_date()
                )
        outcomes = in_matrix_order(entries, unable, judged)
        if writes is not None and writes.tries_again:
            logger.info("%d Prefect writes tried again after a locked database", writes.tries_again)
        endpoints, budget = night.calls.state.endpoint_usage(), night.night.spend
    wall_s = round(time.monotonic() - started, 3)
    endpoints = with_busy_share(endpoints, wall_s)

    page = await write_night_page(matrix, entries, night_date(), wall_s, budget)
    await night_artifact(entries, outcomes, wall_s, endpoints, retiring, budget, page)
    attempt = flow_run.run_count
    emit_night_event(matrix_path, outcomes, attempt, wall_s=wall_s, endpoints=endpoints)
    if page is not None:
        logger.info("the night's page: %s", storage.browser_url(page) if storage.is_url(page) else page)
    bad = [o for o in outcomes if o.status != "completed"]
    if bad:
        return night_failed(bad, len(outcomes))  # type: ignore[return-value]
    return [o.model_dump() for o in outcomes]


def night_failed(bad: list[CellOutcome], total: int) -> State:
    """A night whose cells need a look ends Failed with a message naming each and why. Returned, not
    raised: the reason reads the same in `--watch`, the worker's log and the UI, without a traceback of
    this flow's frames (a raised exception is logged with one)."""
    line = f"{len(bad)} of {total} configurations need a look: " + "; ".join(
        f"{o.title or o.name} ({o.status}{': ' + shorten(o.message, 200) if o.message else ''})" for o in bad
    )
    return Failed(message=line, data=BenchmarkFailed(line))


__all__ = [
    "NIGHTLY_ARTIFACT_KEY",
    "BenchmarkFailed",
    "CellOutcome",
    "cell_flow",
    "judge_cell",
    "judgebench_adhoc",
    "nightly_benchmarks",
    "outcome_of",
    "retirements",
    "subflow_state",
    "summary_markdown",
    "with_busy_share",
]

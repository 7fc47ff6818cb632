"""Entry points for deployments: the nightly benchmark matrix, and one configuration on demand.

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

`judgebench_adhoc` takes plain parameters (`--param model=...` on the command line or in the UI), builds
a RunConfig and runs the same `judgebench` subflow.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
import types
from datetime import date, datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from prefect import Flow, flow, get_run_logger
from prefect.artifacts import acreate_markdown_artifact
from prefect.exceptions import PrefectHTTPStatusError
from prefect.runtime import flow_run
from prefect.states import Failed, State
from pydantic import JsonValue
from typing_extensions import TypedDict

from judgebench_flows.calls.limits import EndpointUse
from judgebench_flows.core.artifact_keys import NIGHTLY_KEY, configuration_slug
from judgebench_flows.core.config import DEFAULT_DATA_FILE, DEFAULT_DB_URL, RunConfig, build_config
from judgebench_flows.core.endpoint import DEFAULT_CONCURRENCY
from judgebench_flows.core.pricing import BudgetReached, NightSpend, format_usd, retirement_notice
from judgebench_flows.core.text import shorten
from judgebench_flows.data import storage
from judgebench_flows.data.dataset import DEFAULT_REF, DEFAULT_REPO_URL
from judgebench_flows.data.night_budget import NightBudget, NightTotals
from judgebench_flows.data.outputs import LATEST, RUN_ID_FIELD, for_run, results_of_flow_run
from judgebench_flows.flows.cell_schedule import CellSchedule, Places, PlannedCell, planned_judgments
from judgebench_flows.flows.events import NightRefused, emit_night_event
from judgebench_flows.flows.judgebench_flow import judgebench_flow, measured_too_little
from judgebench_flows.flows.outcomes import CellOutcome, RunStatus
from judgebench_flows.flows.pool_cells import (
    PoolCell,
    judge_cells_on_pool,
    pool_cell_entry,
    pool_endpoint_usage,
    report_endpoint_usage,
)
from judgebench_flows.flows.retries import BenchmarkFailed, failure_line, is_transient
from judgebench_flows.flows.run_pages import adhoc_run_name, night_date, nightly_run_name, say_link
from judgebench_flows.judging.matrix import MatrixEntry, NightlyMatrix, cell_name, load_matrix
from judgebench_flows.judging.run_context import RunContext, running
from judgebench_flows.scoring.formatting import percent as _pct

if TYPE_CHECKING:
    from prefect.client.schemas.objects import FlowRun

NIGHTLY_ARTIFACT_KEY = NIGHTLY_KEY  # the night's summary has a key of its own; each cell's artifacts have theirs
# How long synchronous cells wait for the batch cells to start judging (their batches to go out first).
BATCH_HEAD_START_SECONDS = 120.0


class CellCounts(TypedDict, total=False):
    """What a cell measured (`CellOutcome`'s fields of the same names); none when it published nothing."""

    run_id: str | None
    accuracy: float | None
    ci_low: float | None
    ci_high: float | None
    n_pairs: int | None
    judgments: int | None
    failed_judgments: int | None
    invalid_judgments: int | None
    detectable_drop: float | None
    alert_rate: float | None
    cost_usd: float | None
    unpriced: bool
    from_cache: str | None


class AdhocResult(TypedDict):
    """An ad-hoc run's result, as Prefect shows it: where the results are and the headline numbers."""

    run_id: str | None
    accuracy: float | None
    result_path: str
    outputs: dict[str, str] | None
    regression: str | None  # the regression check's message


def _counts(results: dict[str, Any]) -> CellCounts:
    """What a cell measured, for the summary: accuracy, and how many judgments failed or were invalid."""
    overall, invalid = results.get("overall_accuracy") or {}, results.get("invalid") or {}
    usage = results.get("usage") or {}
    return {
        "run_id": (results.get("run") or {}).get("run_id"),
        "accuracy": overall.get("accuracy"),
        "ci_low": overall.get("ci_low"),
        "ci_high": overall.get("ci_high"),
        "n_pairs": (results.get("dataset") or {}).get("n_pairs"),
        "judgments": (results.get("usage") or {}).get("judgments"),
        "failed_judgments": invalid.get("failed_judgments"),
        "invalid_judgments": invalid.get("invalid_judgments"),
        "detectable_drop": (results.get("regression") or {}).get("detectable_drop"),
        "alert_rate": (results.get("regression") or {}).get("false_alarm_rate"),
        "cost_usd": usage.get("cost_usd"),
        "unpriced": "cost_usd" in usage and usage["cost_usd"] is None,
        "from_cache": _cache_line(results),
    }


def _cache_line(results: dict[str, Any]) -> str | None:
    """Where the cell's answers came from, in one line (results.json's `run.cache`)."""
    from judgebench_flows.scoring.run_results import CacheUse

    cache = (results.get("run") or {}).get("cache")
    return CacheUse.model_validate(cache).line() if isinstance(cache, dict) else None


def _published_results(entry: MatrixEntry, flow_run_id: str | None) -> dict[str, Any] | None:
    """The results.json a failed cell published before failing (a run that measured too little still
    publishes what it has), if it is this subflow run's and not an earlier night's."""
    return results_of_flow_run(entry.config.result_path, flow_run_id)  # each run of a cell: its own folder


async def outcome_of(entry: MatrixEntry, state: State) -> CellOutcome:
    """Read a finished `judgebench` subflow's state: its results, or why it failed.

    A cell ends failed when its subflow failed, including a run that measured too little (the run's own
    rule: failed + invalid judgments above `max_failed_fraction`), and the same rule is applied here to
    a completed subflow's results, so a cell whose calls all failed can never count as a measurement.
    """
    flow_run_id = str(state.state_details.flow_run_id or "") or None
    if not state.is_completed():
        error = await state.aresult(raise_on_failure=False)
        reason = (
            failure_line(error)
            if isinstance(error, BaseException)
            else (state.message or state.name or state.type.value)
        )
        published = _published_results(entry, flow_run_id)
        counts = _counts(published) if published else CellCounts()
        if isinstance(error, BudgetReached):  # stopped at its budget: what it spent until then
            counts["cost_usd"] = error.spent
        transient = is_transient(error if isinstance(error, BaseException) else None, published)
        return CellOutcome(
            name=entry.name,
            title=entry.title,
            result_path=_run_folder(entry, published) if published else entry.config.result_path,
            flow_run_id=flow_run_id,
            status="failed",
            message=reason[:500],
            transient=transient,
            **counts,
        )
    return completed_outcome(entry, await state.aresult(), flow_run_id)


def _run_folder(entry: MatrixEntry, results: dict[str, Any]) -> str:
    """The results.json of the run that wrote `results`: its own folder of the cell's layout."""
    return for_run(entry.config.result_path, (results.get("run") or {}).get("run_id") or LATEST)


def completed_outcome(entry: MatrixEntry, results: dict[str, Any], flow_run_id: str | None) -> CellOutcome:
    """A completed cell's outcome from its results: completed, regressed, or failed if it measured too little."""
    regression = results.get("regression") or {}
    too_little = measured_too_little(results, entry.config.max_failed_fraction)
    status: RunStatus = "failed" if too_little else "regressed" if regression.get("regressed") else "completed"
    return CellOutcome(
        name=entry.name,
        title=entry.title,
        result_path=_run_folder(entry, results),
        flow_run_id=flow_run_id,
        status=status,
        message=too_little or regression.get("message"),
        drift=changed_endpoint(results),
        **_counts(results),
    )


def changed_endpoint(results: dict[str, Any]) -> str | None:
    """What the endpoint said differently from the baseline run (`drift`), when it did."""
    drift = results.get("drift") or {}
    return str(drift.get("message") or "") or None if drift.get("changed") else None


def pool_outcome(entry: MatrixEntry, run: FlowRun, results: dict[str, Any] | None) -> CellOutcome:
    """A cell run of the pool (flows/pool_cells.py) as it ended, with the results its judging subflow
    wrote, as the same outcome an in-process cell gives."""
    state = run.state
    if state is not None and state.is_completed() and results is not None:
        outcome = completed_outcome(entry, results, str(run.id))
    else:
        outcome = CellOutcome(
            name=entry.name,
            title=entry.title,
            result_path=entry.config.result_path,
            flow_run_id=str(run.id),
            status="failed",
            message=_pool_failure(state, entry.config.result_path),
            **(_counts(results) if results else CellCounts()),
        )
    outcome.endpoint = entry.endpoint
    if run.start_time is not None:
        outcome.wait_s = round(max(0.0, (run.start_time - run.created).total_seconds()), 3) if run.created else None
        outcome.duration_s = round(run.total_run_time.total_seconds(), 3)
    return outcome


def _pool_failure(state: State | None, result_path: str) -> str:
    """Why a cell run of the pool counts as failed, in one line."""
    if state is not None and state.is_completed():
        return f"completed, but its results are not readable here ({result_path})"
    ended = (state.message or state.name or state.type.value) if state is not None else "no state"
    return " ".join(ended.split())[:500]


def _of(count: int | None, total: int | None) -> str:
    """`3 / 20`, or `-` when the cell never got as far as counting."""
    if count is None:
        return "-"
    return f"{count} / {total}" if total is not None else str(count)


def _cell_cost(outcome: CellOutcome) -> str:
    if outcome.unpriced:
        return "unpriced"
    return format_usd(outcome.cost_usd) if outcome.cost_usd is not None else "-"


def _night_cost(outcomes: list[CellOutcome]) -> str:
    """The night's total in dollars; unpriced configurations are named as such, never added as $0."""
    total = sum(o.cost_usd or 0.0 for o in outcomes)
    unpriced = sum(o.unpriced for o in outcomes)
    return f"Tonight's cost: {format_usd(total)}" + (
        f" plus {unpriced} unpriced configuration{'s' if unpriced != 1 else ''}" if unpriced else ""
    )


def _night_budget(budget: NightSpend | NightTotals | None) -> list[str]:
    """The night's budget beside its cost: `max_cost`, what its calls spent and, on a pool night, what
    cell runs still hold (a cell that died holding its reservation shows here); nothing without a budget."""
    if budget is None:
        return []
    held = f"; still held {format_usd(budget.held)}" if isinstance(budget, NightTotals) else ""
    return [f"Night budget (max_cost): {format_usd(budget.max_cost)}; spent {format_usd(budget.spent)}{held}", ""]


def _within_night_budget(entry: MatrixEntry, left: float | None) -> MatrixEntry:
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


def night_markdown(wall_s: float, endpoints: dict[str, EndpointUse], outcomes: list[CellOutcome]) -> str:
    """The night's timing: its wall time, each endpoint's calls and busy time, each cell's wait."""
    lines = [
        "",
        f"Night: {wall_s:.1f} s wall time.",
        "",
        "| endpoint | concurrency | calls | busy | busy share | most in flight |",
        "|---|---|---|---|---|---|",
    ]
    for name, usage in sorted(endpoints.items()):
        share = f"{usage['busy_share']:.0%}" if "busy_share" in usage else "-"
        lines.append(
            f"| {name} | {usage['concurrency']} | {usage['calls']} | {usage['busy_s']:.1f} s | {share} | {usage['max_in_flight']} |"
        )
    lines += ["", "| configuration | run | pairs | endpoint | waited | took |", "|---|---|---|---|---|---|"]
    for o in outcomes:
        wait, took = (f"{v:.1f} s" if v is not None else "-" for v in (o.wait_s, o.duration_s))
        run = (o.run_id or "-")[:8]
        lines.append(f"| {o.title or o.name} | {run} | {o.n_pairs or '-'} | {o.endpoint} | {wait} | {took} |")
    return "\n".join(lines)


def _alert_power(outcomes: list[CellOutcome]) -> list[str]:
    """What the night's regression checks could see: each held its share of the night's false-alarm rate
    and detects drops of these sizes 80% of the time (docs/alerts.md); nothing before a cell has history."""
    checked = [o for o in outcomes if o.detectable_drop is not None]
    if not checked:
        return []
    drops = sorted(o.detectable_drop for o in checked if o.detectable_drop is not None)
    rate = max(o.alert_rate or 0 for o in checked)  # the night's, which each cell holds a share of
    span = f"{drops[0] * 100:.1f}" if drops[0] == drops[-1] else f"{drops[0] * 100:.1f} to {drops[-1] * 100:.1f}"
    return [
        f"Regression checks: {len(checked)} cells, a false-alarm rate of {rate:.2g} for the night together; "
        f"each detects an accuracy drop of {span} points 80% of the time.",
        "",
    ]


def summary_markdown(outcomes: list[CellOutcome], budget: NightSpend | NightTotals | None = None) -> str:
    bad = [o for o in outcomes if o.status != "completed"]
    lines = [
        "# JudgeBench nightly",
        "",
        f"{len(outcomes)} configurations: {len(outcomes) - len(bad)} completed, "
        f"{sum(o.status == 'regressed' for o in outcomes)} regressed, {sum(o.status == 'failed' for o in outcomes)} failed.",
        "",
        _night_cost(outcomes),
        "",
        *_night_budget(budget),
        *drift_lines(outcomes),
        *_alert_power(outcomes),
        # Fits a 1400 px page beside Prefect's side panels: short names, the interval with the accuracy,
        # failed and invalid judgments in one column; each failure's reason below the table, whole.
        "| configuration | status | accuracy (95% CI) | failed / invalid | cost |",
        "|---|---|---|---|---|",
    ]
    for o in outcomes:
        ci = f" ({_pct(o.ci_low)}–{_pct(o.ci_high)})" if o.ci_low is not None else ""
        status = o.status if o.status == "completed" else f"**{o.status.upper()}**"
        judged = "-" if o.failed_judgments is None else f"{o.failed_judgments} / {o.invalid_judgments or 0}"
        judged += f" of {o.judgments}" if o.judgments is not None and o.failed_judgments is not None else ""
        accuracy = "n/a" if _measured_nothing(o) else f"{_pct(o.accuracy)}{ci}"
        lines.append(f"| {o.title or o.name} | {status} | {accuracy} | {judged} | {_cell_cost(o)} |")
    noted = [o for o in outcomes if o.message]
    if noted:
        lines += ["", "Why:", ""]
        lines += [f"- **{o.title or o.name}** ({o.status}): {' '.join(o.message.split())}" for o in noted if o.message]
    cached = [o for o in outcomes if o.from_cache]
    if cached:
        lines += ["", "Where each configuration's answers came from:", ""]
        lines += [f"- {o.title or o.name}: {o.from_cache}" for o in cached]
    return "\n".join(lines)


def _measured_nothing(outcome: CellOutcome) -> bool:
    """Every judgment failed or invalid: JudgeBench's metric scores that 0.00%, which reads as a measurement;
    the table says n/a, as the run's own summary does."""
    if outcome.status == "completed" or not outcome.judgments:
        return False
    return (outcome.failed_judgments or 0) + (outcome.invalid_judgments or 0) >= outcome.judgments


def drift_lines(outcomes: list[CellOutcome]) -> list[str]:
    """The configurations whose endpoint said another model or fingerprint than at their baseline run,
    whatever their accuracy did (a drift with unchanged accuracy is news too)."""
    drifted = [o for o in outcomes if o.drift]
    if not drifted:
        return []
    lines = [f"**Endpoint changed** under {len(drifted)} configuration{'s' if len(drifted) > 1 else ''}:", ""]
    lines += [f"- {o.title or o.name} ({o.status}): {o.drift}" for o in drifted]
    return [*lines, ""]


async def night_artifact(
    entries: list[MatrixEntry],
    outcomes: list[CellOutcome],
    wall_s: float,
    endpoints: dict[str, EndpointUse],
    retiring: list[str],
    budget: NightSpend | NightTotals | None = None,
) -> None:
    """The night's page: each cell's outcome, the night's timing, retirements and the leaderboard."""
    from judgebench_flows.flows.leaderboard_flow import (
        nightly_leaderboard_section,  # the leaderboard with tonight's rows (never raises)
    )

    leaderboard = await nightly_leaderboard_section([e.config for e in entries], [o.run_id for o in outcomes])
    await acreate_markdown_artifact(
        summary_markdown(outcomes, budget)
        + "\n"
        + night_markdown(wall_s, endpoints, outcomes)
        + "".join(f"\n\nWarning: {notice}" for notice in retiring)
        + leaderboard,
        key=NIGHTLY_ARTIFACT_KEY,
        description=f"JudgeBench nightly: {len(outcomes)} configurations",
    )


def cell_flow(name: str, run_name: str) -> Any:
    """The `judgebench` flow for the cell `name`, its function under a name of its own; its runs are
    named `run_name` (judge, model, data file; a night's date).

    Prefect matches a rerun night's subflow calls (a crashed night rescheduled, a retried one) to the
    earlier attempt's by the function's name and the order of the calls; cells side by side call in no
    fixed order, so each cell gets its own name and its own count of calls: its finished subflow is
    reused, never another cell's."""
    fn = judgebench_flow.fn
    own = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    own.__kwdefaults__, own.__annotations__, own.__doc__ = fn.__kwdefaults__, fn.__annotations__, fn.__doc__
    own.__module__ = fn.__module__
    own.__qualname__ = f"judgebench_flow_{hashlib.sha256(name.encode()).hexdigest()[:16]}"
    return Flow(own, name=judgebench_flow.name, log_prints=False, persist_result=True, flow_run_name=lambda: run_name)


async def judge_cell(
    entry: MatrixEntry,
    retry_delay_seconds: float,
    place: Places | None = None,
    run_name: str | None = None,
) -> tuple[CellOutcome, State]:
    """A configuration's judging subflow, run once more after `retry_delay_seconds` if it failed for a
    reason that may pass; persist_result lets a rescheduled night reuse a finished subflow. `place`: the
    cell's place among the cells in flight, given up while it waits to try again (a subflow takes it
    before its first call). `run_name`: the
    subflow run's name (default: the cell's judge, model and data file)."""
    logger = get_run_logger()
    subflow = await asyncio.to_thread(cell_flow, entry.name, run_name or entry.title)  # its schema: off the loop
    state = await subflow_state(subflow, entry.config, retried_if_transient=True)
    outcome = await outcome_of(entry, state)
    if outcome.status == "failed" and outcome.transient:
        logger.warning("%s failed (%s); trying once more in %g s", entry.name, outcome.message, retry_delay_seconds)
        if place is not None:  # its next subflow takes it again before its first call
            await place.release()
        await asyncio.sleep(retry_delay_seconds)
        state = await subflow_state(subflow, entry.config)
        outcome = await outcome_of(entry, state)
    return outcome, state


async def subflow_state(subflow: Any, config: RunConfig, **parameters: Any) -> State:
    """The cell's subflow run's final state. A Prefect server too busy to create the run (still
    answering 5xx past its client's retries, or not at all) fails the cell for a reason that may pass,
    tried again as any other, not the night with every other cell in it."""
    try:
        return await subflow(config, return_state=True, **parameters)
    except (PrefectHTTPStatusError, httpx.TransportError) as exc:
        if not is_transient(exc):
            raise
        return Failed(message=failure_line(exc), data=exc)


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
        if config.needs_endpoint and config.model not in notices:
            notice = retirement_notice(config.priced_model_name, config.prices)
            if notice:
                notices[config.model] = notice
    return list(notices.values())


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
            entry = _within_night_budget(planned_entry, budget)
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
    budgeted = [_within_night_budget(e, matrix.max_cost) for e in entries]  # each reserves from the night's
    ended = await judge_cells_on_pool(
        budgeted,
        matrix.deadline(night_start()),
        night_budget=budget.night if budget else None,
        after_deadline_s=matrix.after_deadline_minutes * 60,
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
        # One run context for the night: its cells share each endpoint's limit, and with a night's
        # --max-cost every cell's calls count toward the night's budget as they run.
        night = RunContext(night_spend=NightSpend(matrix.max_cost) if matrix.max_cost is not None else None)
        budgets = await night_budgets(entries, matrix.max_cost)
        with running(night):
            outcomes = await judge_cells(
                entries, budgets, matrix.cells_in_flight, retry_delay_seconds, night, night_date()
            )
        endpoints, budget = night.calls.endpoint_usage(), night.night_spend
    wall_s = round(time.monotonic() - started, 3)
    endpoints = with_busy_share(endpoints, wall_s)

    await night_artifact(entries, outcomes, wall_s, endpoints, retiring, budget)
    attempt = flow_run.run_count
    emit_night_event(matrix_path, outcomes, attempt, wall_s=wall_s, endpoints=endpoints)
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


@flow(name="judgebench-adhoc", log_prints=False, flow_run_name=adhoc_run_name)
async def judgebench_adhoc(
    model: str,
    judge_type: str = "arena_hard",
    data_file: str = DEFAULT_DATA_FILE,
    repo_url: str = DEFAULT_REPO_URL,
    ref: str | None = DEFAULT_REF,
    data_path: str | None = None,
    base_url: str | None = None,
    max_samples: int | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    single_game: bool = False,
    db_url: str = DEFAULT_DB_URL,
    output_dir: str | None = None,
    api_key_env: str | None = None,
    api_key_secret: str | None = None,
    retry_delay_seconds: float = 60,
    cell: PoolCell | None = None,
) -> AdhocResult:
    """One configuration on demand, with plain parameters; fails if the run regressed or measured too little.

    Results go to `output_dir` (default results/adhoc/<judge>__<model>__<data file>/<run id>/, with
    `latest` beside it linking the newest): results.json,
    the judgments JSONL and report.html. The API key comes from the worker's environment: the variable
    `api_key_env` names (default OPENAI_API_KEY) or the Prefect Secret block `api_key_secret`, never
    from a parameter. This run's own page shows the results summary, where its files are and a link to
    the judging subflow, and its log has the headline numbers: no need to open the subflow. `cell` (set
    by a night whose matrix says `cells: pool`, flows/pool_cells.py) names a cell of a matrix file
    instead: the run judges the matrix's configuration and ignores the other parameters.
    """
    say_link()
    if cell is not None:
        entry = pool_cell_entry(cell)
        # the endpoint's limit, shared with the night's other cells on any worker
        held = (cell.limit, cell.rate_limit or f"{cell.limit}-rpm") if cell.limit else None
        # a pool night's budget: the cell reserves its worst case there before any call (data/night_budget.py)
        budget = NightBudget(entry.config.db_url, cell.night_budget, cell.name) if cell.night_budget else None
        cell_run = RunContext(held_limits=held, night_budget=budget)  # also what its endpoint saw, for the night
        try:
            with running(cell_run):
                outcome, state = await judge_cell(entry, retry_delay_seconds, run_name=flow_run.name or None)
        finally:
            if budget is not None and cell_run.night_spend is not None:  # what it spent counts; the rest back
                await asyncio.to_thread(budget.settle, cell_run.night_spend.spent)
        await report_endpoint_usage(cell_run.calls.endpoint_usage(), cell_run.calls.endpoint_periods())
        return await adhoc_ending(entry, outcome, state)
    folder = output_dir or f"results/adhoc/{cell_name(judge_type, model, data_path or data_file)}/{RUN_ID_FIELD}"
    config = build_config(
        judge_type=judge_type,
        model=model,
        data_file=data_file,
        repo_url=repo_url,
        ref=ref,
        data_path=data_path,
        base_url=base_url,
        max_samples=max_samples,
        concurrency=concurrency,
        single_game=single_game,
        db_url=db_url,
        result_path=f"{folder}/results.json",
        output_dir=folder,
        api_key_env=api_key_env,
        api_key_secret=api_key_secret,
    )
    entry = MatrixEntry(name=Path(folder.replace(RUN_ID_FIELD, "")).name, config=config)
    outcome, state = await judge_cell(entry, retry_delay_seconds)
    return await adhoc_ending(entry, outcome, state)


async def adhoc_ending(entry: MatrixEntry, outcome: CellOutcome, state: State) -> AdhocResult:
    """An ad-hoc run's log lines, its page and its ending: Failed with one line unless it completed."""
    logger, config = get_run_logger(), entry.config
    subflow_id = str(state.state_details.flow_run_id or "") or None
    results = await state.aresult() if state.is_completed() else _published_results(entry, subflow_id)
    log = logger.info if outcome.status == "completed" else logger.error
    log(
        "%s: %s, accuracy %s (95%% CI %s - %s), %s pairs, failed judgments %s, invalid judgments %s%s",
        entry.title,  # as the night's lines and the run's name read, not the results folder's long key
        outcome.status,
        _pct(outcome.accuracy),
        _pct(outcome.ci_low),
        _pct(outcome.ci_high),
        outcome.n_pairs if outcome.n_pairs is not None else "-",
        _of(outcome.failed_judgments, outcome.judgments),
        _of(outcome.invalid_judgments, outcome.judgments),
        f" ({outcome.message})" if outcome.message else "",
    )
    if results:
        logger.info("results: %s; report: %s", outcome.result_path, (results.get("outputs") or {}).get("report") or "-")
    await acreate_markdown_artifact(
        adhoc_markdown(outcome, results, subflow_id),
        key=f"judgebench-adhoc-{configuration_slug(config.judge_template or config.judge_type, config.model, config.endpoint_identity(), config.data_path or config.data_file)}",
        description=f"JudgeBench ad-hoc run: {entry.title}",
    )
    if outcome.status != "completed":  # Failed with the subflow's reason, as one line (`--watch`, the UI)
        line = " ".join((outcome.message or outcome.status).split())
        logger.error(line)
        return Failed(message=line, data=BenchmarkFailed(line))  # type: ignore[return-value]
    return AdhocResult(
        run_id=outcome.run_id,
        accuracy=outcome.accuracy,
        result_path=outcome.result_path,
        outputs=results.get("outputs") if results else None,
        regression=(results.get("regression") or {}).get("message") if results else None,
    )


def _flow_run_link(flow_run_id: str | None) -> str:
    """A link to a flow run in the Prefect UI, or its id when no UI address is configured."""
    if not flow_run_id:
        return "-"
    from prefect.settings import PREFECT_UI_URL

    ui = PREFECT_UI_URL.value()
    return f"[{flow_run_id}]({ui.rstrip('/')}/runs/flow-run/{flow_run_id})" if ui else f"`{flow_run_id}`"


def adhoc_markdown(outcome: CellOutcome, results: dict[str, Any] | None, subflow_id: str | None) -> str:
    """The ad-hoc run's own page: the results summary of the judging subflow, and where everything is."""
    from judgebench_flows.scoring.run_results import RunResults
    from judgebench_flows.tasks.publish import summary_markdown as run_summary

    head = [f"**Status: {outcome.status}**" + (f": {outcome.message}" if outcome.message else ""), ""]
    body = (
        [run_summary(RunResults.model_validate(results))]
        if results and results.get("run")
        else ["No results were published (the run stopped before judging finished)."]
    )
    outputs = (results or {}).get("outputs") or {}
    links = [
        "",
        "## Where things are",
        "",
        f"- judging subflow run: {_flow_run_link(subflow_id)}",
        f"- results: {storage.markdown_link(outcome.result_path)}",
    ]
    links += [f"- {name}: {storage.markdown_link(path)}" for name, path in outputs.items() if name != "results"]
    if outcome.run_id:
        links.append(f"- history: `judgebench history` (run `{outcome.run_id}`), `judgebench report {outcome.run_id}`")
    return "\n".join(head + body + links)


__all__ = ["nightly_benchmarks", "judgebench_adhoc", "summary_markdown", "CellOutcome", "BenchmarkFailed"]

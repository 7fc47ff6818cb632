"""How one configuration of a night ended, built from what it left: a finished judging subflow's state and
results (an in-process cell, flows/nightly.py, or an ad-hoc run, flows/adhoc_flow.py) or a cell run of the
pool and the results it wrote (flows/pool_cells.py). The outcome itself is plain data below the views
(scoring/cell_outcome.py), so the night's summary (views/night_summary.py) reads it without the flows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from prefect.states import State
from typing_extensions import TypedDict

from judgebench_flows.core.pricing import BudgetReached
from judgebench_flows.data.outputs import LATEST, for_run, results_of_flow_run
from judgebench_flows.flows.judgebench_flow import measured_too_little
from judgebench_flows.flows.retries import failure_line, is_transient
from judgebench_flows.judging.matrix import MatrixEntry
from judgebench_flows.scoring.cell_outcome import CellOutcome, RunStatus

if TYPE_CHECKING:
    from prefect.client.schemas.objects import FlowRun


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


def cell_published_results(entry: MatrixEntry, flow_run_id: str | None) -> dict[str, Any] | None:
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
        published = cell_published_results(entry, flow_run_id)
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


__all__ = [
    "CellCounts",
    "CellOutcome",
    "RunStatus",
    "cell_published_results",
    "changed_endpoint",
    "completed_outcome",
    "outcome_of",
    "pool_outcome",
]

"""How one configuration of a night ended, built from what it left: a finished judging subflow's state and
results (an in-process cell, flows/nightly.py, or an ad-hoc run, flows/adhoc_flow.py) or a cell run of the
pool and the results it wrote (flows/pool_cells.py). The outcome itself is plain data below the views
(scoring/cell_outcome.py), so the night's summary (views/night_summary.py) reads it without the flows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from prefect.states import State
from typing_extensions import TypedDict

from judgebench_flows.core.pricing import BudgetReached
from judgebench_flows.data.outputs import LATEST, for_run
from judgebench_flows.flows.judgebench_flow import measured_too_little
from judgebench_flows.flows.retries import failure_line, is_transient
from judgebench_flows.judging.matrix import MatrixEntry
from judgebench_flows.scoring.cell_outcome import CellOutcome, RunStatus
from judgebench_flows.scoring.run_results import RunResults, results_of_flow_run

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
    nights_to_detect: int | None
    flagged: str | None
    cost_usd: float | None
    unpriced: bool
    from_cache: str | None


def _sequential(results: RunResults) -> CellCounts:
    """The cell's sequential test: the nights a persistent 5-point drop takes to be caught, its flag."""
    check = results.regression.sequential if results.regression else None
    if check is None:
        return {"nights_to_detect": None, "flagged": None}
    return {"nights_to_detect": check.nights_to_detect, "flagged": check.message if check.flagged else None}


def _counts(results: RunResults) -> CellCounts:
    """What a cell measured, for the summary: accuracy, and how many judgments failed or were invalid."""
    overall, invalid, usage, regression = results.overall_accuracy, results.invalid, results.usage, results.regression
    return {
        "run_id": results.run.run_id,
        "accuracy": overall.accuracy,
        "ci_low": overall.ci_low,
        "ci_high": overall.ci_high,
        "n_pairs": results.dataset.n_pairs,
        "judgments": usage.judgments if usage else None,
        "failed_judgments": invalid.failed_judgments,
        "invalid_judgments": invalid.invalid_judgments,
        "detectable_drop": regression.detectable_drop if regression else None,
        "alert_rate": regression.false_alarm_rate if regression else None,
        **_sequential(results),
        "cost_usd": usage.dollars if usage else None,
        "unpriced": bool(usage and usage.priced and usage.extra("cost_usd") is None),
        "from_cache": results.run.cache.line() if results.run.cache else None,  # where its answers came from
    }


def cell_published_results(entry: MatrixEntry, flow_run_id: str | None) -> RunResults | None:
    """The results.json a failed cell published before failing (a run that measured too little still
    publishes what it has), if it is this subflow run's and not an earlier night's."""
    return results_of_flow_run(entry.config.result_path, flow_run_id)  # each run of a cell: its own folder


def subflow_results(returned: Any) -> RunResults:
    """A completed `judgebench` subflow's return value (results.json's content, as Prefect hands it back),
    checked once here: from then on the cell's results are the typed model."""
    return RunResults.model_validate(returned)


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
        counts = _counts(published) if published is not None else CellCounts()
        if isinstance(error, BudgetReached):  # stopped at its budget: what it spent until then
            counts["cost_usd"] = error.spent
        transient = is_transient(error if isinstance(error, BaseException) else None, published)
        return CellOutcome(
            name=entry.name,
            title=entry.title,
            result_path=_run_folder(entry, published) if published is not None else entry.config.result_path,
            flow_run_id=flow_run_id,
            status="failed",
            message=reason[:500],
            transient=transient,
            **counts,
        )
    return completed_outcome(entry, subflow_results(await state.aresult()), flow_run_id)


def _run_folder(entry: MatrixEntry, results: RunResults) -> str:
    """The results.json of the run that wrote `results`: its own folder of the cell's layout."""
    return for_run(entry.config.result_path, results.run.run_id or LATEST)


def completed_outcome(entry: MatrixEntry, results: RunResults, flow_run_id: str | None) -> CellOutcome:
    """A completed cell's outcome from its results: completed, regressed, or failed if it measured too little."""
    # judgebench_flow's rule, as the run itself applies it before publishing
    too_little = measured_too_little(results, entry.config.max_failed_fraction)
    status: RunStatus = "failed" if too_little else "regressed" if results.regressed else "completed"
    return CellOutcome(
        name=entry.name,
        title=entry.title,
        result_path=_run_folder(entry, results),
        flow_run_id=flow_run_id,
        status=status,
        message=too_little or (results.regression.message if results.regression else None),
        drift=changed_endpoint(results),
        **_counts(results),
    )


def changed_endpoint(results: RunResults) -> str | None:
    """What the endpoint said differently from the baseline run (`drift`), when it did."""
    drift = results.drift
    return (drift.message or None) if drift is not None and drift.changed else None


def pool_outcome(entry: MatrixEntry, run: FlowRun, results: RunResults | None) -> CellOutcome:
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
            **(_counts(results) if results is not None else CellCounts()),
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
    "subflow_results",
]

"""Entry points for deployments: the nightly benchmark matrix, and one configuration on demand.

`nightly_benchmarks` runs every cell of deployments/nightly.yaml as a `judgebench` subflow, one after
another (each cell already runs its calls concurrently, and sequential cells keep the endpoint's load at
one `concurrency`). A cell that fails or regresses does not stop the others; the flow fails at the end,
after writing a summary artifact, so the schedule's run is red whenever any cell needs a look.

Retries: the flow has `retries=1`. Subflows persist their result, so on the retry Prefect reuses every
cell that finished in the first attempt (no new run, no second regression check against a run that
itself regressed) and only failed cells run again, their answered calls and completed shards coming
back from the call cache and the shard cache.

`judgebench_adhoc` takes plain parameters (`--param model=...` on the command line or in the UI), builds
a RunConfig and runs the same `judgebench` subflow.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from prefect import flow, get_run_logger
from prefect.artifacts import acreate_markdown_artifact
from prefect.states import State
from pydantic import BaseModel

from flows.judgebench_flow import judgebench_flow
from judgebench_flows.config import DEFAULT_DATA_FILE, DEFAULT_DB_URL, build_config
from judgebench_flows.dataset import DEFAULT_REF, DEFAULT_REPO_URL
from judgebench_flows.matrix import MatrixEntry, cell_name, load_matrix

NIGHTLY_ARTIFACT_KEY = "judgebench-nightly"


class BenchmarkFailed(Exception):
    """Raised at the end of a flow run when a configuration failed or regressed."""


class CellOutcome(BaseModel):
    """How one configuration ended, for the summary artifact and the flow's return value."""

    name: str
    status: Literal["completed", "regressed", "failed"]
    run_id: str | None = None
    flow_run_id: str | None = None
    accuracy: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    n_pairs: int | None = None
    result_path: str
    message: str | None = None


async def outcome_of(entry: MatrixEntry, state: State) -> CellOutcome:
    """Read a finished `judgebench` subflow's state: its results, or why it failed."""
    base: dict[str, Any] = {"name": entry.name, "result_path": entry.config.result_path, "flow_run_id": str(state.state_details.flow_run_id or "") or None}
    if not state.is_completed():
        error = await state.aresult(raise_on_failure=False)
        reason = f"{type(error).__name__}: {error}" if isinstance(error, BaseException) else (state.message or state.name)
        return CellOutcome(status="failed", message=reason[:500], **base)
    results: dict[str, Any] = await state.aresult()
    regression = results.get("regression") or {}
    overall = results["overall_accuracy"]
    return CellOutcome(
        status="regressed" if regression.get("regressed") else "completed",
        run_id=results["run"]["run_id"],
        accuracy=overall["accuracy"],
        ci_low=overall.get("ci_low"),
        ci_high=overall.get("ci_high"),
        n_pairs=results["dataset"].get("n_pairs"),
        message=regression.get("message"),
        **base,
    )


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}%"


def summary_markdown(outcomes: list[CellOutcome]) -> str:
    bad = [o for o in outcomes if o.status != "completed"]
    lines = [
        "# JudgeBench nightly",
        "",
        f"{len(outcomes)} configurations: {len(outcomes) - len(bad)} completed, "
        f"{sum(o.status == 'regressed' for o in outcomes)} regressed, {sum(o.status == 'failed' for o in outcomes)} failed.",
        "",
        "| configuration | status | accuracy | 95% CI | pairs | run | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        ci = f"{_pct(o.ci_low)} - {_pct(o.ci_high)}" if o.ci_low is not None else ""
        status = o.status if o.status == "completed" else f"**{o.status.upper()}**"
        note = (o.message or "").replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {o.name} | {status} | {_pct(o.accuracy)} | {ci} | {o.n_pairs or ''} | {(o.run_id or '')[:8]} | {note} |")
    return "\n".join(lines)


@flow(name="nightly-benchmarks", retries=1, retry_delay_seconds=60, log_prints=False)
async def nightly_benchmarks(
    matrix_path: str = "deployments/nightly.yaml",
    base_url: str | None = None,
    max_samples: int | None = None,
) -> list[dict[str, Any]]:
    """Run every configuration of the matrix; fail at the end if any failed or regressed.

    `base_url` and `max_samples` override the matrix file, e.g. for a quick smoke run of a deployment.
    """
    logger = get_run_logger()
    entries = load_matrix(matrix_path).entries(base_url=base_url, max_samples=max_samples)
    logger.info("%d configurations from %s", len(entries), matrix_path)
    outcomes: list[CellOutcome] = []
    for entry in entries:
        # persist_result lets a retry of this flow reuse the finished subflow instead of running it again
        subflow = judgebench_flow.with_options(flow_run_name=entry.name, persist_result=True)
        state = await subflow(entry.config, return_state=True)
        outcome = await outcome_of(entry, state)
        log = logger.info if outcome.status == "completed" else logger.error
        log("%s: %s, accuracy %s%s", entry.name, outcome.status, _pct(outcome.accuracy), f" ({outcome.message})" if outcome.message else "")
        outcomes.append(outcome)

    await acreate_markdown_artifact(
        summary_markdown(outcomes), key=NIGHTLY_ARTIFACT_KEY, description=f"JudgeBench nightly: {len(outcomes)} configurations"
    )
    bad = [o for o in outcomes if o.status != "completed"]
    if bad:
        raise BenchmarkFailed(f"{len(bad)} of {len(outcomes)} configurations need a look: " + ", ".join(f"{o.name} ({o.status})" for o in bad))
    return [o.model_dump() for o in outcomes]


@flow(name="judgebench-adhoc", log_prints=False)
async def judgebench_adhoc(
    model: str,
    judge_type: str = "arena_hard",
    data_file: str = DEFAULT_DATA_FILE,
    repo_url: str = DEFAULT_REPO_URL,
    ref: str | None = DEFAULT_REF,
    data_path: str | None = None,
    base_url: str | None = None,
    max_samples: int | None = None,
    concurrency: int = 16,
    single_game: bool = False,
    db_url: str = DEFAULT_DB_URL,
    output_dir: str | None = None,
) -> dict[str, Any]:
    """One configuration on demand, with plain parameters; fails if the run regressed.

    Results go to `output_dir` (default results/adhoc/<judge>__<model>__<data file>/): results.json,
    the judgments JSONL and report.html. The API key comes from the worker's environment.
    """
    folder = output_dir or f"results/adhoc/{cell_name(judge_type, model, data_path or data_file)}"
    config = build_config(
        judge_type=judge_type, model=model, data_file=data_file, repo_url=repo_url, ref=ref, data_path=data_path,
        base_url=base_url, max_samples=max_samples, concurrency=concurrency, single_game=single_game, db_url=db_url,
        result_path=f"{folder}/results.json", output_dir=folder,
    )
    results: dict[str, Any] = await judgebench_flow.with_options(flow_run_name=Path(folder).name)(config)
    regression = results.get("regression") or {}
    if regression.get("regressed"):
        raise BenchmarkFailed(regression["message"])
    return {
        "run_id": results["run"]["run_id"],
        "accuracy": results["overall_accuracy"]["accuracy"],
        "result_path": config.result_path,
        "outputs": results.get("outputs"),
        "regression": regression.get("message"),
    }


__all__ = ["nightly_benchmarks", "judgebench_adhoc", "summary_markdown", "CellOutcome", "BenchmarkFailed"]

"""The `adhoc` deployment's flow: one configuration on demand, with plain parameters.

`judgebench_adhoc` takes plain parameters (`--param model=...` on the command line or in the UI), builds
a RunConfig and runs the same `judgebench` subflow a night's cell runs (flows/cell_runs.py), once more
after a failure that may pass. Its own page shows the results summary and where its files are
(views/adhoc_page.py). A pool night (flows/pool_cells.py) runs each of its cells as a run of this
deployment, naming the cell in `cell`: `judge_pool_cell` then judges it as the night resolved it.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger
from prefect.artifacts import acreate_markdown_artifact
from prefect.states import Failed, State
from typing_extensions import TypedDict

from judgebench_flows.core.artifact_keys import configuration_slug
from judgebench_flows.core.config import DEFAULT_DATA_FILE, DEFAULT_DB_URL, build_config
from judgebench_flows.core.endpoint import DEFAULT_CONCURRENCY
from judgebench_flows.data.dataset import DEFAULT_REF, DEFAULT_REPO_URL
from judgebench_flows.data.outputs import RUN_ID_FIELD
from judgebench_flows.flows.cell_preflight import refusal
from judgebench_flows.flows.cell_runs import judge_cell
from judgebench_flows.flows.outcomes import CellOutcome, cell_published_results, subflow_results
from judgebench_flows.flows.pool_cells import PoolCell, judge_pool_cell
from judgebench_flows.flows.retries import BenchmarkFailed
from judgebench_flows.flows.run_pages import adhoc_run_name, say_link
from judgebench_flows.judging.matrix import MatrixEntry, cell_name
from judgebench_flows.scoring.formatting import percent as _pct
from judgebench_flows.views.adhoc_page import adhoc_markdown


class AdhocResult(TypedDict):
    """An ad-hoc run's result, as Prefect shows it: where the results are and the headline numbers."""

    run_id: str | None
    accuracy: float | None
    result_path: str
    outputs: dict[str, str] | None
    regression: str | None  # the regression check's message


def _of(count: int | None, total: int | None) -> str:
    """`3 / 20`, or `-` when the cell never got as far as counting."""
    if count is None:
        return "-"
    return f"{count} / {total}" if total is not None else str(count)


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
    if cell is not None:  # a pool night's cell (flows/pool_cells.py)
        entry, outcome, state = await judge_pool_cell(cell, retry_delay_seconds)
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
    outcome, state = (await refusal(entry)) or await judge_cell(entry, retry_delay_seconds)
    return await adhoc_ending(entry, outcome, state)


async def adhoc_ending(entry: MatrixEntry, outcome: CellOutcome, state: State) -> AdhocResult:
    """An ad-hoc run's log lines, its page and its ending: Failed with one line unless it completed."""
    from judgebench_flows.tasks.publish import summary_markdown as run_summary

    logger, config = get_run_logger(), entry.config
    subflow_id = str(state.state_details.flow_run_id or "") or None
    results = (
        subflow_results(await state.aresult()) if state.is_completed() else cell_published_results(entry, subflow_id)
    )
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
    outputs = (results.outputs if results is not None else None) or {}
    if results is not None:
        logger.info("results: %s; report: %s", outcome.result_path, outputs.get("report") or "-")
    summary = run_summary(results) if results is not None and results.given("run") else None
    page = adhoc_markdown(outcome, summary, outputs, _flow_run_link(subflow_id))
    await acreate_markdown_artifact(
        page,
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
        outputs=results.outputs if results is not None else None,
        regression=results.regression.message if results is not None and results.regression else None,
    )


def _flow_run_link(flow_run_id: str | None) -> str:
    """A link to a flow run in the Prefect UI, or its id when no UI address is configured."""
    if not flow_run_id:
        return "-"
    from prefect.settings import PREFECT_UI_URL

    ui = PREFECT_UI_URL.value()
    return f"[{flow_run_id}]({ui.rstrip('/')}/runs/flow-run/{flow_run_id})" if ui else f"`{flow_run_id}`"


__all__ = ["AdhocResult", "adhoc_ending", "judgebench_adhoc"]

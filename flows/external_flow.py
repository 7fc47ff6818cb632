"""Judge a data file with an external (plain Python) judge: sharded, concurrent, retried, summarized.

`run_external` is the CLI's entry: it runs every check a user can fail (judge file, function,
signature, judge parameters, data file, columns) before the flow starts, so bad input costs no Prefect
start-up. The flow checks again itself, because a deployment can start it without run_external.

At most `max_workers` shards are in flight at once. The flow enforces that with its own submission
window rather than relying on the task runner's size, so the limit holds however the flow is started
(a deployment's task runner may be larger); `run_external` also sizes the thread pool to match.
"""

from __future__ import annotations

from typing import Any, cast

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.futures import PrefectFuture, as_completed
from prefect.runtime import flow_run
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner
from pydantic import JsonValue

from judgebench_flows.core.heap import settle_heap
from judgebench_flows.judges.external.config import ExternalJudgeConfig
from judgebench_flows.judges.external.run import finish, preflight, shards
from judgebench_flows.judges.external.scoring import RowResult
from judgebench_flows.judges.external.summary import to_markdown
from judgebench_flows.tasks.external import score_shard

ARTIFACT_KEY = "external-judge-summary"


def _thread_pool(max_workers: int) -> TaskRunner[PrefectFuture[Any]]:
    """Prefect's thread pool as the task runner type `flow` takes: `TaskRunner` is invariant in its future
    type, so Prefect's own runner needs this cast (Prefect casts its default the same way)."""
    return cast("TaskRunner[PrefectFuture[Any]]", ThreadPoolTaskRunner(max_workers=max_workers))


@flow(name="external-judge", task_runner=_thread_pool(8))
def external_judge_flow(config: ExternalJudgeConfig) -> dict[str, JsonValue]:
    """Score every row of config.data_path; write outputs and a summary; return the summary as a dict."""
    settle_heap()  # the imports' objects out of the collector's walks (core/heap.py)
    logger = get_run_logger()
    prepared = preflight(config)
    pieces = shards(prepared.frame, config.shard_size)
    logger.info(
        "Judging %d rows in %d shards of up to %d with %s:%s (%s form), %d at a time",
        len(prepared.frame),
        len(pieces),
        config.shard_size,
        config.external_judge_path,
        config.external_judge_function,
        prepared.form,
        config.max_workers,
    )
    futures: list[PrefectFuture[list[RowResult]]] = []
    in_flight: set[PrefectFuture[list[RowResult]]] = set()
    for index, piece in enumerate(pieces):
        if len(in_flight) >= config.max_workers:
            in_flight.discard(next(as_completed(list(in_flight))))
        future = score_shard.submit(
            piece, config.external_judge_path, config.external_judge_function, prepared.judge_config, shard_index=index
        )
        futures.append(future)
        in_flight.add(future)
    results: list[RowResult] = [row for future in futures for row in future.result()]

    summary = finish(config, prepared, results, flow_run_id=str(flow_run.id) if flow_run.id else None)
    create_markdown_artifact(
        markdown=to_markdown(summary),
        key=ARTIFACT_KEY,
        description=f"External judge {config.external_judge_function} on {config.data_path}",
    )
    logger.info(
        "Scored %d, NA %d, errors %d of %d; mean score %s; summary in %s",
        summary.scored,
        summary.na,
        summary.errors,
        summary.total,
        summary.mean_score,
        summary.result_path,
    )
    return summary.model_dump(mode="json")


def run_external(config: ExternalJudgeConfig) -> dict[str, JsonValue]:
    """Validate, then run the flow with a thread pool of max_workers; returns the summary dict.

    Raises UserError (before any Prefect start-up) for anything wrong with the input or config.
    """
    preflight(config)
    return external_judge_flow.with_options(task_runner=_thread_pool(config.max_workers))(config)

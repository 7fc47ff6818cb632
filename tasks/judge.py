"""Prefect task: judge one shard of pairs.

Shard results are cached by Prefect under an explicit key: the shard's content hash plus the judge's
identity (prompt templates, sampling, parser, model, endpoint, orders). A shard is only cached when every
judgment in it reached a verdict: if any call failed or any answer was unparseable the task raises
`ShardIncomplete`, carrying its records, so nothing incomplete is ever served from the cache. Failed calls
make the shard retry (answered calls come back free from the call cache); unparseable answers and calls
the endpoint rejected for what they are (a context too long) do not.

Either way the records are `ShardRecords`: they also carry the request adjustments (`request_rules`) the
judging process knew when done, so what a Dask worker learned from a 400 reaches the flow's results; and
`known` hands a worker what the flow already knows, so its first requests are shaped right.
"""

from __future__ import annotations

from datetime import timedelta

from prefect import get_run_logger, task

from judgebench_flows.calls.heard import hearing
from judgebench_flows.calls.request_rules import Adjustment
from judgebench_flows.calls.retry import deterministic_reason
from judgebench_flows.core.errors import UserError
from judgebench_flows.core.records import JudgmentRecord
from judgebench_flows.judging.run_context import run_here
from judgebench_flows.judging.shards import (
    JudgeSpec,
    Shard,
    ShardRecords,
    adjustments_of,
    judge_pairs,
    merge_adjustments,
    runtime_for,
    shard_cache_key_of,
)


class ShardIncomplete(Exception):
    """Some judgments of a shard failed or were unparseable; `records` holds all of them anyway."""

    def __init__(self, shard_index: int, records: list[JudgmentRecord]):
        self.shard_index = shard_index
        self.records = records
        self.failed = sum(1 for r in records if r.status == "failed")
        self.invalid = sum(1 for r in records if r.status == "invalid")
        super().__init__(f"shard {shard_index}: {self.failed} failed calls, {self.invalid} unparseable verdicts")

    def __reduce__(self):  # keep records when Prefect or Dask pickles the exception
        return (ShardIncomplete, (self.shard_index, self.records))


def shard_cache_key(context, parameters) -> str:
    return shard_cache_key_of(parameters["spec"], parameters["shard"])


async def retry_failed_calls(task, task_run, state) -> bool:
    """Retry only shards with failed calls: bad input and fatal endpoint errors fail fast.

    Async on purpose: the task engine of an async task calls this inside its event loop, where the sync
    `state.result()` only returns an un-awaited coroutine, so no exception was ever seen and shards with
    failed calls were never retried.
    """
    exc = await state.aresult(raise_on_failure=False)
    if isinstance(exc, ShardIncomplete):  # calls the endpoint rejected for what they are would not be sent again
        return any(r.status == "failed" and not deterministic_reason(r.error) for r in exc.records)
    if isinstance(exc, UserError):
        return False
    return isinstance(exc, BaseException)


@task(
    name="judge-shard",
    cache_key_fn=shard_cache_key,
    cache_expiration=timedelta(days=90),
    persist_result=True,
    # Read back from result storage by the flow, not kept in Prefect's in-memory cache of up to 1,000
    # results: with it, memory grew with every shard of a large run.
    cache_result_in_memory=False,
    retries=2,
    retry_delay_seconds=[1, 5],
    retry_condition_fn=retry_failed_calls,
    task_run_name="judge-shard-{shard.index}",
)
async def judge_shard(shard: Shard, spec: JudgeSpec, known: list[Adjustment] | None = None) -> list[JudgmentRecord]:
    """`known`: request adjustments learned elsewhere in the run (not part of the cache key: they change
    the requests only as this process would have changed them itself after one 400). The run's state is
    the one in force (the flow's), or on a Dask worker the run's there (`run_context.run_here`)."""
    run = run_here(spec.run_id)
    if known:
        merge_adjustments(spec, run.calls, known)
    runtime = runtime_for(spec, run)
    # Without prompts: they are re-rendered when the JSONL is written, and Prefect keeps every task's
    # return value for the rest of the flow run (and in result storage), so they would cost the most.
    with hearing() as heard:  # what the endpoint says to this shard's calls, who paid its cached answers
        judged = await judge_pairs(
            shard.load(), runtime, spec.orders, shard.index, run.progress.tick_hooks, spec.epochs
        )
    records = ShardRecords(
        (r.model_copy(update={"prompt": ""}) for r in judged),
        adjustments_of(spec, run.calls),
        run_id=spec.run_id,
        served=heard.served,
        model_entry=runtime.caller.stats.model_entry,
        cache_sources=heard.cache_sources,
    )
    incomplete = ShardIncomplete(shard.index, records)
    get_run_logger().info(
        "shard %d: %d judgments (%d from cache), %d failed, %d unparseable",
        shard.index,
        len(records),
        sum(r.cached_calls for r in records),
        incomplete.failed,
        incomplete.invalid,
    )
    if incomplete.failed or incomplete.invalid:
        raise incomplete
    return records


def no_shard_cache_key(context, parameters) -> None:
    """No key: Prefect neither looks up nor stores the shard's result in its cache."""
    return None


def shard_task(cache: str, retries: int, max_age: str | None = None):
    """The task with the run's cache mode and retry count applied.

    --no-cache swaps the cache key function for one that gives no key: Prefect lets a task's
    `cache_key_fn` win over `cache_policy=NO_CACHE`, so that option alone still served cached shards.
    With --cache-max-age a stored shard is judged again (its expiry was fixed when it was stored): its
    answers still come from the call cache, which keeps only those younger than the maximum age.
    """
    if cache == "off":
        return judge_shard.with_options(cache_key_fn=no_shard_cache_key, retries=retries)
    return judge_shard.with_options(refresh_cache=(cache == "refresh" or max_age is not None), retries=retries)

"""Judge a run's shards as Prefect task runs, and hand each shard's records on as soon as it finishes.

In process (the default) every shard runs in the flow's own event loop, so all of them share one endpoint
client and one connection limit; with `--task-runner dask` they go to a Dask cluster (`dask_shards`).
A few shards are in flight at a time, never one task per shard at once: memory holds the shards being
judged, not the run.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

from prefect.states import State
from prefect.utilities.annotations import quote

from judgebench_flows.calls.llm import CallStats
from judgebench_flows.core.config import RunConfig
from judgebench_flows.core.records import JudgmentRecord
from judgebench_flows.judging.shards import JudgeSpec, Shard, close_runtimes
from judgebench_flows.tasks.judge import ShardIncomplete, shard_task

# --batch: shards judged at once (all of a run's, in practice), so each round of calls is one batch.
BATCH_SHARDS_IN_FLIGHT = 100_000

ShardDone = Callable[[Shard, list[JudgmentRecord]], None]


async def judge_shards(
    shards: list[Shard], spec: JudgeSpec, config: RunConfig, on_shard_done: ShardDone
) -> CallStats | None:
    """Judge every shard where the run says; returns what this process's endpoint clients sent, or None
    on Dask (the workers' clients send the calls: usage is then counted from the records)."""
    if config.task_runner == "dask":
        from judgebench_flows.flows.dask_shards import judge_on_dask

        await asyncio.to_thread(judge_on_dask, shards, spec, config, on_shard_done)
        return None
    return await judge_in_process(shards, spec, config, on_shard_done)


async def shard_records(state: State) -> list[JudgmentRecord]:
    """A shard's records from its final state: a cache hit is marked as such, an incomplete shard still
    gives every record it has, and anything else (bad input, fatal endpoint error) propagates."""
    if state.is_completed():
        records: list[JudgmentRecord] = await state.aresult()
        if state.name == "Cached":
            records = [r.model_copy(update={"cached_calls": r.calls}) for r in records]
        return records
    exc = await state.aresult(raise_on_failure=False)
    if isinstance(exc, ShardIncomplete):
        return exc.records
    if isinstance(exc, BaseException):
        raise exc
    raise RuntimeError(f"shard ended in state {state.name}: {state.message}")


def shards_in_flight(config: RunConfig) -> int:
    """Enough shards at once to keep every connection busy (twice the calls the limit allows), and no
    more: memory then holds a few shards, not the whole dataset."""
    if config.endpoint.batch:  # --batch: every shard at once, so a round of calls is one batch
        return BATCH_SHARDS_IN_FLIGHT
    calls_per_shard = config.shard_size * (1 if config.single_game else 2)
    return max(2, math.ceil(2 * config.endpoint.concurrency / calls_per_shard))


async def judge_in_process(
    shards: list[Shard],
    spec: JudgeSpec,
    config: RunConfig,
    on_shard_done: ShardDone,
) -> CallStats:
    """Judge every shard in this event loop; returns what the endpoint clients sent (`usage_of_calls`)."""
    task = shard_task(config.endpoint.cache, config.shard_retries)
    pending = iter(shards)

    async def worker() -> None:
        """Takes the next shard when its last one is done: a few shards in flight, not a task per shard."""
        for shard in pending:
            # quote(): Prefect would otherwise walk every field of both on each of several engine steps.
            state = await task(quote(shard), quote(spec), return_state=True)
            records = await shard_records(state)
            await asyncio.to_thread(on_shard_done, shard, records)

    workers = [asyncio.create_task(worker()) for _ in range(min(len(shards), shards_in_flight(config)))]
    try:
        await asyncio.gather(*workers)
    except BaseException:  # a fatal error (bad key, bad input) ends the run: no further shard starts
        for running in workers:
            running.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        raise
    finally:
        sent = await close_runtimes()
    return sent

"""Judge a run's shards as Prefect task runs, and hand each shard's records on as soon as it finishes.

In process (the default) every shard runs in the flow's own event loop, so all of them share one endpoint
client and one connection limit; with `--task-runner dask` they go to a Dask cluster (`dask_shards`).
A few shards are in flight at a time, never one task per shard at once: memory holds the shards being
judged, not the run.
"""

from __future__ import annotations

import asyncio
import threading

from prefect.utilities.annotations import quote

from judgebench_flows.calls.caller import CallStats
from judgebench_flows.calls.global_limits import endpoint_slots
from judgebench_flows.core.config import RunConfig
from judgebench_flows.core.pricing import BudgetReached
from judgebench_flows.flows.shard_states import ShardDone, shard_records, shards_in_flight
from judgebench_flows.judging.run_context import RunContext
from judgebench_flows.judging.shards import JudgeSpec, Shard, close_runtimes, expect_first_round
from judgebench_flows.tasks.judge import shard_task


async def judge_shards(
    shards: list[Shard], spec: JudgeSpec, config: RunConfig, on_shard_done: ShardDone, run: RunContext
) -> CallStats | None:
    """Judge every shard where the run says; returns what this process's endpoint clients sent, or None
    on Dask (the workers' clients send the calls: usage is then counted from the records). `run`: the
    run's context, in force here (`run_context.running`), where the shard tasks find it."""
    if config.task_runner == "dask":
        from judgebench_flows.flows.dask_shards import judge_on_dask

        stop = threading.Event()  # the run is cancelled (Ctrl-C, SIGTERM): the thread stops sending shards
        try:
            await asyncio.to_thread(judge_on_dask, shards, spec, config, on_shard_done, run, stop)
        finally:
            stop.set()
        return None
    if spec.global_limit:  # --global-limit in process: the run holds its --concurrency of the endpoint's slots
        async with endpoint_slots(spec.global_limit, spec.endpoint.concurrency):
            return await judge_in_process(shards, spec, config, on_shard_done, run)
    return await judge_in_process(shards, spec, config, on_shard_done, run)


async def judge_in_process(
    shards: list[Shard],
    spec: JudgeSpec,
    config: RunConfig,
    on_shard_done: ShardDone,
    run: RunContext,
) -> CallStats:
    """Judge every shard in this event loop; returns what the endpoint clients sent (`usage_of_calls`)."""
    task = shard_task(config.endpoint.cache, config.shard_retries, config.endpoint.cache_max_age)
    pending = iter(shards)
    budget_spent = False

    async def worker() -> None:
        """Takes the next shard when its last one is done: a few shards in flight, not a task per shard."""
        for shard in pending:
            if budget_spent:
                return
            # quote(): Prefect would otherwise walk every field of both on each of several engine steps.
            state = await task(quote(shard), quote(spec), return_state=True)
            records = await shard_records(state)
            await asyncio.to_thread(on_shard_done, shard, records)

    expect_first_round(spec, run, len(shards))  # --batch: the first round goes once its lines are in
    workers = [asyncio.create_task(worker()) for _ in range(min(len(shards), shards_in_flight(config)))]
    try:
        await asyncio.gather(*workers)
    except BudgetReached:
        # --max-cost is spent: no shard starts and no call is sent any more, but the shards in flight let
        # their answered calls land in the call cache, so the run resumes without paying for them again.
        budget_spent = True
        await asyncio.gather(*workers, return_exceptions=True)
        raise
    except BaseException:  # a fatal error (bad key, bad input) ends the run: no further shard starts
        for running in workers:
            running.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        raise
    finally:
        sent = await close_runtimes(run.calls, spec)
    return sent

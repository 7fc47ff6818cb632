"""Whether Prefect's cache would serve a shard to `tasks.judge.judge_shard`, asked without importing the task.

A run's head start (judging/head_start.py) asks before it pays for its first shards' calls: a shard
Prefect's cache serves whole costs the flow nothing (its answers may live in another results database,
whose call cache the head start cannot read). Only Prefect's result store is imported here, not its task
machinery, so the question costs little on the way to the first call.
"""

from __future__ import annotations

from judgebench_flows.judging.shards import JudgeSpec, Shard, shard_cache_key_of


async def shard_results_held(spec: JudgeSpec, shards: list[Shard], cache: str, max_age: str | None) -> bool:
    """Whether Prefect's cache would serve any of these shards to `tasks.judge.shard_task` with this cache
    mode and maximum age: its cache key (`shard_cache_key_of`) in the result store `judge_shard` reads,
    unexpired. Asked with the run's Prefect server in force (a storage block is read through it)."""
    if cache != "use" or max_age is not None:  # off, or refreshed: the task does not read its cache
        return False
    from prefect.results import get_result_store

    store = get_result_store()
    for shard in shards:
        if await store.aexists(shard_cache_key_of(spec, shard)):
            return True
    return False


__all__ = ["shard_results_held"]

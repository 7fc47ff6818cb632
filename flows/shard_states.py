"""What the flow knows of a shard task, on either runner (in process: `shard_runs`; Dask: `dask_shards`):
its records from its final state, how many shards are in flight, and the callback a finished shard calls."""

from __future__ import annotations

from collections.abc import Callable

from prefect.states import State

from judgebench_flows.core.records import JudgmentRecord
from judgebench_flows.judging.shards import Shard, ShardRecords, shards_in_flight
from judgebench_flows.tasks.judge import ShardIncomplete

ShardDone = Callable[[Shard, list[JudgmentRecord]], None]


async def shard_records(state: State) -> list[JudgmentRecord]:
    """A shard's records from its final state: a cache hit is marked as such, an incomplete shard still
    gives every record it has, and anything else (bad input, fatal endpoint error) propagates."""
    if state.is_completed():
        records: list[JudgmentRecord] = await state.aresult()
        if state.name == "Cached":
            cached = ShardRecords(
                [r.model_copy(update={"cached_calls": r.calls}) for r in records],
                getattr(records, "adjustments", ()),
                run_id=getattr(records, "run_id", None),
            )
            cached.from_shard_cache = True
            return cached
        return records
    exc = await state.aresult(raise_on_failure=False)
    if isinstance(exc, ShardIncomplete):
        return exc.records
    if isinstance(exc, BaseException):
        raise exc
    raise RuntimeError(f"shard ended in state {state.name}: {state.message}")


__all__ = ["ShardDone", "shard_records", "shards_in_flight"]

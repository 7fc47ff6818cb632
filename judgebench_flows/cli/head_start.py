"""Judge a run's first pairs while Prefect starts.

A run without a Prefect server waits seconds for its temporary one to boot, and any run waits for Prefect
to be imported and its flow and first tasks to be created. Meanwhile the first requests are already sent
from this event loop, through the very endpoint client the flow's tasks will use; each task then takes
those answers as its own fresh calls (`ChatCaller.call_ahead`), so nothing is sent twice and every call is
still counted, cached and recorded by its task. Nothing here imports Prefect: the point is to start
before it is loaded.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

from judgebench_flows.cli.prefect_server import PrefectSettings, PrefectStart
from judgebench_flows.core.config import RunConfig
from judgebench_flows.judging.shards import (
    JudgeSpec,
    Shard,
    call_ahead,
    close_runtimes,
    judge_spec,
    make_shards,
    shard_cache_key_of,
)

# Calls a run may make ahead of its flow, per unit of --concurrency.
HEAD_START_ROUNDS = 64
# How long another thread may hold the interpreter before the event loop gets it back. Prefect's import
# and start-up (and the database writes) run in threads while calls are in flight; at CPython's default
# of 5 ms every answer could wait that long (README, Performance, has the measurement).
LOOP_SWITCH_INTERVAL = 0.001


def head_start_plan(config: RunConfig) -> tuple[JudgeSpec, list[Shard]] | None:
    """The spec and shards the flow will judge, computed the way the flow computes them, when they can be
    known without Prefect: a local file, or a pinned commit that preflight already cloned. None for
    Dask (workers make the calls), external judges (no calls), a Prefect global limit (needs the API) and a
    budget (checked by the flow before the first call)."""
    from judgebench_flows.data.dataset import data_file_in, fetch_repository, is_pinned
    from judgebench_flows.data.loading import select_pairs

    if config.task_runner == "dask" or config.uses_global_limit or not config.needs_endpoint:
        return None
    if config.max_cost is not None:  # the flow checks the worst case against the budget before any call
        return None
    if config.data_path:
        data_path, templates_dir = config.data_path, config.templates_dir
    elif is_pinned(config.ref):
        checkout = fetch_repository(config.repo_url, config.ref, config.cache_dir)
        data_path = str(data_file_in(checkout, config.data_file))
        templates_dir = config.templates_dir or str(checkout.templates_dir)
    else:
        return None
    index = select_pairs(data_path, config.max_samples, config.seed)
    return judge_spec(config, templates_dir), make_shards(index, config.shard_size, config.shuffle_seed)


def not_in_shard_cache(
    shards: list[Shard], spec: JudgeSpec, config: RunConfig, prefect: PrefectSettings
) -> Iterator[Shard]:
    """Shards whose result Prefect will not serve from its cache: calls made ahead for a cached shard would
    be paid for nothing (its calls may be missing from this run's call cache, e.g. a new database). A
    result file counts as cached even if expired: that only forgoes the head start for its shard."""
    if config.endpoint.cache != "use":
        yield from shards
        return
    if prefect.result_storage is None:  # results in a storage block: no cheap way to tell, make no call ahead
        return
    for shard in shards:
        if not (prefect.result_storage / shard_cache_key_of(spec, shard)).exists():
            yield shard


async def judge_with_head_start(
    config: RunConfig,
    prefect: PrefectStart,
    with_prefect: Callable[[], object] = lambda: None,
) -> dict[str, Any]:
    """Run the JudgeBench flow, its first calls made while Prefect starts (see the module docstring).
    `with_prefect` runs once Prefect may be imported, before the flow (the CLI sets up its logging there)."""
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(min(switch_interval, LOOP_SWITCH_INTERVAL))
    try:
        return await _judge_with_head_start(config, prefect, with_prefect)
    finally:
        sys.setswitchinterval(switch_interval)


async def _judge_with_head_start(
    config: RunConfig, prefect: PrefectStart, with_prefect: Callable[[], object]
) -> dict[str, Any]:
    settings, plan = await asyncio.gather(
        asyncio.to_thread(prefect.settings), asyncio.to_thread(head_start_plan, config)
    )
    ahead = None
    if plan is not None:
        spec, shards = plan
        ahead = asyncio.create_task(
            call_ahead(
                spec,
                not_in_shard_cache(shards, spec, config, settings),
                HEAD_START_ROUNDS * config.endpoint.concurrency,
            )
        )
    try:
        await asyncio.to_thread(prefect.wait_ready)
        await asyncio.to_thread(with_prefect)
        flow_module = await asyncio.to_thread(importlib.import_module, "judgebench_flows.flows.judgebench_flow")
        return await flow_module.judgebench_flow(config)
    finally:
        if ahead is not None:
            ahead.cancel()
            await asyncio.gather(ahead, return_exceptions=True)
            await close_runtimes()  # the flow closed them, unless it ended before judging


__all__ = [
    "HEAD_START_ROUNDS",
    "LOOP_SWITCH_INTERVAL",
    "head_start_plan",
    "judge_with_head_start",
    "not_in_shard_cache",
]

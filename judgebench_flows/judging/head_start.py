"""A run's first judgments started while Prefect starts: the flow's shards take them over, none is sent twice.

Measured (docs/performance.md): from the shell, a run's first call waited 4.8-6.4 s on an idle machine,
for Prefect and the flow to be imported (about 3 s), the flow run to be created and its first shard task
to start, while JudgeBench's run_judge.py, whose start-up we must not trail, calls after its own imports.
So the run path (`runtime.run.flow_started_early`), its checks passed, makes the head start ready here
(`prepare_head_start`: database, data, spec, configuration held; no call), finds its Prefect server, and
starts it (`HeadStart.start`) in the event loop the flow will run in, then imports the flow in a thread
(the loop serves the calls meanwhile) and runs it. Each early pair is judged by the code a shard runs
(`shards.judge_pair`), through the runtime the shard will find (`shards.runtime_for`: same spec, same
loop, so the same client, connection limit, call cache and spend): the shard that reaches the pair awaits
its task (`shards.claim_early`) instead of judging it, and gets the records it would have made. Nothing is
paid twice: nothing goes ahead of a shard Prefect's cache would serve whole (asked of its result store,
which the server names), an early pair's answers are remembered in the call cache as a shard's are, and a
run stopped before its shards take them cancels what is left and writes what was answered (`close`).

Only where the flow would judge exactly as the head start does, and only after what the flow checks
before paying: in process, synchronous calls, no --max-cost to hold the worst case against, no global
limit, the cache reused from any run, not inside another flow run; the configuration held
(`data.run_lock`: an identical run in progress is waited for by the flow, not raced here). The flow
adopts the head start only when its own spec, commit and pairs are the same (`flows/judgebench_flow`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sys
import uuid
import weakref
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine

from judgebench_flows.calls.heard import hearing
from judgebench_flows.core.config import RunConfig
from judgebench_flows.data import db
from judgebench_flows.data.benchmark_data import run_paths
from judgebench_flows.data.dataset import Checkout, fetch_repository
from judgebench_flows.data.journal import journal_dir
from judgebench_flows.data.loading import PairIndex, select_pairs
from judgebench_flows.data.run_lock import ConfigurationLock
from judgebench_flows.judging.run_context import EarlyJudgment, RunCalls, RunContext, Runtime
from judgebench_flows.judging.shards import (
    JudgeSpec,
    Shard,
    judge_pair,
    judge_spec,
    make_shards,
    runtime_for,
    shards_in_flight,
)


@dataclasses.dataclass(frozen=True)
class Source:
    """Where the pairs come from: a checkout of the benchmark at a commit, or a local file (`--data-path`)."""

    data_path: str
    data_file: str
    templates_dir: str | None
    repo_url: str | None = None
    commit: str | None = None

    @classmethod
    def of(cls, config: RunConfig, checkout: Checkout | None = None) -> Source:
        """The run's data file and templates in `checkout`, or its local file (`--data-path`) without one."""
        if checkout is None:
            return cls(config.data_path or "", Path(config.data_path or "").name, config.templates_dir)
        data, templates = run_paths(config, checkout)
        return cls(
            str(data),
            config.data_file,
            templates,
            checkout.repo_url,
            checkout.commit,
        )


@dataclasses.dataclass(eq=False)
class HeadStart:
    """What the run decided before its flow existed, for the flow to adopt: its id and start, the
    database, the source and pairs, the spec its calls were made under, the configuration it holds."""

    config: RunConfig
    run_id: str
    started: datetime
    engine: Engine
    source: Source
    index: PairIndex
    spec: JudgeSpec
    lock: ConfigurationLock
    runtime: Runtime | None = None  # once its calls started (`start`)
    replayed: int = 0  # answers earlier runs journaled, written into the call cache here (the flow says so)
    adopted: bool = False  # by the flow, which records the run from then on

    async def stopped(self, exc: BaseException) -> None:
        """The run ended before its flow adopted it (stopped, or its flow could not start): its row in
        the history says so, as the flow's would, for the answers its early pairs paid for."""
        if self.adopted or self.runtime is None:  # the flow records it, or no call was sent
            return

        def record() -> None:
            config = self.config
            row = run_row(config, self.source, len(self.index.offsets), self.lock.config_key, self.started)
            db.start_run(self.engine, self.run_id, **row)
            if isinstance(exc, Exception):
                db.fail_run(self.engine, self.run_id, exc)
            else:
                db.interrupt_run(self.engine, self.run_id, stop_message(exc))

        with contextlib.suppress(Exception):  # the database is gone: the run's answers are journaled
            await asyncio.to_thread(record)

    async def start(self, run: RunContext, shard_cache_holds: ShardCacheHolds) -> None:
        """Send the first shards' calls (their pairs judged by `shards.judge_pair` in tasks the shards
        will await), unless Prefect's cache would serve one of those shards whole: the flow then pays
        nothing for it, and this head start is let go. Called with the run's Prefect server in force,
        whose result store that check reads."""
        config = self.config
        first = make_shards(self.index, config.shard_size, config.shuffle_seed)[: shards_in_flight(config)]
        try:
            if await shard_cache_holds(self.spec, first):
                await self.close(run)
                return
            runtime = self.runtime = runtime_for(self.spec, run)
            for shard in first:
                for pair in shard.load():
                    with hearing() as heard:  # the task copies this context: its calls count there
                        task = asyncio.create_task(judge_pair(pair, runtime, self.spec.orders, epochs=self.spec.epochs))
                    runtime.early[pair.pair_id] = EarlyJudgment(task, heard)
        except Exception:  # the flow meets it and reports it as the run's own
            await self.close(run)

    async def close(self, run: RunContext) -> None:
        """The run is over (or never reached its shards): early pairs no shard took are cancelled, the
        answers received are written to the call cache, and the configuration is let go. Safe after the
        flow closed the runtime and released the lock itself."""
        _HEAD_STARTS.pop(run, None)
        await _let_go(run.calls, self.spec, self.runtime, self.lock)


async def _let_go(calls: RunCalls, spec: JudgeSpec, runtime: Runtime | None, lock: ConfigurationLock) -> None:
    """Cancel the early pairs no shard took, close their client (the answers received go to the call
    cache) and release the configuration."""
    try:
        if runtime is not None:
            left = [early.task for early in runtime.early.values()]
            runtime.early.clear()
            for task in left:
                task.cancel()
            await asyncio.gather(*left, return_exceptions=True)
            await calls.close_runtimes(spec.model_dump_json())
    finally:
        await asyncio.to_thread(lock.release)


def stop_message(exc: BaseException) -> str:
    """How a run stopped before its flow run started was asked to stop, as the flow words it."""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted (Ctrl-C) before its flow run started; the same command resumes it"
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled before its flow run started; the same command resumes it"
    return "stopped by SIGTERM before its flow run started; the same command resumes it"


def judge_label(config: RunConfig) -> str:
    """The judge as results.json and the history name it (a custom template's, an external judge's file)."""
    external = config.external_judge_path and f"external:{Path(config.external_judge_path).stem}"
    return config.judge_template or external or config.judge_type


def run_row(
    config: RunConfig, source: Source, n_pairs: int | None, config_key: str, started: datetime
) -> dict[str, Any]:
    """A run's row as `db.start_run` records it (the flow adds its flow runs)."""
    return {
        "config_key": config_key,
        "judge_type": judge_label(config),
        "model": config.model,
        "repo_url": source.repo_url or config.data_path,
        "commit": source.commit,
        "data_file": source.data_file,
        "started": started,
        "n_pairs": n_pairs,
        "config_json": RunConfig.model_validate(config.public_dict()).model_dump_json(),
    }


# Each run's head start, for its flow to adopt (`head_start_of`), until it is closed.
_HEAD_STARTS: weakref.WeakKeyDictionary[RunContext, HeadStart] = weakref.WeakKeyDictionary()


def head_start_of(run: RunContext, config: RunConfig | None = None) -> HeadStart | None:
    """The run's head start, if it has one (made for `config`, when given)."""
    early = _HEAD_STARTS.get(run)
    return early if early is not None and (config is None or early.config == config) else None


def head_start_refused(config: RunConfig) -> str | None:
    """Why this run's flow would not judge as a head start does (so none is made), or None."""
    endpoint = config.endpoint
    reasons = [
        (not config.head_start, "--no-head-start"),
        (not config.needs_endpoint, "no endpoint"),
        (config.task_runner != "thread", "shards on Dask"),
        (endpoint.batch, "--batch"),
        (config.max_cost is not None, "--max-cost (the worst case is checked in the flow)"),
        (config.uses_global_limit, "a global limit"),
        (endpoint.cache_reuse == "this-run", "--cache-reuse this-run (the flow run names the scope)"),
        (_inside_flow_run(), "inside another flow run"),
    ]
    return next((why for refused, why in reasons if refused), None)


def _inside_flow_run() -> bool:
    """Whether a Prefect flow run is in force here (a user's flow calling evaluate()): its deployment or
    name may give the run a cache scope of its own. Prefect not imported yet: none is."""
    context = sys.modules.get("prefect.context")
    return context is not None and context.FlowRunContext.get() is not None


def source_of(config: RunConfig) -> Source:
    """The run's data and templates (git in the caller's thread: call it in one)."""
    if config.data_path:
        return Source.of(config)
    return Source.of(config, fetch_repository(config.repo_url, config.ref, config.cache_dir))


def spec_for(config: RunConfig, source: Source, calls: RunCalls, run_id: str, started: datetime) -> JudgeSpec:
    """The spec the flow makes for a run reusing any run's answers (`flows.cache_scope.reuse_scope`)."""
    return judge_spec(config, source.templates_dir, calls).model_copy(
        update={"run_id": run_id, "cache_scope": None, "cache_newer_than": config.endpoint.reused_newer_than(started)}
    )


ShardCacheHolds = Callable[[JudgeSpec, list[Shard]], Awaitable[bool]]
"""Whether Prefect's cache would serve any of these shards whole (`tasks.judge.shard_results_held`)."""


async def prepare_head_start(config: RunConfig, run: RunContext) -> HeadStart | None:
    """The run's head start made ready, its configuration held, no call sent yet (`HeadStart.start`), or
    None where the flow alone judges (`head_start_refused`, the configuration held by another run, anything
    that failed here: the flow meets it and reports it as the run's own)."""
    if head_start_refused(config) is not None:
        return None
    try:
        early = await _prepared(config, run)
    except Exception:
        return None
    if early is not None:
        _HEAD_STARTS[run] = early
    return early


async def _prepared(config: RunConfig, run: RunContext) -> HeadStart | None:
    run_id, started = uuid.uuid4().hex, datetime.now(timezone.utc)
    engine = db.open_database(config.db_url)
    replayed = 0
    if config.endpoint.cache != "off":  # answers earlier runs journaled are cache hits, not calls
        replayed = await asyncio.to_thread(db.cache_replay, engine, journal_dir(config.cache_dir, config.db_url))
    source = await asyncio.to_thread(source_of, config)
    index = await asyncio.to_thread(select_pairs, source.data_path, config.max_samples, config.seed)
    spec = spec_for(config, source, run.calls, run_id, started)
    lock = ConfigurationLock(engine, config.config_key(source.commit, spec.judge_fingerprint), run_id)
    if not await asyncio.to_thread(lock.try_hold):
        return None  # an identical run is judging: the flow waits for it and reads its answers
    return HeadStart(config, run_id, started, engine, source, index, spec, lock, replayed=replayed)


__all__ = [
    "HeadStart",
    "Source",
    "head_start_of",
    "head_start_refused",
    "judge_label",
    "prepare_head_start",
    "run_row",
]

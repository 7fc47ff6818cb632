"""A JudgeBench run's rows in the results database and its configuration held: the database opened (the
journals of earlier runs replayed, crashed runs marked), the configuration held alone (an identical run
waited for, its answers admitted as a twin's, or the head start's hold adopted), the run's row started,
finished, or stopped (interrupted or failed). The flow's phases (flows/judgebench_flow.py) call these;
they say nothing of how pairs are judged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from prefect import get_run_logger
from prefect.exceptions import TerminationSignal
from sqlalchemy.engine import Engine

from judgebench_flows.core.config import RunConfig
from judgebench_flows.core.errors import InfrastructureLost, PathNotWritable
from judgebench_flows.core.pricing import BudgetReached
from judgebench_flows.data import db
from judgebench_flows.data.journal import journal_dir
from judgebench_flows.data.loading import PairIndex
from judgebench_flows.data.run_lock import ConfigurationLock
from judgebench_flows.flows.cache_scope import ReuseScope
from judgebench_flows.flows.run_files import remove_parts
from judgebench_flows.flows.run_usage import priced_as
from judgebench_flows.judging.head_start import HeadStart, Source, run_row
from judgebench_flows.judging.run_context import RunContext
from judgebench_flows.judging.shards import JudgeSpec
from judgebench_flows.scoring.provenance import served_text
from judgebench_flows.scoring.run_results import RunHeader, RunResults


def stop_request(exc: BaseException) -> str | None:
    """How the run was asked to stop (Ctrl-C, SIGTERM, a cancellation from Prefect), or None when `exc`
    is a failure. SIGTERM reaches the flow as Prefect's `TerminationSignal`, or as the cancellation of its
    task when the signal arrived while the event loop was waiting."""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted (Ctrl-C); the same command resumes it"
    if isinstance(exc, TerminationSignal):
        return "stopped by SIGTERM; the same command resumes it"
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled; the same command resumes it"
    return None


async def hold_configuration(engine: Engine, config_key: str, run_id: str) -> tuple[ConfigurationLock, list[str]]:
    """This run judges its configuration alone in this results database (`data/run_lock`): an identical
    run in progress is waited for, saying so in one line, and its answers then come from the call cache
    (a night's run admits them into its reuse: `twins_admitted`). Returns the lock and the runs waited for."""
    logger = get_run_logger()

    def waiting(holder: Any) -> None:
        logger.warning(
            "waiting for run %s of the same configuration (on %s, pid %s) to finish; its answers will come "
            "from the call cache",
            holder.run_id[:8],
            holder.host,
            holder.pid,
        )

    lock = ConfigurationLock(engine, config_key, run_id)
    waited = await asyncio.to_thread(lock.hold, waiting)
    return lock, waited


async def twins_admitted(
    spec: JudgeSpec, waited: list[str], engine: Engine, config_key: str, reuse: ReuseScope
) -> JudgeSpec:
    """The spec of a night's (or deployment run's) run with its twins' answers admitted into its reuse:
    the runs of the same configuration it waited for, and those running when its night started or
    started since (`db.twin_runs`). Its reuse is otherwise its own flow run's only, so a twin night started
    alongside would pay every call its twin had just paid, which the waiting message promises it will not."""
    if spec.cache_scope is None:  # any run's answers are reused already
        return spec
    since = reuse.root_started
    twins = (
        [*waited, *(await asyncio.to_thread(db.twin_runs, engine, config_key, since, spec.run_id or ""))]
        if since
        else waited
    )
    twins = list(dict.fromkeys(twins))
    if not twins:
        return spec
    get_run_logger().info(
        "answers of %d run%s of the same configuration tonight (%s) are reused as this run's own",
        len(twins),
        "s" if len(twins) > 1 else "",
        ", ".join(run_id[:8] for run_id in twins),
    )
    return spec.model_copy(update={"cache_twins": tuple(twins)})


def record_stop(engine: Engine, run_id: str, exc: BaseException, spec: JudgeSpec, parts_dir: Path) -> None:
    """The run's row when it ends without results: `interrupted` on request, else `failed` (with the
    database itself gone or its disk full, the next run's `mark_crashed` marks it). Its JSONL parts go:
    the next run writes its own (a full disk is not kept full by them)."""
    remove_parts(parts_dir)
    stop = stop_request(exc)
    with contextlib.suppress(InfrastructureLost, PathNotWritable):
        if stop:
            db.interrupt_run(engine, run_id, stop)
        else:
            db.fail_run(engine, run_id, exc)
        if isinstance(exc, BudgetReached):  # what it spent before it stopped
            db.update_run(engine, run_id, cost_usd=exc.spent, priced_as=priced_as(spec))


JOURNALS_REPLAYED = "%d answers earlier runs kept in their journals are now in the call cache"


async def open_results_database(config: RunConfig) -> Engine:
    """The results database, waited for within the run's --db-lost-timeout when it goes away
    (`data.outage.run_wait`, set by the flow), with the answers earlier runs kept in their journals while it
    was away written into its call cache first, and runs whose process was killed no longer "running"."""
    engine = db.open_database(config.db_url)
    if config.endpoint.cache != "off":
        replayed = await asyncio.to_thread(db.cache_replay, engine, journal_dir(config.cache_dir, config.db_url))
        if replayed:
            get_run_logger().info(JOURNALS_REPLAYED, replayed)
    await asyncio.to_thread(db.mark_crashed, engine)
    return engine


async def configuration_held(
    early: HeadStart | None,
    run: RunContext,
    source: Source,
    spec: JudgeSpec,
    index: PairIndex,
    engine: Engine,
    config_key: str,
) -> tuple[ConfigurationLock, list[str]]:
    """The configuration held for this run (by its head start when the flow adopts it, else taken now) and
    the identical runs it waited for."""
    adopting = early and await adopted(early, run, source, spec, index)
    return (adopting.lock, []) if adopting else await hold_configuration(engine, config_key, spec.run_id or "")


async def adopted(
    early: HeadStart, run: RunContext, source: Source, spec: JudgeSpec, index: PairIndex
) -> HeadStart | None:
    """The run's head start (judging/head_start.py) when this flow judges exactly as it did: the same
    spec (prompts, model, run id, cache scope), commit and pairs; its pairs are then the shards' own.
    Otherwise (a branch moved between the two fetches) it is stopped, its answers kept in the call cache."""
    if early.spec == spec and early.source == source and early.index.offsets == index.offsets:
        early.adopted = True  # the flow records how the run ends
        if early.replayed:
            get_run_logger().info(JOURNALS_REPLAYED, early.replayed)
        return early
    get_run_logger().warning("the pairs judged while Prefect started were not this run's: they are judged again")
    await early.close(run)
    return None


def record_start(
    engine: Engine,
    run_id: str,
    config: RunConfig,
    source: Source,
    header: RunHeader,
    config_key: str,
    flow_run_id: str,
    started: datetime,
    reuse: ReuseScope,
) -> None:
    """The run's row in the results database, "running" from now on (`judgebench history` shows it), with
    its outermost flow run: the cache answers it pays are reused by that flow run's later attempts."""
    row = run_row(config, source, header.dataset.n_pairs, config_key, started)
    db.start_run(engine, run_id, **row, flow_run_id=flow_run_id, root_flow_run_id=reuse.root_flow_run_id)


def record_finish(
    engine: Engine,
    run_id: str,
    results: RunResults,
    final: dict[str, Any],
    too_little: str | None,
    finished: datetime,
    spec: JudgeSpec,
) -> None:
    """The run's row: its outcome, accuracy, results.json (`final`) and what it cost."""
    db.finish_run(
        engine,
        run_id,
        status="failed" if too_little else "regressed" if results.regressed else "completed",
        finished=finished,
        overall=results.overall_accuracy,
        message=too_little or (results.regression.message if results.regression else None),
        results_json=json.dumps(final, default=str),
        cost_usd=final["usage"]["cost_usd"],
        priced_as=priced_as(spec),
        consistency=results.consistency,
        served_as=served_text(results.provenance.served) if results.provenance else None,
        drift=results.drift.message if results.drift and results.drift.changed else None,
    )

"""The JudgeBench evaluation flow: one run in four phases (`run_judgebench`), each a function that times
itself: `prepare_run` (results database, fetch, spec, pairs, worst case, configuration lock, the run's row:
a `PreparedRun`), `judge_run_pairs` (shards, the wait for a place to call, every shard judged),
`score_run` (usage, regression and noise, aggregate, provenance, the failure verdict) and `publish_run`
(outputs once the Prefect API answers, the run's folder settled, its row finished).

Shards run concurrently in the flow's own event loop, so they share one endpoint client and one
connection limit (`--concurrency`), held by the run's context (`judging.run_context`: the one in force,
the CLI's or the night's, else the run's own); with `--task-runner dask` they are submitted to a Dask
cluster, each shard builds its own client on its worker, and every call also holds a slot of a Prefect
global concurrency limit, so `--concurrency` and `--rpm` hold across all workers. A run is recorded in the results
database from its start, so a crashed run is visible in `judgebench history` as "running"/"failed".
How shards run is in `shard_runs` (in process) and `dask_shards`; results.json is `scoring.run_results`.
What its calls counted and cost is `run_usage`'s; where its files go, `run_files`'s.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from datetime import datetime, timezone
from typing import Any

from prefect import flow, get_run_logger
from prefect.context import get_run_context
from prefect.runtime import flow_run
from prefect.utilities.annotations import quote
from sqlalchemy.engine import Engine

from judgebench_flows.calls.caller import CallStats
from judgebench_flows.calls.global_limits import ensure_limits
from judgebench_flows.core.artifact_keys import configuration_slug
from judgebench_flows.core.config import RunConfig
from judgebench_flows.core.errors import RunFailed
from judgebench_flows.core.heap import settle_heap
from judgebench_flows.data.loading import PairIndex
from judgebench_flows.data.outage import run_wait
from judgebench_flows.data.run_lock import ConfigurationLock
from judgebench_flows.flows.cache_scope import ReuseScope, cache_use, reuse_scope
from judgebench_flows.flows.events import RunTrace, emit, run_event
from judgebench_flows.flows.retries import carried_results, is_transient
from judgebench_flows.flows.run_files import (
    output_judge_name,
    parts_folder,
    remove_parts,
    settle_folder,
    with_run_paths,
)
from judgebench_flows.flows.run_pages import judgebench_run_name, say_link
from judgebench_flows.flows.run_rows import (
    configuration_held,
    open_results_database,
    record_finish,
    record_start,
    record_stop,
    twins_admitted,
)
from judgebench_flows.flows.run_usage import check_worst_case, cost_of_calls, usage_of_run
from judgebench_flows.flows.shard_runs import judge_shards
from judgebench_flows.flows.shard_sink import ShardSink
from judgebench_flows.judging.head_start import Source, head_start_of, judge_label
from judgebench_flows.judging.provenance import provenance_of
from judgebench_flows.judging.run_context import NightShare, RunCalls, RunContext, running
from judgebench_flows.judging.shards import (
    JudgeSpec,
    Shard,
    judge_spec,
    make_shards,
    request_report_of,
)
from judgebench_flows.scoring.metrics import Tally
from judgebench_flows.scoring.provenance import drift_against_baseline
from judgebench_flows.scoring.regression import against_recent_runs
from judgebench_flows.scoring.result_types import Provenance, Usage
from judgebench_flows.scoring.run_results import (
    DatasetInfo,
    RequestReport,
    RunHeader,
    RunInfo,
    RunResults,
    SkippedRow,
    Timings,
)
from judgebench_flows.tasks.fetch import fetch_dataset
from judgebench_flows.tasks.load import index_dataset
from judgebench_flows.tasks.publish import publish_results


async def prefect_api_answering(timeout: float) -> None:
    """Wait, at most `timeout` seconds, until the Prefect API answers: after a server restart the run's
    judging went on, but a Prefect client made now (publishing the artifact) fails at once on a refused
    connection, where one that had connected before retries. Past the timeout the run's server watch has
    ended the run (exit 5)."""
    from prefect.client.orchestration import get_client

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            async with get_client() as client:
                if await client.api_healthcheck() is None:
                    return
        except Exception:  # refused or reset while the server boots
            pass
        await asyncio.sleep(1.0)


def measured_too_little(results: RunResults, max_failed_fraction: float) -> str | None:
    """Why the run is not a measurement (failed + invalid judgments above the allowed share), or None."""
    judgments = results.usage.judgments if results.usage is not None else 0
    bad = results.invalid.failed_judgments + results.invalid.invalid_judgments
    if not judgments or bad / judgments <= max_failed_fraction:
        return None
    reasons = "; ".join(f"{reason} ({count})" for reason, count in list(results.invalid.reasons.items())[:3])
    return (
        f"{bad} of {judgments} judgments failed or were invalid ({bad / judgments:.1%}, more than "
        f"--max-failed-fraction {max_failed_fraction:g}): {reasons}"
    )


async def run_spec(
    config: RunConfig, source: Source, run_id: str, started: datetime, calls: RunCalls
) -> tuple[JudgeSpec, ReuseScope]:
    """The run's judge spec, with the cached answers it may reuse (`flows/cache_scope`: a night's or a
    deployment run's own, or any run's; no older than --cache-max-age)."""
    reuse = await reuse_scope(config.endpoint, get_run_context().flow_run, started)  # type: ignore[union-attr,arg-type]
    spec = judge_spec(config, source.templates_dir, calls).model_copy(
        update={"run_id": run_id, "cache_scope": reuse.scope, "cache_newer_than": reuse.newer_than}
    )
    return spec, reuse


async def note_cache_use(
    engine: Engine, reuse: ReuseScope, config: RunConfig, heard: CallStats | None, sink: ShardSink, results: RunResults
) -> None:
    """results.json's `run.cache` (the answers the call and shard caches gave, and which runs paid them),
    and its line in the run's log. `heard`: the run's calls as this process's callers counted them, or on
    Dask as the workers' shards brought them back (`heard_by`)."""
    if not config.needs_endpoint:
        return
    usage = results.usage or Usage()
    known = heard.cache_sources + sink.shard_cache_sources if heard is not None else sink.shard_cache_sources
    sources = dict(known) if heard is not None or known else None
    results.run.cache = await asyncio.to_thread(
        cache_use, engine, reuse, config.endpoint, sources, usage.cached_calls, usage.calls
    )
    get_run_logger().info(results.run.cache.line())


async def fetch(config: RunConfig, night: NightShare) -> Source:
    """The run's data and templates: a night's cells on one data file check its clone once (`night.once`)."""
    if config.data_path:
        return Source.of(config)
    key = ("checkout", config.repo_url, config.ref, config.cache_dir)
    checkout, shared = await night.once(key, lambda: fetch_dataset(config.repo_url, config.ref, config.cache_dir))
    get_run_logger().info(
        "dataset %s at commit %s%s",
        checkout.repo_url,
        checkout.commit,
        " (checked once for the night)" if shared else "",
    )
    return await asyncio.to_thread(Source.of, config, checkout)  # another benchmark's judge may clone its prompts


async def pairs_of(source: Source, config: RunConfig, night: NightShare) -> PairIndex:
    """The pairs the run judges: a night's cells on one data file, sample and seed index it once."""
    key = ("index", source.data_path, config.max_samples, config.seed)
    index, _ = await night.once(key, lambda: index_dataset(source.data_path, config.max_samples, config.seed))
    return index


def run_header(config: RunConfig, source: Source, index: PairIndex) -> RunHeader:
    return RunHeader(
        model=config.model,
        judge_type=judge_label(config),
        dataset=DatasetInfo(
            repo_url=source.repo_url,
            commit=source.commit,
            data_file=source.data_file,
            n_pairs=len(index.offsets),
            skipped_rows=len(index.skipped),
            skipped=[SkippedRow(line=s.line, reason=s.reason) for s in index.skipped[:50]],
        ),
    )


class Stopwatch:
    """Wall-clock phases of the run (results.json's `run.timings`); `started`: when the run began, its
    head start's beginning where it had one (its calls began then)."""

    def __init__(self, started: datetime | None = None) -> None:
        self.started, self._last = started or datetime.now(timezone.utc), time.perf_counter()

    def lap(self) -> float:
        """Seconds since the previous lap (or the start)."""
        now = time.perf_counter()
        elapsed, self._last = now - self._last, now
        return round(elapsed, 3)


async def publish(prepared: PreparedRun, results: RunResults) -> dict[str, str]:
    """results.json, the JSONL, the report and the Prefect artifact; returns the outputs' paths."""
    config, sink, source, header = prepared.config, prepared.sink, prepared.source, prepared.header
    # quote(): Prefect would otherwise walk every record of the sample. Prefect's typed Task.__call__
    # overloads take the parameters' own types only, not their quote() wrappers.
    return await publish_results(  # type: ignore[call-overload]
        prepared.run_id,
        quote(results),
        quote(sink.tally.report_sample),
        quote(sink.parts()),
        result_path=config.result_path,
        output_dir=config.output_dir,
        db_url=config.db_url,
        judge_name=sink.judge_name,
        data_file=source.data_file,
        write_report=config.report,
        artifact_slug=configuration_slug(header.judge_type, config.model, prepared.spec.base_url, source.data_file),
    )


@flow(name="judgebench", log_prints=False, persist_result=False, flow_run_name=judgebench_run_name)
async def judgebench_flow(config: RunConfig, retried_if_transient: bool = False) -> dict[str, Any]:
    """Judge one configuration; its outcome is also announced as a `judgebench.run.*` Prefect event
    (flows/events.py), whatever stopped it: automations, not this code, decide who hears of it.
    `retried_if_transient`: the caller runs it once more after a passing failure (flows/nightly.py), so
    such a failure is announced as `judgebench.run.retrying`, not `failed`."""
    settle_heap()  # the imports' objects out of the collector's walks (core/heap.py)
    trace = RunTrace()
    flow_run_id = str(flow_run.id)
    try:
        # the CLI's or the night's run context, else the run's own; the database waits by this run's bound
        with running() as run, run_wait(config.db_lost_timeout):
            say_link(run.progress)
            results = await run_judgebench(config, trace, run)
    except BaseException as exc:
        retrying = retried_if_transient and is_transient(exc)
        emit(run_event(config, carried_results(exc), trace, error=exc, flow_run_id=flow_run_id, retrying=retrying))
        raise
    emit(run_event(config, results, trace, flow_run_id=flow_run_id))
    return results.as_json()


def run_info(prepared: PreparedRun, finished: datetime, timings: Timings, calls: RunCalls) -> RunInfo:
    """results.json's `run`: which run this was, how it judged, and how long each phase took."""
    config, started = prepared.config, prepared.clock.started
    return RunInfo(
        run_id=prepared.run_id,
        config_key=prepared.config_key,
        started=started.isoformat(),
        finished=finished.isoformat(),
        duration_s=round((finished - started).total_seconds(), 3),
        flow_run_id=prepared.flow_run_id,
        mode="single-game" if config.single_game else "both-orders",
        shuffle_responses=config.shuffle_responses,
        seed=config.seed,
        requests=RequestReport.model_validate(request_report_of(prepared.spec, calls))
        if config.needs_endpoint
        else None,
        timings=timings,
    )


def heard_by(spec: JudgeSpec, config: RunConfig, calls: RunCalls, sent: CallStats | None) -> CallStats | None:
    """What the endpoint said to the run's calls and who paid the answers they read from the call cache:
    counted by this process's clients (`sent`), or on Dask brought back with each shard the workers
    judged (`RunCalls.heard_on_workers`)."""
    if config.task_runner != "dask":
        return sent
    return calls.heard_on_workers.pop(spec.run_id or "", CallStats())


async def with_provenance(results: RunResults, engine: Engine, provenance: Provenance) -> None:
    """The run's provenance and its drift against the baseline run in `results`; a regression's message
    names what the endpoint said differently (a changed `system_fingerprint`, another model behind the
    name): what the alert and the night's summary show. A drift with accuracy unchanged is logged."""
    config_key, run_id = results.run.config_key or "", results.run.run_id or ""
    drift = await asyncio.to_thread(drift_against_baseline, engine, config_key, run_id, provenance)
    results.provenance, results.drift = provenance, drift
    if drift is None or not drift.changed:
        return
    regression = results.regression
    if regression is not None and regression.regressed:
        regression.message = f"{regression.message}; {drift.message}"
    else:
        get_run_logger().warning(drift.message)


def orders_of(config: RunConfig) -> str:
    orders = "single game" if config.single_game else "both orders"
    return orders if config.epochs == 1 else f"{orders}, {config.epochs} epochs"


async def judge_all(
    shards: list[Shard], spec: JudgeSpec, config: RunConfig, sink: ShardSink, run: RunContext
) -> tuple[CallStats | None, RunFailed | None]:
    """Every shard judged: what the endpoint clients sent, or why the run stopped early (what was judged
    is still published, then exit 4). Its calls done, a night's next cell may call while this one
    publishes (`NightShare.judged`)."""
    await ensure_limits(
        spec.global_limit,
        spec.endpoint.concurrency,
        spec.global_rate_limit,
        spec.endpoint.rpm,
        repair=run.calls.held_limits is None,  # a pool night's cell: the night repaired its endpoint's limit
    )
    try:
        return await judge_shards(shards, spec, config, sink, run), None
    except RunFailed as exc:
        return None, exc
    finally:
        run.night.judged()


async def wait_to_call(night: NightShare, clock: Stopwatch) -> float:
    """A night's cell, started ahead of its place among the cells in flight (its subflow run created,
    its data and database ready), waits here for it; the wait is no phase of the run's timings. Returns
    the process's CPU time as the calls start."""
    await night.calling()
    waited = clock.lap()
    if waited >= 1.0:
        get_run_logger().info("waited %.1f s for a place among the night's cells in flight", waited)
    return time.process_time()


def judged_timings(clock: Stopwatch, fetch_s: float, load_s: float, judge_cpu: float, tally: Tally) -> Timings:
    """results.json's `run.timings` as the judging ends: the phases so far and the judging's CPU per judgment."""
    return Timings(
        fetch_s=fetch_s,
        load_s=load_s,
        judge_s=clock.lap(),
        judge_cpu_ms_per_judgment=round(1000 * judge_cpu / max(1, tally.usage["judgments"]), 3),
    )


@dataclasses.dataclass
class PreparedRun:
    """What a run holds once prepared (`prepare_run`) for its later phases: its settings (with the run's
    paths; `layout`: the output folder as given), its identity, data and spec, the results database, its
    configuration lock (held from here until `run_judgebench` releases it on every path), the sink its
    shards go to, and its clock with the fetch phase timed (each phase times itself on it)."""

    config: RunConfig
    layout: str
    run_id: str
    flow_run_id: str
    config_key: str
    engine: Engine
    source: Source
    spec: JudgeSpec
    reuse: ReuseScope
    index: PairIndex
    header: RunHeader
    lock: ConfigurationLock
    sink: ShardSink
    clock: Stopwatch
    fetch_s: float


@dataclasses.dataclass
class Judged:
    """What the judging phase ends with: what the endpoint clients sent (None on Dask), why the run
    stopped early (None: every shard judged), and results.json's timings so far."""

    sent: CallStats | None
    stopped: RunFailed | None
    timings: Timings


@dataclasses.dataclass
class Scored:
    """The run's results as the scoring phase leaves them, why they are not a measurement (None: they
    are) and when the judging finished (the row's `finished`)."""

    results: RunResults
    too_little: str | None
    finished: datetime


async def run_judgebench(config: RunConfig, trace: RunTrace, run: RunContext) -> RunResults:
    """One JudgeBench run, phase by phase: prepared (its data read, its configuration held, its row
    "running"), judged, scored, published; `trace` learns the run's identity as it goes. `run`: the run's
    context (`run_context.RunContext`), in force while it judges. The configuration is let go on every
    path; a run that ends without results is recorded stopped or failed (`record_stop`), and one that
    measured too little raises RunFailed once it has published what it has."""
    prepared = await prepare_run(config, trace, run)
    try:
        judged = await judge_run_pairs(prepared, run)
        scored = await score_run(prepared, judged, run.calls)
        return await publish_run(prepared, scored)
    except BaseException as exc:
        record_stop(prepared.engine, prepared.run_id, exc, prepared.spec, prepared.sink.parts_dir)
        raise
    finally:
        prepared.lock.release()


async def prepare_run(config: RunConfig, trace: RunTrace, run: RunContext) -> PreparedRun:
    """The run set up where nobody did (`run.setup`: log redaction, the retirement notice in its log), its
    results database, data, spec and pairs, its worst case checked, its configuration held and its row
    started: what its later phases need. Fails before holding anything, or lets the configuration go
    itself when its row or sink cannot be made."""
    run.setup.redact_logs()  # done by the run's door, if it has one; a deployment's worker has none
    early = head_start_of(run, config)  # the run's first pairs judged while Prefect started, if any
    clock, run_id = (Stopwatch(early.started), early.run_id) if early else (Stopwatch(), uuid.uuid4().hex)
    layout, config = config.output_dir, with_run_paths(config, run_id)
    run.setup.say_retirement(config, get_run_logger().warning)  # unless its door or its night said it
    engine = await open_results_database(config)
    source = await fetch(config, run.night)
    trace.commit, trace.data_file = source.commit, source.data_file
    spec, reuse = await run_spec(config, source, run_id, clock.started, run.calls)
    fetch_s = clock.lap()
    index = await pairs_of(source, config, run.night)
    run.announce_total(len(index.offsets) * len(spec.orders) * spec.epochs)
    header = run_header(config, source, index)
    await asyncio.to_thread(check_worst_case, config, spec, index, engine, run.night)
    config_key = config.config_key(source.commit, spec.judge_fingerprint)  # the commit judged and the prompts rendered
    flow_run_id = str(flow_run.id)
    trace.run_id, trace.config_key = run_id, config_key
    lock, waited = await configuration_held(early, run, source, spec, index, engine, config_key)
    spec = await twins_admitted(spec, waited, engine, config_key, reuse)
    try:
        await asyncio.to_thread(
            record_start, engine, run_id, config, source, header, config_key, flow_run_id, clock.started, reuse
        )
        parts_dir = parts_folder(config.output_dir, run_id)
        sink = ShardSink(engine, run_id, parts_dir, spec, output_judge_name(config), run, config.benchmark)
    except BaseException:
        lock.release()
        raise
    return PreparedRun(
        config=config,
        layout=layout,
        run_id=run_id,
        flow_run_id=flow_run_id,
        config_key=config_key,
        engine=engine,
        source=source,
        spec=spec,
        reuse=reuse,
        index=index,
        header=header,
        lock=lock,
        sink=sink,
        clock=clock,
        fetch_s=fetch_s,
    )


async def judge_run_pairs(prepared: PreparedRun, run: RunContext) -> Judged:
    """Every pair judged, its shards made here: the load phase ends as they are, the judging phase begins
    once the run may call (`wait_to_call`: a night's cell waits for its place) and ends with its calls."""
    config, clock, sink = prepared.config, prepared.clock, prepared.sink
    shards = make_shards(prepared.index, config.shard_size, config.shuffle_seed)
    n_pairs = prepared.header.dataset.n_pairs
    get_run_logger().info("judging %d pairs in %d shards (%s)", n_pairs, len(shards), orders_of(config))
    load_s, cpu_before = clock.lap(), await wait_to_call(run.night, clock)
    sent, stopped = await judge_all(shards, prepared.spec, config, sink, run)
    timings = judged_timings(clock, prepared.fetch_s, load_s, time.process_time() - cpu_before, sink.tally)
    return Judged(sent, stopped, timings)


async def score_run(prepared: PreparedRun, judged: Judged, calls: RunCalls) -> Scored:
    """The run's results: its usage and cost, its regression and noise against recent runs, its
    aggregate, what the call cache gave, its provenance (and drift), and whether it measured too little
    (its status then `failed`)."""
    p, tally = prepared, prepared.sink.tally
    usage = await asyncio.to_thread(usage_of_run, p.engine, p.run_id, p.spec, judged.sent, tally)
    finished = datetime.now(timezone.utc)
    regression, noise = await asyncio.to_thread(against_recent_runs, p.engine, p.config, p.config_key, p.run_id, tally)
    results = RunResults.aggregate(
        tally,
        p.header,
        seed=p.config.seed,
        bootstrap_resamples=p.config.bootstrap_resamples,
        usage=Usage.model_validate(usage),
        regression=regression,
        noise=noise,
        run=run_info(p, finished, judged.timings, calls),
    )
    heard = heard_by(p.spec, p.config, calls, judged.sent)
    await note_cache_use(p.engine, p.reuse, p.config, heard, p.sink, results)
    await with_provenance(results, p.engine, provenance_of(p.spec, p.sink.judge, calls, heard))
    stopped = judged.stopped
    too_little = str(stopped) if stopped else measured_too_little(results, p.config.max_failed_fraction)
    if too_little:
        results.run.status, results.run.failure = "failed", too_little
    return Scored(results, too_little, finished)


async def publish_run(prepared: PreparedRun, scored: Scored) -> RunResults:
    """The run's outputs written once the Prefect API answers (results.json, JSONL, report, artifact), its
    folder settled, its row finished; the publish phase timed from its start (scoring is no phase). A run
    that measured too little raises RunFailed here, its outputs published so it can be inspected."""
    p, results, too_little = prepared, scored.results, scored.too_little
    p.clock.lap()  # the publish phase starts now
    await prefect_api_answering(p.config.server_lost_seconds())
    results.outputs = await publish(p, results)
    await asyncio.to_thread(settle_folder, p.layout, p.config.output_dir, p.run_id, too_little)
    await asyncio.to_thread(remove_parts, p.sink.parts_dir)
    results.run.timings.publish_s = p.clock.lap()
    final = results.as_json()
    await asyncio.to_thread(record_finish, p.engine, p.run_id, results, final, too_little, scored.finished, p.spec)
    if results.regressed:
        get_run_logger().warning(results.regression.message)  # type: ignore[union-attr]
    if too_little:  # published above, so it can be inspected; the run itself is not a measurement
        raise RunFailed(too_little, final)
    return results


__all__ = ["cost_of_calls", "judgebench_flow", "make_shards", "run_judgebench"]

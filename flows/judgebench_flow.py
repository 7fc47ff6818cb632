"""The JudgeBench evaluation flow: fetch, load, shard, judge, aggregate, publish.

Shards run concurrently in the flow's own event loop, so they share one endpoint client and one
connection limit (`--concurrency`); with `--task-runner dask` they are submitted to a Dask cluster and
each worker builds its own client (see README for the shared limit). A run is recorded in the results
database from its start, so a crashed run is visible in `judgebench history` as "running"/"failed".
"""

from __future__ import annotations

import asyncio
import json
import math
import shutil
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.context import get_run_context
from prefect.states import State

from judgebench_flows import db
from judgebench_flows.config import RunConfig
from judgebench_flows.dataset import data_file_in
from judgebench_flows.errors import UserError
from judgebench_flows.compare import records_of
from judgebench_flows.judging import JudgeSpec, Shard, announce_total, build_judge, close_runtimes
from judgebench_flows.loading import PairIndex
from judgebench_flows.records import JudgmentRecord
from judgebench_flows.results import build_results, correctness_by_pair, jsonl_rows, regression_check, write_jsonl
from tasks.fetch import fetch_dataset
from tasks.judge import ShardIncomplete, shard_task
from tasks.load import index_dataset
from tasks.publish import judgment_rows, publish_results


def make_shards(index: PairIndex, shard_size: int, shuffle_seed: int | None = None) -> list[Shard]:
    """Deterministic shards: consecutive runs of `shard_size` pairs in file order."""
    return [
        Shard(index=i, path=index.path, offsets=index.offsets[start : start + shard_size], shuffle_seed=shuffle_seed)
        for i, start in enumerate(range(0, len(index.offsets), shard_size))
    ]


def output_judge_name(config: RunConfig) -> str:
    """The judge's name in output file names: a custom judge is `custom_<Class>`, never its file path,
    which would put directories (or `..`) into the JSONL's file name."""
    if config.judge_template:
        return "custom_" + config.judge_template.rsplit(":", 1)[-1].replace("/", "_")
    return config.judge_type.replace(":", "_").replace("/", "_")


def judge_spec(config: RunConfig, templates_dir: str | None) -> JudgeSpec:
    spec = JudgeSpec(
        judge_type=config.judge_type,
        judge_template=config.judge_template,
        templates_dir=templates_dir,
        model=config.model,
        base_url=config.resolved_base_url(),
        sampling_overrides=config.sampling_overrides(),
        orders=(0,) if config.single_game else (0, 1),
        concurrency=config.concurrency,
        rpm=config.rpm,
        request_timeout=config.request_timeout,
        max_retries=config.max_retries,
        retry_initial_wait=config.retry_initial_wait,
        retry_max_wait=config.retry_max_wait,
        db_url=config.db_url,
        cache=config.cache,
        external_judge_path=config.external_judge_path,
        external_judge_function=config.external_judge_function,
        external_judge_config=config.external_judge_config,
    )
    return spec.model_copy(update={"judge_fingerprint": build_judge(spec).fingerprint()})


async def _shard_records(state: State) -> list[JudgmentRecord]:
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
    calls_per_shard = config.shard_size * (1 if config.single_game else 2)
    return max(2, math.ceil(2 * config.concurrency / calls_per_shard))


async def _judge_in_process(
    shards: list[Shard], spec: JudgeSpec, config: RunConfig,
    on_shard_done: Callable[[Shard, list[JudgmentRecord]], list[JudgmentRecord]],
) -> list[JudgmentRecord]:
    task = shard_task(config.cache, config.shard_retries)
    slots = asyncio.Semaphore(shards_in_flight(config))

    async def one(shard: Shard) -> list[JudgmentRecord]:
        async with slots:
            state = await task(shard, spec, return_state=True)
            records = await _shard_records(state)
            return await asyncio.to_thread(on_shard_done, shard, records)

    try:
        per_shard = await asyncio.gather(*(one(shard) for shard in shards))
    finally:
        await close_runtimes()
    return [record for records in per_shard for record in records]


def _judge_on_dask(shards: list[Shard], spec: JudgeSpec, config: RunConfig) -> list[JudgmentRecord]:
    from prefect_dask import DaskTaskRunner

    task = shard_task(config.cache, config.shard_retries)
    records: list[JudgmentRecord] = []
    with DaskTaskRunner(address=config.dask_address) as runner:
        futures = [runner.submit(task, parameters={"shard": shard, "spec": spec}) for shard in shards]
        for future in futures:
            future.wait()
            records += asyncio.run(_shard_records(future.state))
    return records


@flow(name="judgebench", log_prints=False, persist_result=False)
async def judgebench_flow(config: RunConfig) -> dict[str, Any]:
    logger = get_run_logger()
    run_id = uuid.uuid4().hex
    started, clock_start = datetime.now(timezone.utc), time.perf_counter()
    flow_run_id = str(get_run_context().flow_run.id)  # type: ignore[union-attr]
    engine = db.open_database(config.db_url)

    if config.data_path:
        data_path, commit, repo_url, templates_dir = config.data_path, None, None, config.templates_dir
        data_file = Path(config.data_path).name
    else:
        checkout = fetch_dataset(config.repo_url, config.ref, config.cache_dir)
        data_path, commit, repo_url = str(data_file_in(checkout, config.data_file)), checkout.commit, checkout.repo_url
        templates_dir = config.templates_dir or str(checkout.path / "utils" / "templates")
        data_file = config.data_file
        logger.info("dataset %s at commit %s", repo_url, commit)

    spec = judge_spec(config, templates_dir)
    fetched = time.perf_counter()
    index = index_dataset(data_path, config.max_samples, config.seed)
    n_pairs = len(index.offsets)
    announce_total(n_pairs * len(spec.orders))
    header: dict[str, Any] = {
        "model": config.model,
        "judge_type": config.judge_template or (f"external:{Path(config.external_judge_path).stem}" if config.external_judge_path else config.judge_type),
        "dataset": {
            "repo_url": repo_url,
            "commit": commit,
            "data_file": data_file,
            "n_pairs": n_pairs,
            "skipped_rows": len(index.skipped),
            "skipped": [{"line": s.line, "reason": s.reason} for s in index.skipped[:50]],
        },
    }
    config_key = config.config_key()
    db.save_run(
        engine,
        run_id=run_id,
        config_key=config_key,
        judge_type=header["judge_type"],
        model=config.model,
        repo_url=repo_url or config.data_path,
        commit=commit,
        data_file=data_file,
        flow_run_id=flow_run_id,
        status="running",
        started=started,
        n_pairs=n_pairs,
        config_json=RunConfig.model_validate(config.public_dict()).model_dump_json(),
    )
    judge_name = output_judge_name(config)
    parts_dir = Path(config.output_dir) / ".parts" / run_id

    def on_shard_done(shard: Shard, records: list[JudgmentRecord]) -> list[JudgmentRecord]:
        """Write the shard's JSONL part and database rows now; keep only what the metrics need."""
        write_jsonl(parts_dir / f"shard-{shard.index:06d}.jsonl", jsonl_rows(shard.load(), records, judge_name))
        db.save_judgments(engine, judgment_rows(run_id, records))
        return [r.model_copy(update={"prompt": ""}) for r in records]

    try:
        shards = make_shards(index, config.shard_size, config.seed if config.shuffle_responses else None)
        logger.info("judging %d pairs in %d shards (%s)", n_pairs, len(shards), "single game" if config.single_game else "both orders")
        loaded = time.perf_counter()
        cpu_before = time.process_time()
        if config.task_runner == "dask":
            judged = await asyncio.to_thread(_judge_on_dask, shards, spec, config)
            judgments = []
            for shard in shards:
                ids = {p.pair_id for p in shard.load()}
                judgments += on_shard_done(shard, [r for r in judged if r.pair_id in ids])
        else:
            judgments = await _judge_in_process(shards, spec, config, on_shard_done)
        judged_at, judge_cpu = time.perf_counter(), time.process_time() - cpu_before

        results = build_results(judgments, header=header, seed=config.seed, bootstrap_resamples=config.bootstrap_resamples, skipped_rows=len(index.skipped))
        previous = [r for r in db.list_runs(engine, limit=2, config_key=config_key, statuses=("completed", "regressed")) if r.run_id != run_id]
        results["regression"] = None
        if previous and config.bootstrap_resamples:
            baseline = records_of(engine, previous[0].run_id)
            if baseline:
                results["regression"] = regression_check(
                    correctness_by_pair(baseline), correctness_by_pair(judgments), baseline_run_id=previous[0].run_id,
                    seed=config.seed, resamples=config.bootstrap_resamples, min_drop=config.regression_min_drop,
                )
        finished = datetime.now(timezone.utc)
        results["run"] = {
            "run_id": run_id,
            "config_key": config_key,
            "started": started.isoformat(),
            "finished": finished.isoformat(),
            "duration_s": round((finished - started).total_seconds(), 3),
            "flow_run_id": flow_run_id,
            "mode": "single-game" if config.single_game else "both-orders",
            "shuffle_responses": config.shuffle_responses,
            "seed": config.seed,
        }
        results["run"]["timings"] = {
            "fetch_s": round(fetched - clock_start, 3),
            "load_s": round(loaded - fetched, 3),
            "judge_s": round(judged_at - loaded, 3),
            "judge_cpu_ms_per_judgment": round(1000 * judge_cpu / max(1, len(judgments)), 3),
        }
        publish_started = time.perf_counter()
        paths = publish_results(
            run_id, results, judgments, sorted(parts_dir.glob("shard-*.jsonl")),
            result_path=config.result_path, output_dir=config.output_dir, db_url=config.db_url,
            judge_name=judge_name, data_file=data_file, write_report=config.report,
        )
        shutil.rmtree(parts_dir, ignore_errors=True)
        results["run"]["timings"]["publish_s"] = round(time.perf_counter() - publish_started, 3)
        results["outputs"] = paths
        regressed = bool(results["regression"] and results["regression"].get("regressed"))
        overall = results["overall_accuracy"]
        db.update_run(
            engine, run_id, status="regressed" if regressed else "completed", finished=finished,
            overall_accuracy=overall["accuracy"], ci_low=overall.get("ci_low"), ci_high=overall.get("ci_high"),
            message=results["regression"]["message"] if results["regression"] else None,
            results_json=json.dumps(results, default=str),
        )
        if regressed:
            logger.warning(results["regression"]["message"])
        return results
    except BaseException as exc:
        db.update_run(engine, run_id, status="failed", finished=datetime.now(timezone.utc), message=str(exc)[:500] if isinstance(exc, UserError) else type(exc).__name__)
        raise


__all__ = ["judgebench_flow", "make_shards"]

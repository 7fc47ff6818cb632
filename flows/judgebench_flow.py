"""The JudgeBench evaluation flow: fetch, load, shard, judge, aggregate, publish.

Shards run concurrently in the flow's own event loop, so they share one endpoint client and one
connection limit (`--concurrency`); with `--task-runner dask` they are submitted to a Dask cluster, each
shard builds its own client on its worker, and every call also holds a slot of a Prefect global
concurrency limit, so `--concurrency` and `--rpm` hold across all workers. A run is recorded in the results
database from its start, so a crashed run is visible in `judgebench history` as "running"/"failed".
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import socket
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from prefect import flow, get_run_logger
from prefect.context import get_run_context
from prefect.states import State
from prefect.utilities.annotations import quote

from judgebench_flows.data import db
from judgebench_flows.core.artifact_keys import configuration_slug
from judgebench_flows.core.config import RunConfig
from judgebench_flows.data.dataset import data_file_in
from judgebench_flows.core.errors import RunFailed, UserError
from judgebench_flows.calls.global_limits import ensure_limits
from judgebench_flows.judging.shards import (
    JudgeSpec, Shard, announce_total, build_judge, close_runtimes, judge_spec, make_shards, request_report_of, settle_progress, with_prompts,
)
from judgebench_flows.scoring.metrics import Tally, pair_scores
from judgebench_flows.calls.llm import CallStats
from judgebench_flows.core.records import JudgmentRecord
from judgebench_flows.core.secrets import install_log_redaction
from judgebench_flows.scoring.results import build_results, correctness_of, jsonl_rows, regression_check, write_jsonl
from judgebench_flows.tasks.fetch import fetch_dataset
from judgebench_flows.tasks.judge import ShardIncomplete, shard_task
from judgebench_flows.tasks.load import index_dataset
from judgebench_flows.tasks.publish import judgment_rows, publish_results


def output_judge_name(config: RunConfig) -> str:
    """The judge's name in output file names: a custom judge is `custom_<Class>`, never its file path,
    which would put directories (or `..`) into the JSONL's file name."""
    if config.judge_template:
        return "custom_" + config.judge_template.rsplit(":", 1)[-1].replace("/", "_")
    return config.judge_type.replace(":", "_").replace("/", "_")


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


def measured_too_little(results: dict[str, Any], max_failed_fraction: float) -> str | None:
    """Why the run is not a measurement (failed + invalid judgments above the allowed share), or None."""
    judgments = results["usage"]["judgments"]
    bad = results["invalid"]["failed_judgments"] + results["invalid"]["invalid_judgments"]
    if not judgments or bad / judgments <= max_failed_fraction:
        return None
    reasons = "; ".join(f"{reason} ({count})" for reason, count in list(results["invalid"]["reasons"].items())[:3])
    return (f"{bad} of {judgments} judgments failed or were invalid ({bad / judgments:.1%}, more than "
            f"--max-failed-fraction {max_failed_fraction:g}): {reasons}")


def usage_of_calls(sent: CallStats | None) -> dict[str, int | None]:
    """Paid calls are the calls this run sent that were answered, counted where they were sent: a call
    made ahead of the flow for a shard that then came from Prefect's cache (another run finished it
    first) was paid for all the same, and a judgment from a cache paid nothing. Attempts are requests
    sent, retries included; errors are attempts that got no answer. Unknown on Dask (None)."""
    if sent is None:
        return {"attempts": None, "errors": None}
    return {"paid_calls": sent.answered, "attempts": sent.attempts, "errors": sent.attempts - sent.answered}


def shards_in_flight(config: RunConfig) -> int:
    """Enough shards at once to keep every connection busy (twice the calls the limit allows), and no
    more: memory then holds a few shards, not the whole dataset."""
    calls_per_shard = config.shard_size * (1 if config.single_game else 2)
    return max(2, math.ceil(2 * config.concurrency / calls_per_shard))


async def _judge_in_process(
    shards: list[Shard], spec: JudgeSpec, config: RunConfig,
    on_shard_done: Callable[[Shard, list[JudgmentRecord]], None],
) -> CallStats:
    """Judge every shard in this event loop; returns what the endpoint clients sent (`usage_of_calls`)."""
    task = shard_task(config.cache, config.shard_retries)
    pending = iter(shards)

    async def worker() -> None:
        """Takes the next shard when its last one is done: a few shards in flight, not a task per shard."""
        for shard in pending:
            # quote(): Prefect would otherwise walk every field of both on each of several engine steps.
            state = await task(quote(shard), quote(spec), return_state=True)
            records = await _shard_records(state)
            await asyncio.to_thread(on_shard_done, shard, records)

    workers = [asyncio.create_task(worker()) for _ in range(shards_in_flight(config))]
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


def _judge_on_dask(
    shards: list[Shard], spec: JudgeSpec, config: RunConfig,
    on_shard_done: Callable[[Shard, list[JudgmentRecord]], None],
) -> None:
    """Shards as Prefect task runs on the Dask cluster at `--dask-address`, a bounded number at a time,
    each handed to `on_shard_done` as soon as it finishes (as in-process). Runs in a thread of the flow:
    the Dask runner is synchronous.

    Workers rebuild the judge from the spec and read their shard from the data file themselves, so every
    path they get is absolute and checked on every worker before the first shard is sent. Each shard
    task runs in its own event loop on its worker, with its own endpoint client: the shared limit across
    shards and workers is the Prefect global concurrency limit named in the spec.
    """
    from distributed import as_completed

    spec, shards = _for_workers(spec, shards)
    task = shard_task(config.cache, config.shard_retries)
    with _dask_runner(config.dask_address or "") as runner:
        _check_workers(runner.client, config.dask_address or "", _paths_workers_need(spec, shards))
        in_flight = max(shards_in_flight(config), 2 * sum(runner.client.nthreads().values()))
        pending = iter(shards)
        submitted: dict[Any, Shard] = {}

        def submit_next() -> Any | None:
            shard = next(pending, None)
            if shard is None:
                return None
            # No quote() here: the Dask runner hands parameters to the worker's engine as they are.
            future = runner.submit(task, parameters={"shard": shard, "spec": spec}).wrapped_future
            submitted[future] = shard
            return future

        first = [f for f in (submit_next() for _ in range(in_flight)) if f is not None]
        finished = as_completed(first, loop=runner.client.loop)
        for future in finished:
            shard = submitted.pop(future)
            records = asyncio.run(_shard_records(_final_state(future)))
            on_shard_done(shard, records)
            following = submit_next()
            if following is not None:
                finished.add(following)


def _final_state(future: Any) -> State:
    """The task run's final state, as the worker returned it (a crashed worker raises here)."""
    outcome = future.result()
    if not isinstance(outcome, State):
        raise RuntimeError(f"a Dask worker returned {type(outcome).__name__} instead of the shard's final state")
    return outcome


def _dask_runner(address: str):
    """The Prefect Dask task runner, refusing early what cannot work: no Prefect server that workers
    can reach (a temporary one lives and dies with this process), or no scheduler at the address."""
    from prefect.settings import PREFECT_API_URL
    from prefect_dask import DaskTaskRunner

    if not PREFECT_API_URL.value():
        raise UserError(
            "--task-runner dask needs a Prefect server that the workers can reach: start one "
            "(`prefect server start`) and set PREFECT_API_URL here and on the workers"
        )
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        with socket.create_connection((parts.hostname or "", parts.port or 8786), timeout=5):
            pass
    except OSError as exc:
        raise UserError(f"--dask-address {address}: no Dask scheduler answers there ({exc.strerror or exc})") from None
    return DaskTaskRunner(address=address)


def _absolute(path: str) -> str:
    return str(Path(path).expanduser().resolve())


def _absolute_sqlite_url(url: str | None) -> str | None:
    """A relative SQLite path would name another file in each worker's working directory."""
    from sqlalchemy.engine import make_url

    if not url:
        return url
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:" or os.path.isabs(parsed.database):
        return url
    return parsed.set(database=_absolute(parsed.database)).render_as_string(hide_password=False)


def _for_workers(spec: JudgeSpec, shards: list[Shard]) -> tuple[JudgeSpec, list[Shard]]:
    """Every local path in the spec and the shards made absolute (as this machine sees them)."""
    template = spec.judge_template
    if template and ":" in template and template.rsplit(":", 1)[0].endswith(".py"):
        file, cls = template.rsplit(":", 1)
        template = f"{_absolute(file)}:{cls}"
    spec = spec.model_copy(update={
        "templates_dir": _absolute(spec.templates_dir) if spec.templates_dir else None,
        "judge_template": template,
        "external_judge_path": _absolute(spec.external_judge_path) if spec.external_judge_path else None,
        "db_url": _absolute_sqlite_url(spec.db_url),
    })
    return spec, [shard.model_copy(update={"path": _absolute(shard.path)}) for shard in shards]


def _paths_workers_need(spec: JudgeSpec, shards: list[Shard]) -> list[str]:
    """Files and directories each worker opens: data, templates, judge files, the SQLite directory."""
    from sqlalchemy.engine import make_url

    paths = {shard.path for shard in shards}
    paths |= {p for p in (spec.templates_dir, spec.external_judge_path) if p}
    if spec.judge_template and spec.judge_template.rsplit(":", 1)[0].endswith(".py"):
        paths.add(spec.judge_template.rsplit(":", 1)[0])
    if spec.db_url and spec.cache != "off":
        parsed = make_url(spec.db_url)
        if parsed.get_backend_name() == "sqlite" and parsed.database and parsed.database != ":memory:":
            paths.add(str(Path(parsed.database).parent))
    return sorted(paths)


def _worker_problems(paths: list[str], api_url: str) -> list[str]:
    """Run on each worker: what it cannot see or reach. Prefect sends the run's settings with each task,
    so a worker calls the API at the URL this process uses, and opens the same paths."""
    problems = [f"cannot see {path}" for path in paths if not os.path.exists(path)]
    api = urlsplit(api_url)
    try:
        with socket.create_connection((api.hostname or "", api.port or (443 if api.scheme == "https" else 80)), timeout=5):
            pass
    except OSError:
        problems.append(f"cannot reach the Prefect API at {api.scheme}://{api.hostname}:{api.port}")
    return problems


def _check_workers(client: Any, address: str, paths: list[str]) -> None:
    """At least one worker, able to import this project, see every path and reach the Prefect API,
    before any shard is sent: otherwise each shard would fail (and retry) on its own."""
    from prefect.settings import PREFECT_API_URL

    try:
        client.wait_for_workers(1, timeout=60)
    except TimeoutError:
        raise UserError(f"--dask-address {address}: no Dask worker joined the scheduler within 60 s") from None
    try:
        problems = client.run(_worker_problems, paths, PREFECT_API_URL.value())
    except Exception as exc:
        raise UserError(
            f"the Dask workers cannot run judgebench-flows code ({type(exc).__name__}: {exc}); "
            "install this project in the workers' environment"
        ) from None
    troubled = {worker: found for worker, found in problems.items() if found}
    if troubled:
        worker, found = next(iter(troubled.items()))
        raise UserError(
            f"Dask worker {worker} (and {len(troubled) - 1} more): {'; '.join(found[:3])}. Workers need the dataset, "
            "templates and SQLite database at the same paths (same machine or a shared filesystem) and a "
            "PREFECT_API_URL that works from every machine (not localhost)"
        )


@flow(name="judgebench", log_prints=False, persist_result=False)
async def judgebench_flow(config: RunConfig) -> dict[str, Any]:
    logger = get_run_logger()
    run_id = uuid.uuid4().hex
    started, clock_start = datetime.now(timezone.utc), time.perf_counter()
    flow_run_id = str(get_run_context().flow_run.id)  # type: ignore[union-attr]
    engine = db.open_database(config.db_url)
    install_log_redaction()  # also in a deployment's worker process: the API key in use never reaches a log
    await asyncio.to_thread(db.mark_crashed, engine)  # runs whose process was killed stop looking "running"

    if config.data_path:
        data_path, commit, repo_url, templates_dir = config.data_path, None, None, config.templates_dir
        data_file = Path(config.data_path).name
    else:
        checkout = await fetch_dataset(config.repo_url, config.ref, config.cache_dir)
        data_path, commit, repo_url = str(data_file_in(checkout, config.data_file)), checkout.commit, checkout.repo_url
        templates_dir = config.templates_dir or str(checkout.templates_dir)
        data_file = config.data_file
        logger.info("dataset %s at commit %s", repo_url, commit)

    spec = judge_spec(config, templates_dir)
    fetched = time.perf_counter()
    index = await index_dataset(data_path, config.max_samples, config.seed)
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
    config_key = config.config_key(commit, spec.judge_fingerprint)  # the commit judged and the prompts rendered
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
        host=socket.gethostname(),
        pid=os.getpid(),
        started=started,
        n_pairs=n_pairs,
        config_json=RunConfig.model_validate(config.public_dict()).model_dump_json(),
    )
    judge_name = output_judge_name(config)
    parts_dir = Path(config.output_dir) / ".parts" / run_id

    judge = build_judge(spec)
    tally = Tally()

    def on_shard_done(shard: Shard, records: list[JudgmentRecord]) -> None:
        """Write the shard's JSONL part and database rows now and add it to the tally; then its records
        are let go, so memory holds the shards in flight, not the run."""
        pairs = shard.load()
        write_jsonl(parts_dir / f"shard-{shard.index:06d}.jsonl", jsonl_rows(pairs, with_prompts(pairs, records, judge), judge_name))
        db.save_judgments(engine, judgment_rows(run_id, records))
        tally.add(records)
        settle_progress(shard.index, len(records))

    try:
        shards = make_shards(index, config.shard_size, config.shuffle_seed)
        logger.info("judging %d pairs in %d shards (%s)", n_pairs, len(shards), "single game" if config.single_game else "both orders")
        loaded = time.perf_counter()
        cpu_before = time.process_time()
        await ensure_limits(spec.global_limit, spec.concurrency, spec.global_rate_limit, spec.rpm)
        sent: CallStats | None = None  # on Dask the workers' clients send the calls: counted from records
        if config.task_runner == "dask":
            await asyncio.to_thread(_judge_on_dask, shards, spec, config, on_shard_done)
        else:
            sent = await _judge_in_process(shards, spec, config, on_shard_done)
        judged_at, judge_cpu = time.perf_counter(), time.process_time() - cpu_before
        judgments = tally.usage["judgments"]

        results = build_results(tally, header=header, seed=config.seed, bootstrap_resamples=config.bootstrap_resamples, skipped_rows=len(index.skipped))
        results["usage"].update(usage_of_calls(sent))
        previous = [r for r in db.list_runs(engine, limit=2, config_key=config_key, statuses=("completed", "regressed")) if r.run_id != run_id]
        results["regression"] = None
        if previous and config.bootstrap_resamples:
            baseline = pair_scores(db.run_verdicts(engine, previous[0].run_id))
            if baseline:
                results["regression"] = regression_check(
                    correctness_of(baseline), correctness_of(tally.scores), baseline_run_id=previous[0].run_id,
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
        if config.needs_endpoint:
            results["run"]["requests"] = request_report_of(spec)
        too_little = measured_too_little(results, config.max_failed_fraction)
        if too_little:
            results["run"]["status"] = "failed"
            results["run"]["failure"] = too_little
        results["run"]["timings"] = {
            "fetch_s": round(fetched - clock_start, 3),
            "load_s": round(loaded - fetched, 3),
            "judge_s": round(judged_at - loaded, 3),
            "judge_cpu_ms_per_judgment": round(1000 * judge_cpu / max(1, judgments), 3),
        }
        publish_started = time.perf_counter()
        paths = publish_results(  # quote(): Prefect would otherwise walk every record of the sample
            run_id, quote(results), quote(tally.report_sample), quote(sorted(parts_dir.glob("shard-*.jsonl"))),
            result_path=config.result_path, output_dir=config.output_dir, db_url=config.db_url,
            judge_name=judge_name, data_file=data_file, write_report=config.report,
            artifact_slug=configuration_slug(header["judge_type"], config.model, spec.base_url, data_file),
        )
        shutil.rmtree(parts_dir, ignore_errors=True)
        results["run"]["timings"]["publish_s"] = round(time.perf_counter() - publish_started, 3)
        results["outputs"] = paths
        regressed = bool(results["regression"] and results["regression"].get("regressed"))
        overall = results["overall_accuracy"]
        db.update_run(
            engine, run_id, status="failed" if too_little else "regressed" if regressed else "completed", finished=finished,
            overall_accuracy=overall["accuracy"], ci_low=overall.get("ci_low"), ci_high=overall.get("ci_high"),
            message=too_little or (results["regression"]["message"] if results["regression"] else None),
            results_json=json.dumps(results, default=str),
        )
        if regressed:
            logger.warning(results["regression"]["message"])
        if too_little:  # published above, so it can be inspected; the run itself is not a measurement
            raise RunFailed(too_little, results)
        return results
    except BaseException as exc:
        db.update_run(engine, run_id, status="failed", finished=datetime.now(timezone.utc), message=str(exc)[:500] if isinstance(exc, UserError) else type(exc).__name__)
        raise


__all__ = ["judgebench_flow", "make_shards"]

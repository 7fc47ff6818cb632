"""Shards on a Dask cluster (`--task-runner dask --dask-address ...`): submitted as Prefect task runs a
bounded number at a time, after checking that every worker can see the files and reach the Prefect API.

Workers rebuild the judge from the spec and read their shard from the data file themselves, so every path
they get is made absolute here; the limit shared across workers is the Prefect global concurrency limit
named in the spec.

Each worker learns request adjustments (`request_rules`: a parameter its model rejects) in its own process;
every shard's result carries what its worker knew, merged here so results.json and the report show them
as in-process, and every shard sent after that carries them to its worker, which then starts without
paying the same 400 again.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from distributed.diagnostics.plugin import WorkerPlugin
from prefect.states import State
from typing_extensions import NotRequired, TypedDict

from judgebench_flows.calls.caller import CallStats
from judgebench_flows.calls.global_limits import POLL_MAX_SECONDS, POLL_MIN_SECONDS, SlotLeases
from judgebench_flows.calls.request_rules import Adjustment
from judgebench_flows.core.config import RunConfig
from judgebench_flows.core.errors import UserError
from judgebench_flows.core.net import connect_error
from judgebench_flows.core.records import JudgmentRecord
from judgebench_flows.core.run_logger import run_logger
from judgebench_flows.flows.shard_states import ShardDone, shard_records, shards_in_flight
from judgebench_flows.judging.run_context import WORKER_PLUGIN, RunContext
from judgebench_flows.judging.shards import JudgeSpec, Shard, adjustments_of, heard_on_worker, merge_adjustments
from judgebench_flows.tasks.judge import shard_task

QUIET_NOTICE_SECONDS = 60.0  # no shard finished this long: the run says what it waits for (then at 2x, 4x, ...)


class ShardParameters(TypedDict):
    """A shard task's parameters (`tasks.judge.shard_task`), as the Dask runner submits them."""

    shard: Shard
    spec: JudgeSpec
    known: NotRequired[list[Adjustment]]  # request adjustments learned so far (`adjustments_of`)


def judge_on_dask(
    shards: list[Shard],
    spec: JudgeSpec,
    config: RunConfig,
    on_shard_done: ShardDone,
    run: RunContext,
    stop: threading.Event | None = None,
) -> None:
    """Shards as Prefect task runs on the Dask cluster at `--dask-address`, a bounded number at a time,
    each handed to `on_shard_done` as soon as it finishes (as in-process). Runs in a thread of the flow:
    the Dask runner is synchronous.

    Workers rebuild the judge from the spec and read their shard from the data file themselves, so every
    path they get is absolute and checked on every worker before the first shard is sent. Each shard
    task runs in its own event loop on its worker, with its own endpoint client: the shared limit across
    shards and workers is the Prefect global concurrency limit named in the spec, whose slots this
    process takes for each shard (`_judge_all`).

    Each worker holds the run's context for its shard tasks (`RunOnWorkers`, for the run only). Request
    adjustments a shard's worker learned come back with its records and are merged into `run`'s here
    (`request_report_of` then reports them); shards sent afterwards take them along (`known`).
    `stop` set (the run was cancelled: Ctrl-C, SIGTERM) cancels the shards in flight and gives their
    slots back.
    """
    spec, shards = _for_workers(spec, shards)
    task = shard_task(config.endpoint.cache, config.shard_retries, config.endpoint.cache_max_age)
    with _dask_runner(config.dask_address or "") as runner:
        _check_workers(runner.client, config.dask_address or "", _paths_workers_need(spec, shards))
        slots = SlotLeases(spec.global_limit) if spec.global_limit else None
        plugin = WORKER_PLUGIN.format(run_id=spec.run_id)
        runner.client.register_plugin(RunOnWorkers(), name=plugin)
        try:
            _judge_all(runner, task, shards, spec, config, on_shard_done, run, slots, stop or threading.Event())
        finally:
            if slots is not None:
                slots.close()
            runner.client.unregister_worker_plugin(plugin)


def _threads(client: Any) -> int:
    """Worker threads now (workers come and go: a lost worker's share goes to the others' next shards)."""
    return max(1, sum(client.nthreads().values()))


def _judge_all(
    runner: Any,
    task: Any,
    shards: list[Shard],
    spec: JudgeSpec,
    config: RunConfig,
    on_shard_done: ShardDone,
    run: RunContext,
    slots: SlotLeases | None,
    stop: threading.Event,
) -> None:
    """Submit shards while workers have room (and, with the global limit, while slots are free), hand
    each to `on_shard_done` as it finishes, and give its slots back then (`_Dispatch`); until all are
    done, or `stop` cancels those in flight. Dask's futures are looked at without blocking, at a poll
    that backs off while none finishes (so a stop and free slots are seen within POLL_MAX_SECONDS)."""
    dispatch = _Dispatch(runner, task, shards, spec, config, run, slots)
    quiet = _QuietWatch()
    dispatch.fill()
    idle = POLL_MIN_SECONDS
    while dispatch.busy:
        if stop.is_set():
            dispatch.cancel()
            return
        done = dispatch.ready()
        if not done:  # shards still judging, or the limit full of other runs' slots: look for room again
            time.sleep(idle)
            idle = min(POLL_MAX_SECONDS, 2 * idle)
            dispatch.fill()
            quiet.check(dispatch)
            continue
        idle = POLL_MIN_SECONDS
        quiet.reset()
        for future in done:
            on_shard_done(*dispatch.collect(future))
        dispatch.fill()


class _QuietWatch:
    """Says, in the run's log, what the run waits for when no shard has finished for a while (after
    QUIET_NOTICE_SECONDS, then twice as long each time): shards on the workers, or slots other holders
    keep. A run on a cluster must never wait in silence."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.since, self.next_notice = time.monotonic(), QUIET_NOTICE_SECONDS

    def check(self, dispatch: _Dispatch) -> None:
        quiet_for = time.monotonic() - self.since
        if quiet_for < self.next_notice:
            return
        self.next_notice *= 2
        run_logger(__name__).warning("no shard finished for %.0f s: %s", quiet_for, dispatch.waiting_on())


class _Dispatch:
    """One run's shards on a Dask cluster: which wait, which are in flight (with the slots each holds).

    With the global limit, this process holds each shard's slots: `--concurrency` split over the worker
    threads there are when it is sent, its share being the shard's own limit on the worker. A worker that
    dies holds none: Dask runs its shards elsewhere, under the slots already taken for them.
    """

    def __init__(
        self,
        runner: Any,
        task: Any,
        shards: list[Shard],
        spec: JudgeSpec,
        config: RunConfig,
        run: RunContext,
        slots: SlotLeases | None,
    ) -> None:
        from distributed import as_completed

        self.runner, self.task, self.spec, self.run, self.slots = runner, task, spec, run, slots
        self.client = runner.client
        self.pending = list(reversed(shards))
        self.submitted: dict[Any, tuple[Shard, int | None]] = {}
        self.finished = as_completed([], loop=self.client.loop)
        self.without_limit = max(shards_in_flight(config), 2 * _threads(self.client))
        self.starved = False  # the last try for slots found none free

    @property
    def busy(self) -> bool:
        return bool(self.submitted or self.pending)

    def submit(self, shard: Shard, shard_spec: JudgeSpec, handle: int | None) -> None:
        # No quote() here: the Dask runner hands parameters to the worker's engine as they are.
        parameters: ShardParameters = {"shard": shard, "spec": shard_spec}
        known = adjustments_of(self.spec, self.run.calls)  # learned on the workers so far, merged below
        if known:
            parameters["known"] = known
        future = self.runner.submit(self.task, parameters=dict(parameters)).wrapped_future
        self.submitted[future] = (shard, handle)
        self.finished.add(future)

    def fill(self) -> None:
        """Submit waiting shards while the workers have room (and slots are free, with the global limit)."""
        spec, slots = self.spec, self.slots
        while self.pending:
            if slots is None:
                if len(self.submitted) >= self.without_limit:
                    return
                self.submit(self.pending.pop(), spec, None)
                continue
            threads = _threads(self.client)
            if len(self.submitted) >= threads:
                return
            share = max(1, spec.endpoint.concurrency // threads)
            handle = slots.try_take(share)
            self.starved = handle is None
            if handle is None:
                slots.raise_if_unreachable()
                return
            endpoint = spec.endpoint.model_copy(update={"concurrency": share})
            self.submit(self.pending.pop(), spec.model_copy(update={"endpoint": endpoint}), handle)

    def waiting_on(self) -> str:
        """What the run waits for now, in a phrase for its log."""
        said = f"{len(self.submitted)} shards in flight on the Dask workers, {len(self.pending)} waiting"
        if self.slots is not None and self.starved:
            said += f"; no free slots of the global concurrency limit '{self.slots.name}' (other runs hold them)"
        return said

    def ready(self) -> list[Any]:
        """The futures finished since last asked (none: an empty list, at once)."""
        return self.finished.next_batch(block=False) if self.finished.has_ready() else []

    def cancel(self) -> None:
        self.client.cancel(list(self.submitted))

    def collect(self, future: Any) -> tuple[Shard, list[JudgmentRecord]]:
        """A finished shard and its records; its slots given back, its worker's adjustments and calls heard
        merged into the run."""
        shard, handle = self.submitted.pop(future)
        try:
            records = asyncio.run(shard_records(_final_state(future)))
        finally:
            if self.slots is not None and handle is not None:
                self.slots.give_back(handle)
        # A shard judged on a worker (complete or not) carries its worker's adjustments; one served from
        # Prefect's cache carries none, as in-process.
        merge_adjustments(self.spec, self.run.calls, getattr(records, "adjustments", ()))
        self.run.calls.heard_on_workers.setdefault(self.spec.run_id or "", CallStats()).add(heard_on_worker(records))
        return shard, records


class RunOnWorkers(WorkerPlugin):
    """A run's context on each Dask worker, for the run only (`run_context.WORKER_PLUGIN`): the worker's
    shard tasks share its learned request rules and Vertex token, each in its own event loop."""

    def setup(self, worker: Any) -> None:
        self.run = RunContext()


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
    problem = connect_error(address if "://" in address else f"tcp://{address}", default_port=8786)
    if problem is not None:
        raise UserError(f"--dask-address {address}: no Dask scheduler answers there ({problem})") from None
    return DaskTaskRunner(address=address)


def _absolute(path: str) -> str:
    return str(Path(path).expanduser().resolve())


def _absolute_sqlite_url(url: str | None) -> str | None:
    """A relative SQLite path would name another file in each worker's working directory."""
    from sqlalchemy.engine import make_url

    if not url:
        return url
    parsed = make_url(url)
    if (
        parsed.get_backend_name() != "sqlite"
        or not parsed.database
        or parsed.database == ":memory:"
        or os.path.isabs(parsed.database)
    ):
        return url
    return parsed.set(database=_absolute(parsed.database)).render_as_string(hide_password=False)


def _for_workers(spec: JudgeSpec, shards: list[Shard]) -> tuple[JudgeSpec, list[Shard]]:
    """Every local path in the spec and the shards made absolute (as this machine sees them)."""
    template = spec.judge_template
    if template and ":" in template and template.rsplit(":", 1)[0].endswith(".py"):
        file, cls = template.rsplit(":", 1)
        template = f"{_absolute(file)}:{cls}"
    spec = spec.model_copy(
        update={
            "templates_dir": _absolute(spec.templates_dir) if spec.templates_dir else None,
            "judge_template": template,
            "external_judge_path": _absolute(spec.external_judge_path) if spec.external_judge_path else None,
            "db_url": _absolute_sqlite_url(spec.db_url),
        }
    )
    return spec, [shard.model_copy(update={"path": _absolute(shard.path)}) for shard in shards]


def _paths_workers_need(spec: JudgeSpec, shards: list[Shard]) -> list[str]:
    """Files and directories each worker opens: data, templates, judge files, the SQLite directory."""
    from sqlalchemy.engine import make_url

    paths = {shard.path for shard in shards}
    paths |= {p for p in (spec.templates_dir, spec.external_judge_path) if p}
    if spec.judge_template and spec.judge_template.rsplit(":", 1)[0].endswith(".py"):
        paths.add(spec.judge_template.rsplit(":", 1)[0])
    if spec.db_url and spec.endpoint.cache != "off":
        parsed = make_url(spec.db_url)
        if parsed.get_backend_name() == "sqlite" and parsed.database and parsed.database != ":memory:":
            paths.add(str(Path(parsed.database).parent))
    return sorted(paths)


def _worker_problems(paths: list[str], api_url: str) -> list[str]:
    """Run on each worker: what it cannot see or reach. Prefect sends the run's settings with each task,
    so a worker calls the API at the URL this process uses, and opens the same paths."""
    problems = [f"cannot see {path}" for path in paths if not os.path.exists(path)]
    if connect_error(api_url) is not None:
        api = urlsplit(api_url)
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

"""A night bigger than one worker (`cells: pool` in the matrix): each cell its own run of the ad-hoc
deployment, so the cells spread over the work pool's workers, on as many machines as serve the pool.

In one process the cells on an endpoint share its limit in memory (the night's run context); across
processes that limit lives in the Prefect server: one global concurrency limit (and one requests-per-minute
limit when the matrix gives an rpm) per endpoint, named by `endpoint_limit_names` (provider and URL,
without the model or any credential), created or updated by the night with the matrix's values before the
first cell starts. Each cell run takes its run's slots of it (`global_limit`: flows/shard_runs.py), so the
endpoint never sees more calls at once than its `concurrency`, whichever worker runs which cell.

A cell run's parameters carry the cell's whole configuration as the night resolved it (the matrix with
the night's overrides, the night whose budget it reserves from, the deadline, the limit's names): public URLs and the names of keys,
never a key nor a path that must resolve on the worker. Keys, and the credentials of a database or
repository URL, come from the worker's environment (`OPENAI_API_KEY` or the variable the matrix names,
`JUDGEBENCH_DB_URL`, `JUDGEBENCH_REPO_URL`) or Prefect Secret blocks, as for any ad-hoc run. So workers on
machines that share nothing but the Prefect server, the results database and a bucket run any cell:
`output_root` is then the bucket (data/storage.py), which the night reads each cell's results.json back
from into the same outcome as an in-process cell, so the summary artifact, events, alerts and regression
checks are the same. Each cell run reports what its endpoint saw (calls, busy time, most in flight) as a
table artifact the night sums into its per-endpoint figures, as in-process.

The cell run's side is `judge_pool_cell`: what the ad-hoc flow (flows/adhoc_flow.py) does when the night
gives it a `cell` instead of plain parameters.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any
from uuid import UUID

import httpx
from pydantic import BaseModel, ValidationError

from judgebench_flows.calls.global_limits import endpoint_limit_names, ensure_limits
from judgebench_flows.calls.limits import EndpointUse, union_seconds
from judgebench_flows.core.config import RunConfig
from judgebench_flows.core.errors import UserError
from judgebench_flows.core.run_logger import run_logger
from judgebench_flows.core.run_setup import RunSetUp
from judgebench_flows.data.night_budget import NightBudget
from judgebench_flows.flows.run_pages import night_date
from judgebench_flows.judging.matrix import MatrixEntry, endpoint_of
from judgebench_flows.judging.run_context import NightShare, RunCalls, RunContext, running
from judgebench_flows.scoring.run_results import RunResults, published_results

if TYPE_CHECKING:
    from prefect.client.schemas.objects import FlowRun
    from prefect.states import State

    from judgebench_flows.scoring.cell_outcome import CellOutcome

ADHOC_DEPLOYMENT = "judgebench-adhoc/adhoc"  # the ad-hoc deployment of prefect.yaml and deployments/deploy.py
POLL_SECONDS = 2.0  # how often the night asks the server how its cell runs are doing
# How long the night waits for its running cell runs: until its deadline plus the time the deadline's
# synchronous judging may take (`after_deadline_minutes`), else this long after the cells start. A cell
# still running then is cancelled; one not started by the deadline is cancelled at the deadline.
AFTER_DEADLINE_SECONDS = 3600.0  # the matrix's `after_deadline_minutes` default
UNBOUNDED_NIGHT_SECONDS = 24 * 3600.0
# How long a cell run asked to stop may take to stop (its worker kills its process) before the night marks
# it Cancelled itself.
CANCEL_WAIT_SECONDS = 120.0
# A cell run Crashed (its worker's machine died) is run again by the crash-recovery automation
# (`judgebench automations install`) a few seconds later, under the same id: the night waits this long
# for that before it takes the crash as the cell's end.
CRASH_GRACE_SECONDS = 60.0
# A cell run a worker took (Pending) but whose flow never began (no Running state, so no heartbeat for the
# crash automations to miss) is taken as crashed after this long: its worker or its process died while it
# downloaded or imported the flow. The night then schedules it again (`AwaitingRetry`, same id), at most
# MAX_PENDING_RESCHEDULES times, then marks it Crashed. The matrix's `pending_timeout_minutes` default:
# generous, since a worker may pull an image or install packages before the flow's import.
PENDING_TIMEOUT_SECONDS = 15 * 60.0
MAX_PENDING_RESCHEDULES = 2


class PoolCell(BaseModel):
    """The cell an ad-hoc run judges: its whole configuration as the night resolved it (a RunConfig's
    JSON: public URLs, key names, never a key) with what the night decided for it."""

    name: str
    config: dict[str, Any]
    max_cost: float | None = None  # the cell's own budget (its model's, or the night's whole budget)
    night_budget: str | None = None  # the night whose budget (data/night_budget.py) the cell reserves from
    batch_deadline: str | None = None  # the night's deadline (ISO 8601), for a batch cell
    limit: str | None = None  # the endpoint's global concurrency limit; None: a judge that calls none
    rate_limit: str | None = None  # the endpoint's requests-per-minute limit


def pool_cell_entry(cell: PoolCell) -> MatrixEntry:
    """The cell's configuration as the night's own process would run it, with its budget, deadline and
    the endpoint's global limit applied."""
    try:
        config = RunConfig.model_validate(cell.config)
    except ValidationError as exc:
        raise UserError(f"cell {cell.name}: not a configuration: {exc.errors()[0]['msg']}") from None
    entry = MatrixEntry(name=cell.name, config=config, endpoint=endpoint_of(config))
    endpoint = config.endpoint
    if cell.batch_deadline and endpoint.batch:
        endpoint = endpoint.model_copy(update={"batch_deadline": cell.batch_deadline})
    max_cost = cell.max_cost if cell.max_cost is not None else config.max_cost
    global_limit = bool(cell.limit) or config.global_limit
    update = {"endpoint": endpoint, "global_limit": global_limit, "max_cost": max_cost}
    return entry.model_copy(update={"config": config.model_copy(update=update)})


async def judge_pool_cell(cell: PoolCell, retry_delay_seconds: float) -> tuple[MatrixEntry, CellOutcome, State]:
    """A cell run of a pool night, on whichever worker took it: the cell's configuration judged under its
    endpoint's global limit (shared with the night's other cells on any worker), its worst case reserved
    from the night's budget before any call and what it spent settled after (data/night_budget.py), and
    what its endpoint saw reported for the night (`report_endpoint_usage`)."""
    from prefect.runtime import flow_run

    from judgebench_flows.flows.cell_preflight import refusal
    from judgebench_flows.flows.cell_runs import judge_cell

    entry = pool_cell_entry(cell)
    if (refused := await refusal(entry)) is not None:  # checked on this worker, where its keys are
        return entry, *refused
    # the endpoint's limit, shared with the night's other cells on any worker
    held = (cell.limit, cell.rate_limit or f"{cell.limit}-rpm") if cell.limit else None
    # a pool night's budget: the cell reserves its worst case there before any call (data/night_budget.py)
    budget = NightBudget(entry.config.db_url, cell.night_budget, cell.name) if cell.night_budget else None
    # also what its endpoint saw, for the night; its model's retirement notice is in the night's log
    said = RunSetUp(retirement_said=True)  # (`nightly.retirements`, once per model)
    cell_run = RunContext(calls=RunCalls(held_limits=held), night=NightShare(budget=budget), setup=said)
    try:
        with running(cell_run):
            outcome, state = await judge_cell(entry, retry_delay_seconds, run_name=flow_run.name or None)
    finally:
        spent = cell_run.night.spend
        if budget is not None and spent is not None:  # what it spent counts; the rest back
            await asyncio.to_thread(budget.settle, spent.spent)
    await report_endpoint_usage(cell_run.calls.state.endpoint_usage(), cell_run.calls.state.endpoint_periods())
    return entry, outcome, state


async def ensure_endpoint_limits(entries: list[MatrixEntry]) -> dict[str, tuple[str, str | None]]:
    """Each endpoint's global limits, created or set to the matrix's values before any cell starts:
    endpoint -> (concurrency limit, rate limit or None)."""
    names: dict[str, tuple[str, str | None]] = {}
    for entry in entries:
        if not entry.config.needs_endpoint or entry.endpoint in names:
            continue
        concurrency_name, rate_name = endpoint_limit_names(entry.endpoint)
        settings = entry.config.endpoint
        await ensure_limits(concurrency_name, settings.concurrency, rate_name, settings.rpm)
        names[entry.endpoint] = (concurrency_name, rate_name if settings.rpm else None)
    return names


async def earlier_cell_runs(deployment: str) -> dict[str, FlowRun]:
    """This night's cell runs from an earlier attempt (a night rescheduled after its process died, or
    retried), by cell name, that finished well or are still going: the newest of each. They are waited
    for again instead of judging their cells a second time beside them."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterDeploymentId, FlowRunFilterParentFlowRunId
    from prefect.runtime import flow_run

    night = flow_run.id
    if night is None:
        return {}
    async with get_client() as client:
        deployment_id = (await client.read_deployment_by_name(deployment)).id
        runs = await client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[UUID(night)]),
                deployment_id=FlowRunFilterDeploymentId(any_=[deployment_id]),
            )
        )
    kept: dict[str, FlowRun] = {}
    for run in sorted(runs, key=lambda r: r.created or datetime.min.replace(tzinfo=timezone.utc)):
        name = ((run.parameters or {}).get("cell") or {}).get("name")
        if name and run.state is not None and (run.state.is_completed() or not run.state.is_final()):
            kept[name] = run
    return kept


ENDPOINT_USAGE_KEY = "judgebench-cell-endpoints"  # a cell run's table artifact: what its endpoints saw
BUSY_PERIODS_KEY = "judgebench-cell-busy"  # a cell run's table artifact: when each endpoint had calls in flight


async def report_endpoint_usage(usage: dict[str, EndpointUse], periods: dict[str, list[tuple[float, float]]]) -> None:
    """A cell run's endpoint figures (calls, busy time, most in flight), one row per endpoint, and its
    busy periods (wall-clock seconds), one row per period, as table artifacts of its flow run: the night
    reads them through the server, the one thing every worker shares."""
    from prefect.artifacts import acreate_table_artifact

    rows = [{"endpoint": endpoint, **figures} for endpoint, figures in usage.items()]
    await acreate_table_artifact(rows, key=ENDPOINT_USAGE_KEY, description="what this cell's endpoints saw")
    spans = [
        {"endpoint": endpoint, "start": round(start, 3), "end": round(end, 3)}
        for endpoint, each in periods.items()
        for start, end in each
    ]
    await acreate_table_artifact(
        spans, key=BUSY_PERIODS_KEY, description="when this cell's endpoints had calls in flight (Unix time, s)"
    )


async def _newest_artifacts(client: Any, key: str, run_ids: list[UUID]) -> list[list[dict[str, Any]]]:
    """Each cell run's last table artifact under `key` (a cell run run again reports again: its last
    report counts), as rows."""
    import json

    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey

    artifacts = await client.read_artifacts(
        artifact_filter=ArtifactFilter(
            key=ArtifactFilterKey(any_=[key]), flow_run_id=ArtifactFilterFlowRunId(any_=run_ids)
        )
    )
    newest: dict[UUID, Any] = {}
    for artifact in sorted(artifacts, key=lambda a: a.created or datetime.min.replace(tzinfo=timezone.utc)):
        if artifact.flow_run_id is not None:
            newest[artifact.flow_run_id] = artifact
    return [json.loads(a.data) if isinstance(a.data, str) else (a.data or []) for a in newest.values()]


async def pool_endpoint_usage(run_ids: list[UUID]) -> dict[str, EndpointUse]:
    """The night's per-endpoint figures from its cell runs' artifacts, as in-process: calls summed, the
    most in flight the largest of any cell run, and busy time the union of the cell runs' busy periods on
    the endpoint (seconds in which it had at least one call in flight: overlapping cells count once)."""
    from prefect.client.orchestration import get_client

    if not run_ids:
        return {}
    async with get_client() as client:
        reports = await _newest_artifacts(client, ENDPOINT_USAGE_KEY, run_ids)
        spans = await _newest_artifacts(client, BUSY_PERIODS_KEY, run_ids)
    periods: dict[str, list[tuple[float, float]]] = {}
    for rows in spans:
        for row in rows:
            periods.setdefault(row["endpoint"], []).append((float(row["start"]), float(row["end"])))
    usage: dict[str, EndpointUse] = {}
    for rows in reports:
        for row in rows:
            known = usage.setdefault(
                row["endpoint"], {"calls": 0, "busy_s": 0.0, "max_in_flight": 0, "concurrency": row["concurrency"]}
            )
            known["calls"] += int(row["calls"])
            known["busy_s"] = round(known["busy_s"] + float(row["busy_s"]), 3)  # a cell run without periods
            known["max_in_flight"] = max(known["max_in_flight"], int(row["max_in_flight"]))
    for endpoint, known in usage.items():
        if periods.get(endpoint):
            known["busy_s"] = round(union_seconds(periods[endpoint]), 3)
    return usage


def _night_key() -> str:
    """This attempt of this night: its flow run and run count."""
    from prefect.context import get_run_context

    night = get_run_context().flow_run  # type: ignore[union-attr]
    return f"{night.id}:{night.run_count}" if night is not None else f"night:{time.time_ns()}"


def night_bound(deadline: datetime | None, after_deadline_s: float = AFTER_DEADLINE_SECONDS) -> datetime:
    """Until when the night waits for its running cell runs: `after_deadline_s` past its deadline."""
    if deadline is not None:
        return deadline + timedelta(seconds=after_deadline_s)
    return datetime.now(timezone.utc) + timedelta(seconds=UNBOUNDED_NIGHT_SECONDS)


class ServerLost(Exception):
    """The Prefect server did not answer the night for longer than it waits for one (exit 5's cause)."""


class CellRunWatch:
    """What the night has done to its cell runs at its deadline and its bound (`wait_for_runs`)."""

    def __init__(
        self, deadline: datetime | None, bound: datetime, pending_timeout_s: float = PENDING_TIMEOUT_SECONDS
    ) -> None:
        self.deadline, self.bound, self.pending_timeout_s = deadline, bound, pending_timeout_s
        self.cancel_asked: dict[UUID, float] = {}  # run -> when the night asked it to stop (monotonic)
        self.reasons: dict[UUID, str] = {}  # run -> why the night stopped it
        self.pending_since: dict[UUID, tuple[UUID, float]] = {}  # run -> (its Pending state, first seen)
        self.pending_retries: dict[UUID, int] = {}  # run -> how often the night scheduled it again

    def explained(self, run: FlowRun) -> FlowRun:
        """A run the night stopped, with the night's reason as its state's message (its worker's own
        message, "Flow run was cancelled successfully.", says nothing of why)."""
        reason = self.reasons.get(run.id)
        if reason is None or run.state is None or reason in (run.state.message or ""):
            return run
        return run.model_copy(update={"state": run.state.model_copy(update={"message": reason})})

    async def act(self, client: Any, run: FlowRun) -> FlowRun | None:
        """The run as it ended once the night ended it, else None (it goes on)."""
        from prefect.states import Cancelled, Cancelling

        now, state = datetime.now(timezone.utc), run.state
        if state is None:
            return None
        deadline = self.deadline
        late = deadline is not None and now >= deadline
        if deadline is not None and late and run.id not in self.cancel_asked and not state.is_running():
            # not started by the deadline: never started now. A scheduled run ends at once (a worker that
            # picks it up finds it ended); one a worker is starting is stopped by that worker.
            message = f"not started by the night's deadline {deadline.isoformat(timespec='seconds')}"
            self.reasons[run.id] = message
            if state.is_scheduled():
                await client.set_flow_run_state(run.id, Cancelled(message=message), force=True)
                return await client.read_flow_run(run.id)
            await client.set_flow_run_state(run.id, Cancelling(message=message), force=True)
            self.cancel_asked[run.id] = time.monotonic()
            return None
        if run.id not in self.cancel_asked and await self.stuck_pending(client, run):
            return None
        if now >= self.bound and run.id not in self.cancel_asked:
            if self.deadline is not None:
                minutes = (self.bound - self.deadline).total_seconds() / 60
                past = f"{minutes:g} min past the night's deadline {self.deadline.isoformat(timespec='seconds')}"
            else:
                past = f"{UNBOUNDED_NIGHT_SECONDS / 3600:g} h after the night submitted it"
            message = f"cancelled: still running {past}"
            await client.set_flow_run_state(run.id, Cancelling(message=message), force=True)
            self.cancel_asked[run.id], self.reasons[run.id] = time.monotonic(), message
            return None
        if run.id in self.cancel_asked and time.monotonic() - self.cancel_asked[run.id] > CANCEL_WAIT_SECONDS:
            # its worker did not stop it (gone, or the process hangs): the run ends here, never left running
            message = f"{state.message or 'cancelled'}; its worker did not stop it within {CANCEL_WAIT_SECONDS:.0f} s"
            await client.set_flow_run_state(run.id, Cancelled(message=message), force=True)
            return await client.read_flow_run(run.id)
        return None

    async def stuck_pending(self, client: Any, run: FlowRun) -> bool:
        """Whether the run stayed Pending (a worker took it; its flow never began, so it sends no heartbeat)
        for `pending_timeout_s` since the night first saw that state, and was taken as crashed: scheduled
        again under the same id for any worker, at most MAX_PENDING_RESCHEDULES times, else marked Crashed
        (the night's crash grace then ends the cell)."""
        from prefect.states import AwaitingRetry, Crashed

        state = run.state
        if state is None or not state.is_pending():
            self.pending_since.pop(run.id, None)
            return False
        seen = self.pending_since.get(run.id)
        if seen is None or seen[0] != state.id:  # a new Pending state (a worker took it again): a new window
            self.pending_since[run.id] = (state.id, time.monotonic())
            return False
        if time.monotonic() - seen[1] < self.pending_timeout_s:
            return False
        del self.pending_since[run.id]
        why = (
            f"Pending for {self.pending_timeout_s:.0f} s without starting (no heartbeat): its worker or its "
            "process died while downloading or importing the flow"
        )
        retries = self.pending_retries.get(run.id, 0)
        if retries >= MAX_PENDING_RESCHEDULES:
            message = f"{why}; scheduled again {retries} times already"
            await client.set_flow_run_state(run.id, Crashed(message=message), force=True)
        else:
            self.pending_retries[run.id] = retries + 1
            message = (
                f"taken as crashed: {why}; scheduled again for any worker ({retries + 1} of {MAX_PENDING_RESCHEDULES})"
            )
            await client.set_flow_run_state(run.id, AwaitingRetry(message=message), force=True)
        run_logger(__name__).warning("%s: %s", run.name, message)
        return True


async def wait_for_runs(
    run_ids: list[UUID],
    deadline: datetime | None,
    after_deadline_s: float = AFTER_DEADLINE_SECONDS,
    lost_after: float | None = None,
    pending_timeout_s: float = PENDING_TIMEOUT_SECONDS,
) -> dict[UUID, FlowRun]:
    """Every cell run as it ended, asking every `POLL_SECONDS`. At the night's `deadline` the runs no
    worker has started are cancelled (the night starts nothing more); the runs still going
    `after_deadline_s` later are asked to stop (their workers kill them) and waited for until they have,
    at most `CANCEL_WAIT_SECONDS`, then marked Cancelled: no cell run is left running. A server that stops
    answering (restarted, or its machine rebooting) is waited for up to `lost_after` seconds
    (`--server-lost-timeout`'s default), then `ServerLost`: the cell runs keep their own state on the
    server, and a night run again waits for them. A run Pending longer than `pending_timeout_s` (its
    worker died before its flow began) is scheduled again (`CellRunWatch.stuck_pending`)."""
    from prefect.client.orchestration import get_client

    lost_after = server_lost_seconds() if lost_after is None else lost_after
    watch = CellRunWatch(deadline, night_bound(deadline, after_deadline_s), pending_timeout_s)
    finished: dict[UUID, FlowRun] = {}
    crashed_since: dict[UUID, float] = {}
    silent_since: float | None = None
    while True:
        try:
            async with get_client() as client:  # a new client each round: one that lost its server stays lost
                for run_id in [r for r in run_ids if r not in finished]:
                    run = await client.read_flow_run(run_id)
                    if _may_be_run_again(run, crashed_since):
                        continue
                    ended = run if run.state is not None and run.state.is_final() else await watch.act(client, run)
                    if ended is not None:
                        finished[run_id] = watch.explained(ended)
                if len(finished) == len(run_ids):
                    return finished
            silent_since = None
        except (OSError, httpx.HTTPError) as exc:
            silent_since = silent_since or time.monotonic()
            if time.monotonic() - silent_since > lost_after:
                raise ServerLost(
                    f"the Prefect server did not answer for {lost_after:.0f} s while the night waited for its "
                    f"cell runs ({type(exc).__name__}); they keep running: run the night again to wait for them"
                ) from None
        await asyncio.sleep(POLL_SECONDS)


def _may_be_run_again(run: FlowRun, crashed_since: dict[UUID, float]) -> bool:
    """Whether a Crashed cell run is still within CRASH_GRACE_SECONDS of the night first seeing it so
    (the automation may yet run it again); a run seen in any other state starts its grace afresh."""
    if run.state is None or not run.state.is_crashed():
        crashed_since.pop(run.id, None)
        return False
    first = crashed_since.setdefault(run.id, time.monotonic())
    return time.monotonic() - first < CRASH_GRACE_SECONDS


def server_lost_seconds() -> float:
    """How long the night waits for a Prefect server that stopped answering: $JUDGEBENCH_SERVER_LOST_TIMEOUT,
    else 120 s, as a run does."""
    import os

    from judgebench_flows.core.config import DEFAULT_SERVER_LOST_SECONDS

    try:
        return max(0.0, float(os.environ.get("JUDGEBENCH_SERVER_LOST_TIMEOUT", DEFAULT_SERVER_LOST_SECONDS)))
    except ValueError:
        return DEFAULT_SERVER_LOST_SECONDS


async def _results_of_run(entry: MatrixEntry, run_id: UUID) -> RunResults | None:
    """The cell's results.json if this cell run's judging subflow wrote it (not an earlier night's)."""
    for results in published_results(entry.config.result_path):  # each run of the cell: its own folder
        subflow_id = results.run.flow_run_id
        if subflow_id and await _is_subflow_of(UUID(subflow_id), run_id):
            return results
    return None


async def _is_subflow_of(subflow_id: UUID, run_id: UUID) -> bool:
    """Whether the flow run `subflow_id` ran inside the flow run `run_id` (Prefect's parent task run)."""
    from prefect.client.orchestration import get_client

    try:
        async with get_client() as client:
            subflow = await client.read_flow_run(subflow_id)
            if subflow.parent_task_run_id is None:
                return False
            parent = await client.read_task_run(subflow.parent_task_run_id)
    except Exception:  # unreadable here, or not a run this server knows: not this cell run's results
        return False
    return parent.flow_run_id == run_id


async def judge_cells_on_pool(
    entries: list[MatrixEntry],
    deadline: datetime | None,
    deployment: str = ADHOC_DEPLOYMENT,
    night_budget: str | None = None,
    after_deadline_s: float = AFTER_DEADLINE_SECONDS,
    pending_timeout_s: float = PENDING_TIMEOUT_SECONDS,
) -> list[tuple[FlowRun, RunResults | None]]:
    """Every cell as its own run of the ad-hoc deployment, all submitted at once (the pool's workers
    decide how many run side by side); once every run has ended, each run as it ended with the results
    its judging subflow wrote (None: none), in matrix order. `night_budget`: the night whose budget in
    the results database the cells reserve their worst cases from (`night_budget.NightBudget`). At the
    `deadline`, cell runs not started are cancelled; those still running `after_deadline_s` later too; a
    cell run Pending longer than `pending_timeout_s` is taken as crashed and scheduled again."""
    from prefect import get_run_logger
    from prefect.deployments import arun_deployment

    logger = get_run_logger()
    limits = await ensure_endpoint_limits(entries)
    night = night_date()
    earlier = await earlier_cell_runs(deployment)
    night_key = _night_key()
    run_ids = []
    for entry in entries:
        if entry.name in earlier:
            logger.info("%s: reusing its run %s of an earlier attempt", entry.name, earlier[entry.name].id)
            run_ids.append(earlier[entry.name].id)
            continue
        limit, rate_limit = limits.get(entry.endpoint, (None, None))
        cell = PoolCell(
            name=entry.name,
            config=entry.config.model_dump(mode="json"),
            max_cost=entry.config.max_cost,
            night_budget=night_budget,
            batch_deadline=entry.config.endpoint.batch_deadline if entry.config.endpoint.batch else None,
            limit=limit,
            rate_limit=rate_limit,
        )
        parameters = {
            "model": entry.config.model,
            "judge_type": entry.config.judge_type,
            "cell": cell.model_dump(exclude_none=True),
        }
        # One cell run per cell and attempt of the night, however often its creation is retried (a lost
        # answer while the server restarts): the server returns the run the key already made.
        key = f"{night_key}:{entry.name}"
        run = await arun_deployment(
            deployment, parameters=parameters, flow_run_name=entry.run_name(night), timeout=0, idempotency_key=key
        )
        run_ids.append(run.id)
    started = time.monotonic()
    bound = night_bound(deadline, after_deadline_s)
    logger.info("%d cells submitted to %s; waiting for them until %s", len(run_ids), deployment, bound)
    finished = await wait_for_runs(run_ids, deadline, after_deadline_s, pending_timeout_s=pending_timeout_s)
    ended = [finished[run_id] for run_id in run_ids]
    logger.info("cells on the pool took %.1f s", time.monotonic() - started)
    return [(run, await _results_of_run(entry, run.id)) for entry, run in zip(entries, ended, strict=True)]

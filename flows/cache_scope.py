"""Which cached answers a run may reuse: what its own night or deployment run paid, or any run's.

A night measures tonight's judges: a model served under one name changes behind it, so a night (and a
deployment's ad-hoc run) reuses only the answers paid under its own outermost flow run, which its cells'
retries and its reschedule after a crash (Prefect keeps the flow run's id) share, and those of its twins:
runs of the same configuration it waited for, or that were running when it started or started since (a
scheduled night and a manual run of the same matrix; flows/run_rows.py `twins_admitted`).
A command-line run keeps reusing any run's answers (a repeated command resumes). `--cache-reuse` says
otherwise, and `--cache-max-age` bounds the age of what is reused either way.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING
from uuid import UUID

from sqlalchemy.engine import Engine

from judgebench_flows.core.endpoint import EndpointSettings
from judgebench_flows.data import db
from judgebench_flows.scoring.run_results import CacheSource, CacheUse

if TYPE_CHECKING:
    from prefect.client.schemas.objects import FlowRun

# Flows whose runs are nights or deployment runs even when called directly (a test, `python -c`).
MEASURING_FLOWS = frozenset({"nightly-benchmarks", "judgebench-adhoc"})
MAX_DEPTH = 16  # nesting levels walked up to the outermost flow run


@dataclass(frozen=True)
class ReuseScope:
    """The outermost flow run of this run, and the scope its cache lookups are limited to (None: any run)."""

    root_flow_run_id: str
    scope: str | None
    newer_than: datetime | None
    root_started: datetime | None = None  # when the outermost flow run started (a night's start)


# A flow run's outermost flow run and its flow's name, by the flow run's id: fixed once the run exists, so a
# night's cells (each a subflow of the same night) read the night's only once. The newest runs are kept.
_KNOWN_ROOTS: OrderedDict[UUID, tuple[FlowRun, str | None]] = OrderedDict()
KNOWN_ROOTS_KEPT = 64


async def outermost(flow_run: FlowRun) -> tuple[FlowRun, str | None]:
    """The outermost flow run above `flow_run` (through subflows and deployment runs started from a flow)
    and its flow's name."""
    from prefect.client.orchestration import get_client

    run, above = flow_run, list[UUID]()
    async with get_client() as client:
        for _ in range(MAX_DEPTH):
            if run.parent_task_run_id is None:
                break
            parent = await client.read_task_run(run.parent_task_run_id)
            if parent.flow_run_id is None:
                break
            if parent.flow_run_id in _KNOWN_ROOTS:
                return _remember(above, _KNOWN_ROOTS[parent.flow_run_id])
            run = await client.read_flow_run(parent.flow_run_id)
            above.append(run.id)
        flow = await client.read_flow(run.flow_id)
    return _remember(above, (run, flow.name))


def _remember(run_ids: list[UUID], root: tuple[FlowRun, str | None]) -> tuple[FlowRun, str | None]:
    """`root` as the outermost flow run of each of `run_ids` (flow runs above the one asked about)."""
    for run_id in run_ids:
        _KNOWN_ROOTS[run_id] = root
        _KNOWN_ROOTS.move_to_end(run_id)
    while len(_KNOWN_ROOTS) > KNOWN_ROOTS_KEPT:
        _KNOWN_ROOTS.popitem(last=False)
    return root


async def reuse_scope(endpoint: EndpointSettings, flow_run: FlowRun, started: datetime) -> ReuseScope:
    """The run's reuse: `auto` is this flow run's own for a night or a deployment's run, any run's otherwise."""
    root, name = await outermost(flow_run)
    own = endpoint.cache_reuse == "this-run" or (
        endpoint.cache_reuse == "auto" and (root.deployment_id is not None or name in MEASURING_FLOWS)
    )
    return ReuseScope(
        root_flow_run_id=str(root.id),
        scope=str(root.id) if own else None,
        newer_than=endpoint.reused_newer_than(started),
        root_started=root.start_time or root.created,
    )


def cache_use(
    engine: Engine,
    reuse: ReuseScope,
    endpoint: EndpointSettings,
    sources: dict[str, int] | None,
    cached: int,
    calls: int,
) -> CacheUse:
    """results.json's `run.cache`: `cached` of `calls` answers from the call cache, by the run that paid
    them (`sources`, None where this process did not make the calls: Dask), with each run's start."""
    known = {run_id: count for run_id, count in (sources or {}).items() if count}
    runs = db.runs_by_id(engine, [run_id for run_id in known if run_id])
    listed = [
        CacheSource(
            run_id=run_id,
            started=runs[run_id].started.isoformat() if run_id in runs else None,
            answers=count,
            same_flow_run=run_id in runs and runs[run_id].root_flow_run_id == reuse.root_flow_run_id,
        )
        for run_id, count in sorted(known.items(), key=lambda item: -item[1])
    ]
    return CacheUse(
        reuse=("this flow run" if reuse.scope else "any run")
        if endpoint.cache == "use"
        else f"none (cache {endpoint.cache})",
        flow_run_id=reuse.scope,
        max_age=endpoint.cache_max_age,
        answers=cached,
        calls=calls,
        sources=listed,
    )


__all__ = ["MEASURING_FLOWS", "ReuseScope", "cache_use", "outermost", "reuse_scope"]

"""One configuration's judging subflow as a deployment's flow runs it: under a subflow name of its own, run
once more after a failure that may pass, its ending read as the cell's outcome. The night's cells
(flows/nightly.py), a pool's cell runs (flows/pool_cells.py) and an ad-hoc run (flows/adhoc_flow.py) each
judge their configuration through `judge_cell`."""

from __future__ import annotations

import asyncio
import hashlib
import types
from typing import Any

import httpx
from prefect import Flow, get_run_logger
from prefect.exceptions import PrefectHTTPStatusError
from prefect.states import Failed, State

from judgebench_flows.core.config import RunConfig
from judgebench_flows.flows.cell_schedule import Places
from judgebench_flows.flows.judgebench_flow import judgebench_flow
from judgebench_flows.flows.outcomes import CellOutcome, outcome_of
from judgebench_flows.flows.retries import failure_line, is_transient
from judgebench_flows.judging.matrix import MatrixEntry


def cell_flow(name: str, run_name: str) -> Any:
    """The `judgebench` flow for the cell `name`, its function under a name of its own; its runs are
    named `run_name` (judge, model, data file; a night's date).

    Prefect matches a rerun night's subflow calls (a crashed night rescheduled, a retried one) to the
    earlier attempt's by the function's name and the order of the calls; cells side by side call in no
    fixed order, so each cell gets its own name and its own count of calls: its finished subflow is
    reused, never another cell's."""
    fn = judgebench_flow.fn
    own = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    own.__kwdefaults__, own.__annotations__, own.__doc__ = fn.__kwdefaults__, fn.__annotations__, fn.__doc__
    own.__module__ = fn.__module__
    own.__qualname__ = f"judgebench_flow_{hashlib.sha256(name.encode()).hexdigest()[:16]}"
    return Flow(own, name=judgebench_flow.name, log_prints=False, persist_result=True, flow_run_name=lambda: run_name)


async def judge_cell(
    entry: MatrixEntry,
    retry_delay_seconds: float,
    place: Places | None = None,
    run_name: str | None = None,
) -> tuple[CellOutcome, State]:
    """A configuration's judging subflow, run once more after `retry_delay_seconds` if it failed for a
    reason that may pass; persist_result lets a rescheduled night reuse a finished subflow. `place`: the
    cell's place among the cells in flight, given up while it waits to try again (a subflow takes it
    before its first call). `run_name`: the
    subflow run's name (default: the cell's judge, model and data file)."""
    logger = get_run_logger()
    subflow = await asyncio.to_thread(cell_flow, entry.name, run_name or entry.title)  # its schema: off the loop
    state = await subflow_state(subflow, entry.config, retried_if_transient=True)
    outcome = await outcome_of(entry, state)
    if outcome.status == "failed" and outcome.transient:
        logger.warning("%s failed (%s); trying once more in %g s", entry.name, outcome.message, retry_delay_seconds)
        if place is not None:  # its next subflow takes it again before its first call
            await place.release()
        await asyncio.sleep(retry_delay_seconds)
        state = await subflow_state(subflow, entry.config)
        outcome = await outcome_of(entry, state)
    return outcome, state


async def subflow_state(subflow: Any, config: RunConfig, **parameters: Any) -> State:
    """The cell's subflow run's final state. A Prefect server too busy to create the run (still
    answering 5xx past its client's retries, or not at all) fails the cell for a reason that may pass,
    tried again as any other, not the night with every other cell in it."""
    try:
        return await subflow(config, return_state=True, **parameters)
    except (PrefectHTTPStatusError, httpx.TransportError) as exc:
        if not is_transient(exc):
            raise
        return Failed(message=failure_line(exc), data=exc)


__all__ = ["cell_flow", "judge_cell", "subflow_state"]

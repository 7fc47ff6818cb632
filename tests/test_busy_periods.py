"""An endpoint's busy time is the time it had at least one call in flight, in one process and over a pool
night's cell runs alike: overlapping cells count their overlap once, so a busy share never passes 100%."""

from __future__ import annotations

import asyncio

from judgebench_flows.calls.limits import EndpointUsage, union_seconds


def test_union_counts_overlaps_once():
    assert union_seconds([]) == 0
    assert union_seconds([(100.0, 110.0), (105.0, 120.0), (130.0, 131.0)]) == 21.0
    assert union_seconds([(0.0, 10.0), (2.0, 3.0)]) == 10.0  # one inside another
    assert union_seconds([(5.0, 6.0), (0.0, 1.0)]) == 2.0  # in any order


def test_a_limits_busy_periods_cover_its_busy_time():
    """Calls overlapping in one process make one period; a gap starts another; their union is the
    busy time the in-process figures count."""
    usage = EndpointUsage()

    async def calls() -> None:
        gate = asyncio.Event()

        async def held() -> None:
            await gate.wait()

        first = asyncio.create_task(usage.timed(held))
        second = asyncio.create_task(usage.timed(held))
        await asyncio.sleep(0.05)
        gate.set()
        await asyncio.gather(first, second)
        await asyncio.sleep(0.05)  # idle: not busy
        await usage.timed(asyncio.sleep, 0.02)

    asyncio.run(calls())
    periods = usage.busy_periods()
    assert len(periods) == 2 and periods[0][1] <= periods[1][0]
    assert abs(union_seconds(periods) - usage.seen()["busy_s"]) < 0.01
    assert usage.seen()["max_in_flight"] == 2


def test_periods_beyond_the_cap_are_joined_never_dropped(monkeypatch):
    from judgebench_flows.calls import limits

    monkeypatch.setattr(limits, "MAX_BUSY_PERIODS", 3)
    usage = EndpointUsage()
    for start, end in [(0.0, 1.0), (1.5, 2.0), (10.0, 11.0), (11.1, 12.0)]:
        usage._busy_since_wall = start
        usage._close_period(end)
    assert usage.periods == [(0.0, 1.0), (1.5, 2.0), (10.0, 12.0)]  # the closest two joined


def test_a_pool_nights_busy_time_is_the_union_of_its_cell_runs_periods(prefect_server):
    """Two cell runs on one endpoint whose calls overlapped, reported through the Prefect server as
    cell runs report them: the night's busy time is their union (21 s), not their sum (26 s)."""
    from prefect import flow
    from prefect.runtime import flow_run

    from judgebench_flows.flows.nightly import with_busy_share
    from judgebench_flows.flows.pool_cells import pool_endpoint_usage, report_endpoint_usage

    endpoint = "openai http://127.0.0.1:9/v1"

    @flow
    async def cell(periods: list[tuple[float, float]]) -> str:
        busy = sum(end - start for start, end in periods)
        figures = {"calls": 4, "busy_s": busy, "max_in_flight": 2, "concurrency": 2}
        await report_endpoint_usage({endpoint: figures}, {endpoint: periods})
        return str(flow_run.id)

    async def night() -> list[str]:
        return [await cell([(100.0, 110.0)]), await cell([(105.0, 120.0), (130.0, 131.0)])]

    from uuid import UUID

    run_ids = [UUID(i) for i in asyncio.run(night())]
    usage = asyncio.run(pool_endpoint_usage(run_ids))
    assert usage[endpoint]["calls"] == 8 and usage[endpoint]["max_in_flight"] == 2
    assert usage[endpoint]["busy_s"] == 21.0  # summed: 26 s
    assert with_busy_share(usage, 21.0)[endpoint]["busy_share"] == 1.0
    assert with_busy_share(usage, 31.0)[endpoint]["busy_share"] == round(21 / 31, 3)

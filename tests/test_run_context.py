"""The run's state lives in the run's context: a run started afresh starts clean (nothing learned, its own
limits), while the runs of one night (the matrix's cells, one context) share each endpoint's one limit
and what their 400s taught. Real HTTP to the fake endpoint through the callers the shard task builds."""

from __future__ import annotations

import asyncio

import pytest

from judgebench_flows.core.endpoint import EndpointSettings
from judgebench_flows.judging.run_context import RunContext, current_run, running
from judgebench_flows.judging.shards import JudgeSpec, Runtime, close_runtimes, runtime_for
from judgebench_flows.testing.fake_openai import FakeOpenAIServer

SAMPLING = {"temperature": 0.0, "max_tokens": 16}


@pytest.fixture(autouse=True)
def _key(monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-run-context")


def spec_for(base_url: str, run_id: str, model: str = "acme-context") -> JudgeSpec:
    endpoint = EndpointSettings(base_url=base_url, cache="off", concurrency=2, max_retries=0)
    return JudgeSpec(judge_type="arena_hard", model=model, endpoint=endpoint, run_id=run_id)


async def ask(runtime: Runtime, count: int, tag: str) -> None:
    """`count` calls at once through the runtime's caller."""
    messages = [[{"role": "user", "content": f"{tag} {i}"}] for i in range(count)]
    await asyncio.gather(*(runtime.caller.complete(m, dict(SAMPLING)) for m in messages))


def test_a_run_started_afresh_learns_again_and_holds_its_own_limit() -> None:
    """Two runs in one process, one after the other: the second is not told what the first's 400s taught
    (it pays its own 400, as a new `judgebench run` would) and gets a limit object of its own."""

    async def one_run(base_url: str) -> tuple[RunContext, list[dict[str, str]], object]:
        with running() as run:
            runtime = runtime_for(spec_for(base_url, "run"), run)
            try:
                await ask(runtime, 1, "once")
            finally:
                await run.calls.close_runtimes()
            return run, runtime.caller.adjustments, runtime.caller.limits

    with FakeOpenAIServer("[[A>B]]", rejected_params={"temperature"}) as server:
        first, taught, first_limits = asyncio.run(one_run(server.base_url))
        assert server.status_counts == {400: 1, 200: 1}
        server.reset_counters()
        second, learned_again, second_limits = asyncio.run(one_run(server.base_url))
        assert server.status_counts == {400: 1, 200: 1}, "the second run pays its own 400: it starts clean"
    assert [a["param"] for a in taught] == [a["param"] for a in learned_again] == ["temperature"]
    assert first is not second and first_limits is not second_limits
    assert current_run.get() is None, "a run's context is in force only while it runs"


def test_the_cells_of_one_night_share_one_limit_per_endpoint_and_what_they_learned() -> None:
    """Two cells (two runs) in one night's context on one endpoint at concurrency 2: never more than 2
    calls in flight there together, and the second cell is spared the 400 the first one paid. Two runs
    each in its own context hold a limit each (up to 4 in flight)."""

    async def cells(base_url: str, night: RunContext | None) -> None:
        async def cell(run_id: str) -> None:
            with running(night) as run:
                spec = spec_for(base_url, run_id)
                runtime = runtime_for(spec, run)
                try:
                    await ask(runtime, 1, f"{run_id} first")  # the first call teaches the rule
                    await ask(runtime, 8, run_id)
                finally:
                    await close_runtimes(run.calls, spec)  # this cell's caller only: the others go on

        await cell("cell-0")
        await asyncio.gather(cell("cell-1"), cell("cell-2"))

    with FakeOpenAIServer("[[A>B]]", rejected_params={"temperature"}, latency=0.05) as server:
        asyncio.run(cells(server.base_url, RunContext()))
        assert server.max_in_flight == 2, "one limit of 2 for the night's cells on the endpoint"
        assert server.status_counts == {400: 1, 200: 27}, "only the night's first cell paid the 400"
    with FakeOpenAIServer("[[A>B]]", rejected_params={"temperature"}, latency=0.05) as alone:
        asyncio.run(cells(alone.base_url, None))
        assert alone.max_in_flight > 2, "runs of their own hold a limit each"
        assert alone.status_counts[400] == 3


def test_a_cell_shares_the_nights_parts_and_has_its_own_callbacks() -> None:
    """`for_cell`: the night's calls, hooks, set-up, budget and shared data, the cell's own callbacks."""
    from judgebench_flows.core.pricing import NightSpend
    from judgebench_flows.judging.run_context import NightShare

    spend = NightSpend(1.0)
    night = RunContext(night=NightShare(spend=spend))
    told: list[str] = []
    cell = night.for_cell(lambda: told.append("judging"), lambda: told.append("judged"))
    assert cell.calls is night.calls and cell.progress is night.progress and cell.setup is night.setup
    assert cell.night.spend is spend and cell.night.shared is night.night.shared
    totals: list[int] = []
    night.progress.add_total_hook(totals.append)
    cell.announce_total(4)
    cell.night.judged()
    night.night.judged()  # the night has no callbacks of its own
    assert told == ["judging", "judged"] and totals == [4]

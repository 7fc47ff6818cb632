"""Request adjustments learned in one process reach another: a Dask worker's back to the flow with its
shard's records, the flow's out to workers with later shards (`known`). Real HTTP to the fake endpoint,
the shard task's own function; the whole run on a real LocalCluster is in test_dask.py."""

from __future__ import annotations

import asyncio
import pickle

from prefect.logging import disable_run_logger

from judgebench_flows.calls.caller import ChatCaller
from judgebench_flows.calls.request_rules import rule_for
from judgebench_flows.calls.retry import RetryPolicy
from judgebench_flows.calls.state import CallState
from judgebench_flows.core.endpoint import EndpointSettings
from judgebench_flows.core.secrets import register_secret
from judgebench_flows.data.loading import index_pairs
from judgebench_flows.judging.run_context import RunContext, running
from judgebench_flows.judging.shards import JudgeSpec, Shard, ShardRecords, close_runtimes, request_report_of
from judgebench_flows.tasks.judge import ShardIncomplete, judge_shard
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._helpers import chat_caller
from tests.conftest import GPT4O_FILE, SHARED, requires_shared

MESSAGES = [{"role": "system", "content": "Judge."}, {"role": "user", "content": "Which is better?"}]
SAMPLING = {"temperature": 0.0, "max_tokens": 4096}


def calls(
    server: FakeOpenAIServer, model: str, style: str, count: int = 3, state: CallState | None = None
) -> ChatCaller:
    caller = chat_caller(
        base_url=server.base_url,
        model=model,
        api_key="sk-test",
        retry=RetryPolicy(max_retries=1, initial_wait=0.01, max_wait=0.02),
        request_rule=rule_for(model, style),
        state=state or CallState(),
    )

    async def go() -> None:
        try:
            for _ in range(count):
                await caller.complete(list(MESSAGES), dict(SAMPLING))
        finally:
            await caller.aclose()

    asyncio.run(go())
    return caller


def test_adjustments_learned_elsewhere_replay_in_order_and_spare_the_400s() -> None:
    """o1-mini behind the standard style: one endpoint teaches rename, drop and fold (three 400s); merged
    into another endpoint's knowledge, the same rule results and that endpoint rejects nothing."""
    with FakeOpenAIServer("[[A>B]]", openai_rules=True) as first:
        taught = calls(first, "o1-mini", "standard")
        assert first.status_counts == {400: 3, 200: 3}
        first_url = first.base_url
    with FakeOpenAIServer("[[A>B]]", openai_rules=True) as second:
        base = rule_for("o1-mini", "standard")
        elsewhere = CallState()  # another process's run
        learned = elsewhere.learned_for(second.base_url, "o1-mini", base)
        assert learned.merge(taught.adjustments) == taught.adjustments
        assert learned.rule == taught.state.learned_for(first_url, "o1-mini", base).rule
        assert learned.merge(taught.adjustments) == [], "each change once, however often it comes back"
        calls(second, "o1-mini", "standard", state=elsewhere)
        assert second.status_counts == {200: 3}
    assert learned.adjustments == taught.adjustments


def test_merge_ignores_unknown_actions_and_keeps_secrets_out() -> None:
    register_secret("sk-merge-secret-123456")
    learned = CallState().learned_for("http://127.0.0.1:9/v1", "acme-merge", rule_for("acme-merge"))
    added = learned.merge(
        [
            {"param": "top_p", "action": "rewritten by a future version", "endpoint_said": "?"},
            {"param": "temperature", "action": "dropped", "endpoint_said": "no temperature for sk-merge-secret-123456"},
        ]
    )
    assert added == [{"param": "temperature", "action": "dropped", "endpoint_said": "no temperature for ***"}]
    assert learned.rule.drop == frozenset({"temperature"})


def test_shard_records_and_incomplete_shards_carry_adjustments_through_pickling() -> None:
    change = {"param": "temperature", "action": "dropped", "endpoint_said": "unsupported"}
    records = pickle.loads(pickle.dumps(ShardRecords([], [change])))
    assert records == [] and records.adjustments == [change]
    incomplete = pickle.loads(pickle.dumps(ShardIncomplete(3, ShardRecords([], [change]))))
    assert incomplete.records.adjustments == [change]  # type: ignore[attr-defined]


@requires_shared
def test_a_shard_given_known_adjustments_sends_no_rejected_request_and_returns_them(monkeypatch) -> None:
    """The shard task as a worker runs it: with what the flow knows it starts right (no 400); without, it
    learns from its first 400s and its records carry the adjustment back."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-travel")
    path = str(SHARED / "data" / GPT4O_FILE)
    shard = Shard(index=0, path=path, offsets=index_pairs(path).offsets[:3])

    def run(server: FakeOpenAIServer, model: str, known: list[dict[str, str]] | None) -> list:
        spec = JudgeSpec(
            judge_type="arena_hard",
            templates_dir=str(SHARED / "utils" / "templates"),
            model=model,
            endpoint=EndpointSettings(base_url=server.base_url, cache="off", concurrency=4),
        )

        async def go() -> list:
            with running() as worker_run:  # a new run for each: what one learned, the other is not told
                try:
                    with disable_run_logger():  # the task's function, outside any task run
                        return await judge_shard.fn(shard, spec, known)
                finally:
                    await close_runtimes(worker_run.calls)

        try:
            return asyncio.run(go())
        except ShardIncomplete as exc:  # a verdict the fake's fixed answer does not give: records still
            return exc.records

    with FakeOpenAIServer("My final verdict is [[A>B]]", rejected_params={"temperature"}) as server:
        learned_here = run(server, "acme-travel-1", None)
        rejected = server.status_counts.get(400, 0)
        [change] = learned_here.adjustments  # type: ignore[attr-defined]
        assert change["param"] == "temperature" and 1 <= rejected <= 6
        server.reset_counters()
        told = run(server, "acme-travel-2", [change])
        assert server.status_counts == {200: 6}, "told up front: no request rejected"
    assert told.adjustments == [change]  # type: ignore[attr-defined]
    assert all(r.status == "ok" for r in told)


def test_the_report_shows_what_was_merged() -> None:
    spec = JudgeSpec(
        judge_type="arena_hard",
        model="acme-report",
        endpoint=EndpointSettings(base_url="http://127.0.0.1:9/v1"),
    )
    from judgebench_flows.judging.shards import merge_adjustments

    change = {"param": "temperature", "action": "dropped", "endpoint_said": "unsupported"}
    run = RunContext()
    assert merge_adjustments(spec, run.calls, [change]) == [change]
    report = request_report_of(spec, run.calls)
    assert report["rule"] == "standard" and report["adjustments"] == [change]

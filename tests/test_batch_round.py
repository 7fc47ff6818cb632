"""A batch run's first round goes out as soon as every line its shards declared is in (calls/batch_round.py),
not a gather window later; a shard that starts late is still in that one batch, and a shard that never
declares (Prefect's cache served it) leaves the window in charge. Against the real batch stand-in."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from sqlalchemy.engine import Engine

from judgebench_flows.calls.batch_round import FirstRound
from judgebench_flows.calls.caller import ChatCaller
from judgebench_flows.calls.providers import provider_rule
from judgebench_flows.calls.retry import RetryPolicy
from judgebench_flows.core.records import Pair
from judgebench_flows.data import db
from judgebench_flows.judges.procedure import ParseFailed, PromptProcedure
from judgebench_flows.judging.run_context import Runtime
from judgebench_flows.judging.shards import judge_pairs
from judgebench_flows.testing.fake_batches import FakeBatchServer
from tests._helpers import chat_caller
from tests.conftest import CANARY_KEY


class VerdictJudge(PromptProcedure):
    """A prompted judge of one turn: the first turn is its whole request."""

    name = "round-test"
    sampling = {"temperature": 0.0, "max_tokens": 16}
    follow_up = None

    def format(self, question: str, answer_A: str, answer_B: str) -> list[dict[str, str]]:
        return [{"role": "user", "content": f"{question}\n[A] {answer_A}\n[B] {answer_B}"}]

    def parse(self, text: str) -> str:
        if "[[A>B]]" not in text:
            raise ParseFailed(text)
        return "A>B"

    def wants_follow_up(self, text: str) -> bool:
        return False

    def fingerprint(self) -> str:
        return self.name


def pairs(first: int, count: int) -> list[Pair]:
    return [
        Pair(pair_id=f"p{i}", source="mmlu-pro", question=f"Q{i}?", response_A=f"a{i}", response_B=f"b{i}", label="A>B")
        for i in range(first, first + count)
    ]


def batch_runtime(server: FakeBatchServer, gather_seconds: float, engine: Engine | None = None) -> Runtime:
    caller: ChatCaller = chat_caller(
        base_url=server.base_url,
        model="batch-judge",
        api_key=CANARY_KEY,
        batch=True,
        batch_poll_seconds=0.1,
        request_rule=provider_rule("openai", "batch-judge", "auto", ()),
        retry=RetryPolicy(max_retries=0),
        engine=engine,
    )
    caller.transport.gather_seconds = gather_seconds  # type: ignore[attr-defined]  # the window this test outwaits
    return Runtime(VerdictJudge(), caller)


async def shards(runtime: Runtime, declared: int, late_s: float) -> tuple[float, int]:
    """Two shards of 3 pairs, the second starting `late_s` later, `declared` shards expected: the seconds
    until every judgment is back, and how many judgments were answered."""
    assert runtime.caller.first_round is not None
    runtime.caller.first_round.expect(declared)

    async def shard(first: int, delay: float) -> int:
        await asyncio.sleep(delay)
        return len([r for r in await judge_pairs(pairs(first, 3), runtime, (0, 1)) if r.status == "ok"])

    started = time.monotonic()
    try:
        judged = await asyncio.gather(shard(0, 0.0), shard(3, late_s))
    finally:
        await runtime.caller.aclose()
    return time.monotonic() - started, sum(judged)


def test_the_first_round_goes_once_its_lines_are_in_and_a_late_shard_is_not_split_off() -> None:
    with FakeBatchServer("[[A>B]]") as server:
        runtime = batch_runtime(server, gather_seconds=30.0)
        seconds, judged = asyncio.run(shards(runtime, declared=2, late_s=0.5))
    assert judged == 12
    assert server.batches_created == 1, "the late shard's lines went into a batch of their own"
    assert sum(server.submitted_lines.values()) == 12
    assert seconds < 15, f"{seconds:.1f} s: the batch waited for the 30 s window"


def test_a_shard_that_never_declares_leaves_the_gather_window_in_charge() -> None:
    with FakeBatchServer("[[A>B]]") as server:
        runtime = batch_runtime(server, gather_seconds=1.5)
        seconds, judged = asyncio.run(shards(runtime, declared=3, late_s=0.0))  # a third shard never runs
    assert judged == 12 and server.batches_created == 1
    assert seconds >= 1.5, f"{seconds:.2f} s: submitted before the window with a shard undeclared"


def test_a_round_counts_lines_not_posts_and_closes_when_it_goes() -> None:
    first = FirstRound()
    first.declare(["x"])  # no round expected: nothing is tracked
    assert not first.complete()
    first.expect(2)
    first.declare(["a", "b"])
    first.arrived("a")
    first.arrived("a")  # the same line posted twice (two orders alike) arrives once
    assert not first.complete()
    first.arrived("c")  # a line no shard declared arrives first, then is declared: already in
    first.declare(["c"])
    assert not first.complete()
    first.arrived("b")
    assert first.complete()
    first.close()
    assert not first.complete() and not first.open


def test_lines_the_call_cache_answers_are_not_waited_for(tmp_path: Path) -> None:
    engine = db.open_database(f"sqlite:///{tmp_path}/cache.db")
    with FakeBatchServer("[[A>B]]") as server:
        asyncio.run(shards(batch_runtime(server, 30.0, engine), declared=2, late_s=0.0))  # 6 pairs answered
        again = batch_runtime(server, 30.0, engine)  # the next run: 4 pairs cached, 2 new ones

        async def one_shard() -> float:
            assert again.caller.first_round is not None
            again.caller.first_round.expect(1)
            started = time.monotonic()
            try:
                await judge_pairs(pairs(2, 6), again, (0, 1))
            finally:
                await again.caller.aclose()
            return time.monotonic() - started

        seconds = asyncio.run(one_shard())
    assert server.batches_created == 2 and sum(server.submitted_lines.values()) == 12 + 4
    assert seconds < 15, f"{seconds:.1f} s: the round waited for lines the call cache answers"

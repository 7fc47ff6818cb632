"""`--batch`: calls through OpenAI's Files + Batch API, against a real local server that validates batches
as OpenAI does; failed lines retried in later batches, expired batches finished, a killed run re-attached,
and whole runs reproducing o1-mini's official 65.71 with no synchronous call."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from judgebench_flows.calls.caller import ChatCaller
from judgebench_flows.calls.providers import provider_rule
from judgebench_flows.calls.retry import RetryPolicy
from judgebench_flows.core.completion import CallFailed
from judgebench_flows.core.errors import BatchRefused
from judgebench_flows.data import db
from judgebench_flows.testing.fake_batches import FakeAnthropicBatchServer, FakeBatchServer
from tests._helpers import batch_requests as requests
from tests._helpers import (
    cancel_after_first_batch,
    chat_caller,
    judge_each,
    kill_after_first_batch_and_rerun,
    run_command,
)
from tests._replay import judgment_set, official_score, replay_responder
from tests.conftest import CANARY_KEY, CLAUDE_FILE, SHARED, load_jsonl

O1_MINI = "o1-mini-2024-09-12"
HAIKU = "claude-3-haiku-20240307"
SAMPLING = {"temperature": 0.0, "max_tokens": 4096}


def batch_caller(
    server: FakeBatchServer, engine=None, model: str = O1_MINI, rule_of: str | None = None, **options: Any
) -> ChatCaller:
    return chat_caller(
        base_url=server.base_url,
        model=model,
        api_key=CANARY_KEY,
        batch=True,
        batch_poll_seconds=0.1,
        engine=engine,
        request_rule=provider_rule("openai", rule_of or model, "auto", ()),
        retry=RetryPolicy(max_retries=6, initial_wait=0.05, max_wait=0.2),  # the budget as run's, waits short
        **options,
    )


def judge_all(caller: ChatCaller, n: int) -> list:
    return judge_each(caller, requests(n), SAMPLING)


def test_one_batch_holds_a_rounds_requests_shaped_by_the_models_rules() -> None:
    with FakeBatchServer("[[A>B]]", openai_rules=True) as server:
        caller = batch_caller(server)
        answers = judge_all(caller, 30)
        assert [a.text for a in answers] == ["[[A>B]]"] * 30
        assert server.requests == 0 and server.batches_created == 1  # no synchronous call
        [batch] = server.batches.values()
    assert all(
        "temperature" not in line["body"] and "max_completion_tokens" not in line["body"] for line in batch.lines
    )
    assert batch.lines[0]["body"]["messages"][0]["content"].startswith("<|BEGIN_SYSTEM_MESSAGE|>")  # o1's fold
    assert caller.stats.answered == 30 and caller.stats.failed == 0


def test_failed_lines_go_into_later_batches_within_the_retry_budget() -> None:
    with FakeBatchServer("[[B>A]]", line_failure_rate=0.3, seed=5) as server:
        caller = batch_caller(server)
        answers = judge_all(caller, 40)
        assert all(getattr(a, "text", None) == "[[B>A]]" for a in answers)
        assert server.batches_created > 1 and caller.stats.retries > 0


def test_an_expired_batch_keeps_its_finished_lines_and_the_rest_are_resubmitted() -> None:
    with FakeBatchServer("[[A>B]]", expire_after=10) as server:
        caller = batch_caller(server)
        answers = judge_all(caller, 16)
        assert all(getattr(a, "text", None) == "[[A>B]]" for a in answers)
        statuses = [b.status for b in server.batches.values()]
        assert statuses == ["expired", "completed"] and set(server.answered_lines.values()) == {1}
        assert caller.stats.retries == 0  # an expired line costs no retry


def test_lines_refused_for_a_parameter_adapt_the_rule_as_synchronous_calls_do() -> None:
    with FakeBatchServer("[[A>B]]", openai_rules=True) as server:
        caller = batch_caller(server, model="o3-mini", rule_of="gpt-4o")  # as if o3's rules were unknown
        [answer] = judge_all(caller, 1)
    assert answer.text == "[[A>B]]"
    assert {a["param"] for a in caller.adjustments} >= {"max_tokens", "temperature"}


def test_an_invalid_line_is_a_failed_call_with_the_apis_message() -> None:
    with FakeBatchServer("[[A>B]]", max_context_chars=5) as server:
        [failed] = judge_all(batch_caller(server), 1)
    assert isinstance(failed, CallFailed) and "HTTP 400 (context_length_exceeded)" in str(failed)


def test_a_batch_refused_whole_stops_the_run() -> None:
    with FakeBatchServer("[[A>B]]", max_lines=5) as server:
        answers = judge_all(batch_caller(server), 8)
    assert all(isinstance(a, BatchRefused) for a in answers)
    assert "too_many_requests" in str(answers[0]) and not answers[0].our_input


def test_a_killed_caller_re_attaches_to_its_stored_batch_and_submits_nothing_again(tmp_path: Path) -> None:
    engine = db.open_database(f"sqlite:///{tmp_path}/batches.db")
    with FakeBatchServer("[[A>B]]", hold=True) as server:
        cancel_after_first_batch(lambda: batch_caller(server, engine), server, requests(12), SAMPLING)
        server.release()
        answers = judge_all(batch_caller(server, engine), 12)
    assert all(getattr(a, "text", None) == "[[A>B]]" for a in answers)
    assert server.batches_created == 1 and set(server.submitted_lines.values()) == {1}
    with sqlite3.connect(tmp_path / "batches.db") as con:
        assert con.execute("select status from provider_batches").fetchall() == [("done",)]


# ----- whole runs ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def o1_replay(gpt4o_pairs):
    decisions = judgment_set(gpt4o_pairs, correct=230)
    assert official_score(gpt4o_pairs, decisions) == 65.71
    return replay_responder(gpt4o_pairs, decisions)


def batch_command(judgebench_repo, server, tmp_path: Path) -> list[str]:
    return run_command(judgebench_repo, server, tmp_path, "--batch", "--batch-poll-seconds", "0.5")


def accuracy(tmp_path: Path) -> float:
    results = json.loads((tmp_path / "results/judgebench.json").read_text())
    return round(100 * results["overall_accuracy"]["accuracy"], 2)


@pytest.mark.slow
@pytest.mark.parametrize("faults", [{"line_failure_rate": 0.03}, {"expire_after": 350}], ids=["3pct-failed", "expired"])
def test_o1_mini_batch_run_reproduces_65_71_with_no_synchronous_call(
    run_cli, judgebench_repo, o1_replay, tmp_path: Path, faults: dict
) -> None:
    with FakeBatchServer(o1_replay, openai_rules=True, seed=11, **faults) as server:
        result = run_cli(*batch_command(judgebench_repo, server, tmp_path), timeout=900)
        assert result.returncode == 0, result.stderr[-3000:]
        assert server.requests == 0  # not one synchronous call
        answered = [b for b in server.batches.values()]
    assert accuracy(tmp_path) == 65.71
    assert "submitted batch_" in result.stderr
    if "expire_after" in faults:
        assert answered[0].status == "expired"
    assert set(server.answered_lines.values()) == {1}  # nothing paid twice


@pytest.mark.slow
def test_a_run_killed_after_submitting_resumes_without_submitting_a_line_twice(
    judgebench_repo, o1_replay, prefect_server, tmp_path: Path
) -> None:
    env = {**os.environ, "OPENAI_API_KEY": CANARY_KEY, "JUDGEBENCH_CACHE_DIR": str(tmp_path / "cache")}
    with FakeBatchServer(o1_replay, openai_rules=True, hold=True) as server:
        again = kill_after_first_batch_and_rerun(
            batch_command(judgebench_repo, server, tmp_path), server, tmp_path, env
        )
        assert again.returncode == 0, again.stderr[-3000:]
        assert "re-attached to batch_" in again.stderr
        # The killed run's batch was re-attached; the only other batch is the follow-up turns' round.
        assert set(server.submitted_lines.values()) == {1} and server.batches_created == 2
        assert server.requests == 0
    assert accuracy(tmp_path) == 65.71


# ----- Anthropic Message Batches -------------------------------------------------------------------------


def anthropic_batch_caller(server: FakeAnthropicBatchServer) -> ChatCaller:
    return chat_caller(
        base_url=server.base_url,
        model=HAIKU,
        api_key=CANARY_KEY,
        provider="anthropic",
        batch=True,
        batch_poll_seconds=0.1,
        request_rule=provider_rule("anthropic", HAIKU, "auto", ()),
        retry=RetryPolicy(max_retries=6, initial_wait=0.05, max_wait=0.2),
    )


def test_message_batches_answer_every_request_through_failures_and_expiry() -> None:
    with FakeAnthropicBatchServer("[[A>B]]", line_failure_rate=0.2, expire_after=15, seed=1) as server:
        answers = judge_all(anthropic_batch_caller(server), 20)
        assert all(getattr(a, "text", None) == "[[A>B]]" for a in answers)
        assert server.requests == 0 and set(server.answered_lines.values()) == {1}
        first = next(iter(server.message_batches.values()))
    params = first["requests"][0]["params"]
    assert params["temperature"] == 0.0 and params["system"] == "Judge." and params["messages"][0]["role"] == "user"


def test_message_batch_lines_refused_for_a_parameter_adapt_the_rule_as_synchronous_calls_do() -> None:
    """A Claude model that refuses `temperature`: its lines come back `errored` with the API's message, the
    rule drops the parameter for the run, and the lines are answered in the next batch."""
    with FakeAnthropicBatchServer("[[A>B]]", rejected_params={"temperature"}) as server:
        caller = anthropic_batch_caller(server)
        answers = judge_all(caller, 4)
        batches = list(server.message_batches.values())
    assert [getattr(a, "text", a) for a in answers] == ["[[A>B]]"] * 4
    assert [a["param"] for a in caller.adjustments] == ["temperature"]
    assert len(batches) == 2 and all("temperature" not in r["params"] for r in batches[1]["requests"])


def test_a_message_batch_refused_whole_stops_the_run() -> None:
    with FakeAnthropicBatchServer("[[A>B]]", max_lines=3) as server:
        answers = judge_all(anthropic_batch_caller(server), 5)
    assert all(isinstance(a, BatchRefused) for a in answers) and "at most 3 requests" in str(answers[0])


@pytest.mark.slow
def test_claude_3_haiku_batch_run_reproduces_32_22(run_cli, judgebench_repo, tmp_path: Path) -> None:
    pairs = load_jsonl(SHARED / "data" / CLAUDE_FILE)
    decisions = judgment_set(pairs, correct=87)
    replay = replay_responder(pairs, decisions)
    with FakeAnthropicBatchServer(replay, line_failure_rate=0.03, seed=2) as server:
        command = [*batch_command(judgebench_repo, server, tmp_path), "--provider", "anthropic", "--model", HAIKU]
        command[command.index("--data-file") + 1] = CLAUDE_FILE
        result = run_cli(*command, env={"ANTHROPIC_API_KEY": CANARY_KEY}, timeout=900)
        assert result.returncode == 0, result.stderr[-3000:]
        assert server.requests == 0 and set(server.answered_lines.values()) == {1}
    assert accuracy(tmp_path) == official_score(pairs, decisions) == 32.22


def test_each_epoch_of_a_request_is_its_own_batch_line_and_paid_once() -> None:
    """`--epochs`: the same request in epochs 0 and 1 is two lines with two custom ids (a batch refuses a
    repeated id), each answered; epoch 0's line id is the one every earlier run stored."""
    import asyncio

    from judgebench_flows.core.identity import epoch_of

    [messages] = requests(1)
    with FakeBatchServer("[[A>B]]", openai_rules=True) as server:
        caller = batch_caller(server)

        async def in_epoch(epoch: int):
            with epoch_of(epoch):
                return await caller.complete(messages, SAMPLING)

        async def go() -> list:
            try:
                return await asyncio.gather(in_epoch(0), in_epoch(1), in_epoch(2))
            finally:
                await caller.aclose()

        answers = asyncio.run(go())
        lines = [line for batch in server.batches.values() for line in batch.lines]
    assert [a.text for a in answers] == ["[[A>B]]"] * 3
    assert len(lines) == 3 and len({line["custom_id"] for line in lines}) == 3
    assert caller.stats.answered == 3

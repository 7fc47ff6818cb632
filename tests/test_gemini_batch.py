"""`--batch --provider gemini`: the Gemini API's Batch Mode through the official google-genai SDK (Files API
upload, batchGenerateContent, the responses file) against a local server that validates batches as Google
does; failed lines retried in later batches, expired batches finished, a killed run re-attached, and whole
runs reproducing JudgeBench's score with no synchronous call."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from judgebench_flows.calls.caller import ChatCaller
from judgebench_flows.calls.gemini_batch import chat_completion, native_request
from judgebench_flows.calls.providers import provider_rule
from judgebench_flows.calls.retry import RetryPolicy
from judgebench_flows.core.completion import CallFailed
from judgebench_flows.data import db
from judgebench_flows.testing.fake_google import FakeGeminiBatchServer
from tests._helpers import batch_requests as requests
from tests._helpers import (
    cancel_after_first_batch,
    chat_caller,
    judge_each,
    kill_after_first_batch_and_rerun,
    run_command,
)
from tests._replay import judgment_set, official_score, replay_responder
from tests.conftest import CANARY_KEY

FLASH = "gemini-2.5-flash"
SAMPLING = {"temperature": 0.0, "max_tokens": 4096}


def batch_caller(server: FakeGeminiBatchServer, engine=None, model: str = FLASH) -> ChatCaller:
    return chat_caller(
        base_url=server.base_url,
        model=model,
        api_key=CANARY_KEY,
        provider="gemini",
        batch=True,
        batch_poll_seconds=0.1,
        engine=engine,
        request_rule=provider_rule("gemini", model, "auto", ()),
        retry=RetryPolicy(max_retries=6, initial_wait=0.05, max_wait=0.2),
    )


def judge_all(caller: ChatCaller, n: int) -> list:
    return judge_each(caller, requests(n), SAMPLING)


def test_one_batch_holds_a_rounds_requests_as_native_gemini_requests() -> None:
    """Each line is the synchronous request translated: system instruction, contents, temperature 0, the
    judge's max_tokens plus a 2.5 model's room to think; each answer reads as the synchronous one would."""
    with FakeGeminiBatchServer("[[A>B]]", api_key=CANARY_KEY, thinking_tokens=100) as server:
        caller = batch_caller(server)
        answers = judge_all(caller, 12)
        assert [a.text for a in answers] == ["[[A>B]]"] * 12
        assert server.requests == 0 and server.batches_created == 1  # no synchronous call
        [job] = server.jobs.values()
    request = job["lines"][0]["request"]
    assert request["systemInstruction"] == {"parts": [{"text": "Judge."}]}
    assert request["contents"][0]["role"] == "user" and request["contents"][0]["parts"][0]["text"].startswith("pair")
    assert request["generationConfig"] == {"temperature": 0.0, "maxOutputTokens": 4096 + 24576}
    assert job["model"] == f"models/{FLASH}" and answers[0].reasoning_tokens == 100
    assert caller.stats.answered == 12 and caller.stats.failed == 0


def test_failed_lines_go_into_later_batches_and_nothing_is_paid_twice() -> None:
    with FakeGeminiBatchServer("[[B>A]]", line_failure_rate=0.3, seed=5) as server:
        caller = batch_caller(server)
        answers = judge_all(caller, 30)
        assert all(getattr(a, "text", None) == "[[B>A]]" for a in answers)
        assert server.batches_created > 1 and caller.stats.retries > 0
        assert set(server.answered_lines.values()) == {1}


def test_an_expired_batch_keeps_its_finished_lines_and_the_rest_are_resubmitted() -> None:
    with FakeGeminiBatchServer("[[A>B]]", expire_after=10) as server:
        caller = batch_caller(server)
        answers = judge_all(caller, 16)
        assert all(getattr(a, "text", None) == "[[A>B]]" for a in answers)
        states = [job["state"] for job in server.jobs.values()]
        assert states == ["BATCH_STATE_EXPIRED", "BATCH_STATE_SUCCEEDED"]
        assert set(server.answered_lines.values()) == {1} and caller.stats.retries == 0


def test_an_invalid_line_is_a_failed_call_with_googles_message() -> None:
    with FakeGeminiBatchServer("[[A>B]]") as server:
        caller = batch_caller(server)

        async def go():
            try:
                return await caller.complete(requests(1)[0], {"temperature": 3.0, "max_tokens": 16})
            finally:
                await caller.aclose()

        with pytest.raises(CallFailed) as failed:
            asyncio.run(go())
    assert "HTTP 400" in str(failed.value) and "temperature value of 3" in str(failed.value)


def test_a_killed_caller_re_attaches_to_its_stored_batch_and_submits_nothing_again(tmp_path: Path) -> None:
    engine = db.open_database(f"sqlite:///{tmp_path}/batches.db")
    with FakeGeminiBatchServer("[[A>B]]", hold=True) as server:
        cancel_after_first_batch(lambda: batch_caller(server, engine), server, requests(8), SAMPLING)
        server.release()
        answers = judge_all(batch_caller(server, engine), 8)
    assert all(getattr(a, "text", None) == "[[A>B]]" for a in answers)
    assert server.batches_created == 1 and set(server.submitted_lines.values()) == {1}


def test_native_translation_keeps_the_answer_and_counts_thinking_as_output() -> None:
    chat = {"model": FLASH, "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
    assert [c["role"] for c in native_request({**chat, "top_p": 1.0})["contents"]] == ["user", "model"]
    response = {
        "candidates": [
            {"content": {"parts": [{"text": "hm", "thought": True}, {"text": "[[A>B]]"}]}, "finishReason": "STOP"}
        ],
        "usageMetadata": {
            "promptTokenCount": 10,
            "candidatesTokenCount": 3,
            "thoughtsTokenCount": 50,
            "totalTokenCount": 63,
        },
    }
    from judgebench_flows.calls.google_api import GoogleTransport

    completion = GoogleTransport.read(chat_completion(response))
    assert (completion.text, completion.prompt_tokens, completion.completion_tokens) == ("[[A>B]]", 10, 53)


# ----- whole runs ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def replay(gpt4o_pairs):
    decisions = judgment_set(gpt4o_pairs, correct=230)
    assert official_score(gpt4o_pairs, decisions) == 65.71
    return replay_responder(gpt4o_pairs, decisions)


def batch_command(judgebench_repo, server, tmp_path: Path) -> list[str]:
    return run_command(
        judgebench_repo, server, tmp_path, "--provider", "gemini", "--batch", "--batch-poll-seconds", "0.5", model=FLASH
    )


def accuracy(tmp_path: Path) -> float:
    results = json.loads((tmp_path / "results/judgebench.json").read_text())
    return round(100 * results["overall_accuracy"]["accuracy"], 2)


@pytest.mark.slow
def test_a_gemini_batch_run_reproduces_65_71_at_half_price_with_no_synchronous_call(
    run_cli, judgebench_repo, replay, tmp_path: Path
) -> None:
    with FakeGeminiBatchServer(replay, api_key=CANARY_KEY, line_failure_rate=0.03, seed=11) as server:
        prices = tmp_path / "gemini-prices.yaml"  # the stand-in bills nothing: priced as the Gemini API
        prices.write_text(f"models:\n  {FLASH}: {{input_per_mtok: 0.30, output_per_mtok: 2.50}}\n")
        command = [*batch_command(judgebench_repo, server, tmp_path), "--prices", str(prices)]
        result = run_cli(*command, env={"GEMINI_API_KEY": CANARY_KEY})
        assert result.returncode == 0, result.stderr[-3000:]
        assert server.requests == 0 and set(server.answered_lines.values()) == {1}
    assert accuracy(tmp_path) == 65.71
    usage = json.loads((tmp_path / "results/judgebench.json").read_text())["usage"]
    assert usage["prices"]["batch"] is True and usage["prices"]["batch_discount"] == 0.5
    expected = (usage["prompt_tokens"] * 0.30 + usage["completion_tokens"] * 2.50) / 1e6 * 0.5
    assert usage["cost_usd"] == pytest.approx(expected, abs=1e-6)
    assert CANARY_KEY not in "".join(p.read_bytes().decode("latin-1") for p in tmp_path.rglob("*") if p.is_file())


@pytest.mark.slow
def test_a_gemini_batch_run_killed_after_submitting_resumes_without_submitting_a_line_twice(
    judgebench_repo, replay, prefect_server, tmp_path: Path
) -> None:
    env = {**os.environ, "GEMINI_API_KEY": CANARY_KEY, "JUDGEBENCH_CACHE_DIR": str(tmp_path / "cache")}
    with FakeGeminiBatchServer(replay, api_key=CANARY_KEY, hold=True) as server:
        again = kill_after_first_batch_and_rerun(
            batch_command(judgebench_repo, server, tmp_path), server, tmp_path, env
        )
        assert again.returncode == 0, again.stderr[-3000:]
        assert "re-attached to batches/" in again.stderr
        # The killed run's batch was re-attached; the only other batch is the follow-up turns' round.
        assert set(server.submitted_lines.values()) == {1} and server.batches_created == 2
        assert server.requests == 0
    assert accuracy(tmp_path) == 65.71


def test_lines_refusing_a_field_adapt_the_rule_and_empty_answers_are_asked_again() -> None:
    """A line refused for a GenerationConfig field drops its chat parameter for the run (as a synchronous
    400 does) and is answered in the next batch; a line answered without a message goes into a later
    batch instead of being read as an empty verdict."""
    with FakeGeminiBatchServer("[[A>B]]", rejected_params={"top_p"}, rate_empty=0.3, seed=4) as server:
        caller = batch_caller(server)

        async def go():
            try:
                return await asyncio.gather(*(caller.complete(m, {**SAMPLING, "top_p": 1.0}) for m in requests(10)))
            finally:
                await caller.aclose()

        answers = asyncio.run(go())
        jobs = list(server.jobs.values())
    assert [a.text for a in answers] == ["[[A>B]]"] * 10
    assert [a["param"] for a in caller.adjustments] == ["top_p"]
    assert "topP" in jobs[0]["lines"][0]["request"]["generationConfig"]
    assert all("topP" not in line["request"]["generationConfig"] for job in jobs[1:] for line in job["lines"])
    assert server.empty_answers > 0 and len(jobs) >= 3


def test_a_gemini_batch_that_never_finishes_is_cancelled_at_the_deadline_and_judged_synchronously() -> None:
    from datetime import datetime, timedelta, timezone

    with FakeGeminiBatchServer("[[A>B]]", hold=True) as server:
        caller = batch_caller(server)
        deadline = datetime.now(timezone.utc) + timedelta(seconds=1.5)
        caller.transport.deadline = deadline.timestamp()  # type: ignore[attr-defined]
        answers = judge_all(caller, 6)
        assert [getattr(a, "text", a) for a in answers] == ["[[A>B]]"] * 6
        assert all(a.synchronous for a in answers)
        assert server.batches_created == 1 and server.cancelled_batches == 1
        assert not any(job["output"] for job in server.jobs.values() if "output" in job)  # no line answered by batch
    assert caller.stats.synchronous == 6


def test_a_batch_for_a_model_google_does_not_know_stops_the_run_as_our_input() -> None:
    from judgebench_flows.core.errors import BatchRefused

    with FakeGeminiBatchServer("[[A>B]]", models={FLASH}) as server:
        answers = judge_all(batch_caller(server, model="gemini-9-nonexistent"), 3)
    assert all(isinstance(a, BatchRefused) and a.our_input for a in answers), answers
    assert "gemini-9-nonexistent" in str(answers[0])

"""Requests reasoning models accept, the run-time safety net, reasoning output, early stop, broken bodies.

Everything goes through the official openai client to the local fake server, whose `openai_rules` mode
rejects exactly what OpenAI's API rejects for o1-mini, o1, o3, o4 and gpt-5 (400 unsupported_value /
unsupported_parameter naming the parameter).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from judgebench_flows.calls.cache import request_key
from judgebench_flows.calls.caller import ChatCaller
from judgebench_flows.calls.request_rules import O1, REASONING, STANDARD, fold_system, rule_for, shape
from judgebench_flows.calls.retry import RetryPolicy
from judgebench_flows.core.errors import RunFailed
from judgebench_flows.judges import get_judge
from judgebench_flows.judges.procedure import CallFailed, judge_one_order
from judgebench_flows.testing.fake_openai import FakeOpenAIServer, openai_rejection
from tests._helpers import chat_caller

SYSTEM = "  Please act as an impartial judge.\n"
USER = "<|User Prompt|>\nWhat is 2+2?\n<|The Start of Assistant A's Answer|>4"
MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]
ARENA_SAMPLING = {"temperature": 0.0, "max_tokens": 4096}


def caller_for(server: FakeOpenAIServer, model: str, **options: Any) -> ChatCaller:
    options.setdefault("retry", RetryPolicy(max_retries=2, initial_wait=0.01, max_wait=0.02))
    options.setdefault("request_rule", rule_for(model))
    return chat_caller(base_url=server.base_url, model=model, api_key="sk-test", **options)


def recording(answer: Any = "My final verdict is [[A>B]]") -> tuple[list[dict], Any]:
    bodies: list[dict] = []

    def respond(body: dict) -> Any:
        bodies.append(body)
        return answer

    return bodies, respond


def run_calls(caller: ChatCaller, count: int = 1, messages=MESSAGES, sampling=ARENA_SAMPLING, together: bool = False):
    async def go():
        try:
            if together:
                return await asyncio.gather(*(caller.complete(list(messages), dict(sampling)) for _ in range(count)))
            return [await caller.complete(list(messages), dict(sampling)) for _ in range(count)]
        finally:
            await caller.aclose()

    return asyncio.run(go())


def test_model_table_longest_prefix_provider_paths_and_cli_overrides() -> None:
    assert rule_for("o1-mini-2024-09-12") is O1 and rule_for("o1-preview") is O1 and rule_for("O1") is O1
    assert (
        rule_for("o3-mini") is REASONING
        and rule_for("openai/o4-mini") is REASONING
        and rule_for("gpt-5-mini") is REASONING
    )
    assert rule_for("gpt-5-chat-latest") is STANDARD and rule_for("gpt-4o-2024-05-13") is STANDARD
    assert rule_for("my-llama", "o1") is O1 and rule_for("o3-mini", "standard") is STANDARD
    custom = rule_for("qwen3", "auto", ["temperature", "top_p"])
    assert shape(custom, MESSAGES, {"temperature": 0, "top_p": 1, "max_tokens": 9}) == (MESSAGES, {"max_tokens": 9})


def test_o1_requests_are_judgebenchs_byte_for_byte() -> None:
    """JudgeBench's utils/models.py: system folded with its markers, no sampling parameters at all."""
    messages, params = shape(O1, MESSAGES, {**ARENA_SAMPLING, "top_p": 1.0})
    expected = "<|BEGIN_SYSTEM_MESSAGE|>\n" + SYSTEM.strip() + "\n<|END_SYSTEM_MESSAGE|>\n\n" + USER
    assert messages == [{"role": "user", "content": expected}] and params == {}
    assert shape(O1, MESSAGES, {"reasoning_effort": "low"})[1] == {"reasoning_effort": "low"}
    only_user = [{"role": "user", "content": USER}]
    assert fold_system(only_user) == only_user
    # The follow-up turn keeps the folded first turn, as JudgeBench's in-place edit does.
    follow = [*MESSAGES, {"role": "assistant", "content": "hm"}, {"role": "user", "content": "continue"}]
    assert [m["role"] for m in shape(O1, follow, {})[0]] == ["user", "assistant", "user"]


@pytest.mark.parametrize("model", ["o1-mini-2024-09-12", "o1-2024-12-17", "o3-mini", "o4-mini", "gpt-5", "gpt-5-mini"])
def test_the_fake_endpoint_rejects_what_openai_rejects_and_the_table_avoids_it(model: str) -> None:
    assert openai_rejection({"model": model, "messages": MESSAGES, **ARENA_SAMPLING})["error"]["code"] in (
        "unsupported_parameter",
        "unsupported_value",
    )
    bodies, respond = recording()
    with FakeOpenAIServer(respond, openai_rules=True) as server:
        caller = caller_for(server, model)
        [completion] = run_calls(caller)
        assert server.status_counts == {200: 1}
    assert completion.text == "My final verdict is [[A>B]]"
    [body] = bodies
    assert "temperature" not in body and "max_tokens" not in body
    if model.startswith("o1"):
        assert set(body) == {"model", "messages"}
        assert body["messages"] == [
            {"role": "user", "content": f"<|BEGIN_SYSTEM_MESSAGE|>\n{SYSTEM.strip()}\n<|END_SYSTEM_MESSAGE|>\n\n{USER}"}
        ]
    else:
        assert body["max_completion_tokens"] == 4096 and body["messages"] == MESSAGES
    # The cache key is the request actually sent.
    sent = {k: v for k, v in body.items() if k not in ("model", "messages")}
    assert completion.key == request_key(caller.base_url, model, body["messages"], sent)


def test_reasoning_effort_passes_through_for_reasoning_models() -> None:
    bodies, respond = recording()
    with FakeOpenAIServer(respond, openai_rules=True) as server:
        run_calls(caller_for(server, "o3-mini"), sampling={**ARENA_SAMPLING, "reasoning_effort": "high"})
        assert server.status_counts == {200: 1}
    assert bodies[0]["reasoning_effort"] == "high"


def test_unknown_model_rejecting_temperature_is_adjusted_once_then_succeeds() -> None:
    bodies, respond = recording()
    with FakeOpenAIServer(respond, rejected_params={"temperature"}) as server:
        caller = caller_for(server, "acme-judge-1")
        completions = run_calls(caller, count=5, messages=[{"role": "user", "content": f"q{i}"} for i in range(1)])
        assert server.status_counts == {400: 1, 200: 5}, "exactly one rejected request, then the adjusted shape"
    assert all(body.get("max_tokens") == 4096 and "temperature" not in body for body in bodies)
    [change] = caller.adjustments
    assert (
        change["param"] == "temperature" and change["action"] == "dropped" and "temperature" in change["endpoint_said"]
    )
    assert {c.key for c in completions} == {
        request_key(caller.base_url, "acme-judge-1", bodies[0]["messages"], {"max_tokens": 4096})
    }


def test_adjustment_is_recorded_once_under_concurrency() -> None:
    with FakeOpenAIServer("[[A>B]]", rejected_params={"temperature"}, latency=0.05) as server:
        caller = caller_for(server, "acme-judge-2", concurrency=8)
        completions = run_calls(caller, count=8, together=True)
        counts = server.status_counts
    assert len(completions) == 8 and counts[200] == 8 and 1 <= counts[400] <= 8
    assert len(caller.adjustments) == 1


def test_an_o1_mini_behind_an_unknown_name_is_learned_param_by_param() -> None:
    """Forced to the standard style, o1-mini's 400s teach the run: max_tokens renamed, temperature dropped,
    the system message folded; each once, then every call succeeds."""
    with FakeOpenAIServer("[[A>B]]", openai_rules=True) as server:
        caller = caller_for(server, "o1-mini", request_rule=rule_for("o1-mini", "standard"))
        run_calls(caller, count=3)
        assert server.status_counts == {400: 3, 200: 3}
    assert [c["param"] for c in caller.adjustments] == ["max_tokens", "temperature", "messages[0].role"]


def test_early_stop_when_the_first_calls_all_fail_alike() -> None:
    with FakeOpenAIServer("[[A>B]]", max_context_chars=5) as server:
        caller = caller_for(server, "gpt-4o", early_stop_calls=20)

        async def go():
            failures = 0
            try:
                for _ in range(19):
                    with pytest.raises(CallFailed):
                        await caller.complete(list(MESSAGES), dict(ARENA_SAMPLING))
                    failures += 1
                with pytest.raises(RunFailed) as stopped:
                    await caller.complete(list(MESSAGES), dict(ARENA_SAMPLING))
                with pytest.raises(RunFailed):  # nothing more is sent
                    await caller.complete(list(MESSAGES), dict(ARENA_SAMPLING))
                return failures, str(stopped.value)
            finally:
                await caller.aclose()

        failures, message = asyncio.run(go())
        # The same request each time: a deterministic 400 is sent once, then failed alike without sending.
        assert failures == 19 and server.requests == 1
    assert message.startswith("stopped early: the first 20 calls") and "context_length_exceeded" in message
    assert "maximum context length is 5 tokens" in message and "\n" not in message


def test_no_early_stop_once_a_call_succeeded_or_the_errors_differ() -> None:
    with FakeOpenAIServer("[[A>B]]") as server:
        caller = caller_for(server, "gpt-4o", early_stop_calls=3)

        async def go():
            try:
                await caller.complete(list(MESSAGES), dict(ARENA_SAMPLING))
                server.configure(max_context_chars=5)
                for _ in range(5):
                    with pytest.raises(CallFailed):
                        await caller.complete([{"role": "user", "content": f"long question {_}"}], dict(ARENA_SAMPLING))
            finally:
                await caller.aclose()

        asyncio.run(go())


@pytest.mark.parametrize("broken_attempts, expect_ok", [(1, True), (100, False)])
def test_a_200_that_is_not_json_is_retried_then_fails_that_call(broken_attempts: int, expect_ok: bool) -> None:
    with FakeOpenAIServer("[[A>B]]", fail_first=broken_attempts, fail_kind="badjson") as server:
        caller = caller_for(server, "gpt-4o")  # 2 retries: 3 attempts at most
        if expect_ok:
            [completion] = run_calls(caller)
            assert completion.text == "[[A>B]]" and server.requests == 2
        else:
            with pytest.raises(CallFailed, match="body that is not a JSON object after 3 attempts"):
                run_calls(caller)
            assert server.requests == 3


def judge_with(answer: Any):
    with FakeOpenAIServer(lambda body: answer) as server:
        caller = caller_for(server, "deepseek-r1")

        async def go():
            try:
                return await judge_one_order(
                    get_judge("arena_hard"), "What is 2+2?", "4", "5", caller.complete
                ), server.requests
            finally:
                await caller.aclose()

        return asyncio.run(go())


def test_verdict_comes_from_the_answer_never_from_reasoning() -> None:
    outcome, _ = judge_with(
        {"content": "Final: [[B>A]]", "reasoning_content": "maybe [[A>>B]]", "reasoning_tokens": 12}
    )
    assert (outcome.status, outcome.decision) == ("ok", "B>A")
    assert outcome.completions[0].reasoning_tokens == 12 and "maybe" not in outcome.response

    custom = type(
        "Custom",
        (),
        {
            "name": "c",
            "sampling": {},
            "follow_up": None,
            "format": lambda self, q, a, b: [{"role": "user", "content": q}],
            "parse": lambda self, text: "A>B" if "A" in text else "",
            "wants_follow_up": lambda self, text: False,
        },
    )()
    with FakeOpenAIServer("<think>A looks better... or B</think>no idea") as server:
        caller = caller_for(server, "qwq")

        async def go():
            try:
                return await judge_one_order(custom, "q", "a", "b", caller.complete)
            finally:
                await caller.aclose()

        outcome = asyncio.run(go())
    assert outcome.status == "invalid", "a custom parser sees the answer, not the <think> scratchpad"


def test_budget_spent_on_reasoning_is_an_invalid_judgment_with_that_reason() -> None:
    outcome, requests = judge_with({"content": "", "finish_reason": "length", "reasoning_tokens": 4096})
    assert outcome.status == "invalid" and outcome.decision == ""
    assert "finish_reason length" in outcome.error and "4096 reasoning tokens" in outcome.error
    assert requests == 1, "no follow-up turn: the same budget would end the same way"
    think_only, _ = judge_with({"content": "<think>A is", "finish_reason": "length"})
    assert think_only.status == "invalid" and "finish_reason length" in think_only.error

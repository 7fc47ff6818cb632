"""The layers `ChatCaller` is composed of (calls/transport, retry, limits, cache, caller) and the small
shared helpers that replaced duplicates (scoring.formatting.percent, core.net.connect_error).

The request a caller sends and the key it caches under are pinned here: splitting the caller must not
change a byte of either, or every existing call cache would miss.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import httpx
import openai
import pytest

from judgebench_flows.calls.cache import request_key
from judgebench_flows.calls.limits import CallLimits
from judgebench_flows.calls.providers import model_api, unserved
from judgebench_flows.calls.retry import RetryPolicy
from judgebench_flows.calls.transport import BadAnswerBody, Transport, openai_call_error
from judgebench_flows.core.errors import FatalEndpointError
from judgebench_flows.core.net import connect_error
from judgebench_flows.scoring.formatting import percent
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._helpers import chat_caller


def test_request_key_is_pinned() -> None:
    # Computed with the caller before it was split; a change here invalidates every stored call cache.
    key = request_key("http://h/v1/", "m", [{"role": "user", "content": "hé"}], {"temperature": 0})
    assert key == "9448c718d30a0b781579bca0bf7d64858795c2faa4266f9f4a61af58bf98e936"


def test_sent_body_and_key_are_the_request_as_shaped() -> None:
    bodies: list[dict[str, Any]] = []

    def record(body: dict) -> str:
        bodies.append(body)
        return "My final verdict is [[A>B]]"

    messages = [{"role": "system", "content": "judge"}, {"role": "user", "content": "which?"}]
    with FakeOpenAIServer(record) as server:
        base_url = server.base_url

        async def go() -> Any:
            caller = chat_caller(
                base_url=server.base_url, model="judge-model", api_key="sk-test", retry=RetryPolicy(max_retries=0)
            )
            try:
                return await caller.complete(messages, {"temperature": 0.0, "max_tokens": 64}), caller
            finally:
                await caller.aclose()

        completion, caller = asyncio.run(go())
    assert list(bodies[0].items()) == [
        ("model", "judge-model"),
        ("messages", messages),
        ("temperature", 0.0),
        ("max_tokens", 64),
    ]
    assert completion.key == request_key(base_url, "judge-model", messages, {"temperature": 0.0, "max_tokens": 64})
    assert (caller.stats.calls, caller.stats.answered, caller.stats.attempts, caller.stats.retries) == (1, 1, 1, 0)


def test_answer_reading_turns_unusable_bodies_into_a_retryable_failure() -> None:
    wires = {
        api: model_api("openai", "http://127.0.0.1:9/v1", "m", "k", 5.0, 1, api=api)
        for api in ("chat", "completions", "pooling")
    }
    for api, body in (("chat", ["not", "an", "object"]), ("completions", "text"), ("pooling", {"data": []})):
        with pytest.raises(BadAnswerBody):
            wires[api].answer(body)
        assert RetryPolicy.retries(BadAnswerBody())
    answer = wires["chat"].answer(
        {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 3}}
    )
    assert (answer.text, answer.prompt_tokens, answer.finish_reason) == ("ok", 3, "stop")


def test_fatal_errors_name_the_endpoint_and_never_the_key() -> None:
    response = httpx.Response(401, request=httpx.Request("POST", "http://h/v1/chat/completions"))
    failed = openai_call_error(openai.AuthenticationError("bad key sk-abc", response=response, body=None))
    assert failed.fatal and not failed.retryable
    error = failed.fatal_error("http://h/v1", "m")
    assert isinstance(error, FatalEndpointError) and "rejected the API key" in str(error) and "sk-abc" not in str(error)


def test_default_limits_are_the_semaphore_alone() -> None:
    async def go() -> tuple[int, int]:
        limits = CallLimits(concurrency=2, request_timeout=5.0)
        peak = in_flight = 0

        async def send(delay: float) -> float:
            nonlocal peak, in_flight
            in_flight += 1
            peak = max(peak, in_flight)
            await asyncio.sleep(delay)
            in_flight -= 1
            return delay

        results = await asyncio.gather(*(limits.run(send, 0.01) for _ in range(6)))
        assert limits.adaptive is None and limits.pacer is None
        return len(results), peak

    assert asyncio.run(go()) == (6, 2)


def test_percent_is_one_rule_with_each_place_choosing_its_marks() -> None:
    assert percent(0.81234) == "81.23%"
    assert percent(None) == percent(float("nan")) == percent("x") == "-"
    assert percent(0.5, digits=1, missing="–") == "50.0%" and percent(None, missing="n/a") == "n/a"
    assert percent(0.5, sign="") == "50.00"


def test_connect_error_says_why_and_none_when_listening() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert connect_error(f"http://127.0.0.1:{port}/v1", timeout=5) is None
    assert connect_error(f"http://127.0.0.1:{port}/v1", timeout=5)  # closed now: a reason


def test_the_factory_picks_one_wire_per_provider_and_api() -> None:
    """One module per provider and endpoint API, chosen once (the provider's `wires`); what has no wire is
    refused before any call, naming the option."""
    from judgebench_flows.calls.local_reward import LocalRewardAPI
    from judgebench_flows.calls.openai_completions import OpenAICompletions
    from judgebench_flows.calls.vllm_pooling import VLLMPooling

    def wire(provider: str, api: str) -> object:
        return model_api(provider, "http://127.0.0.1:9/v1", "m", "k", 5.0, 1, api=api)

    assert type(wire("openai", "chat")) is Transport
    assert type(wire("openai", "completions")) is OpenAICompletions
    pooling = wire("openai", "pooling")
    assert type(pooling) is VLLMPooling and pooling.checks_raw_scores  # type: ignore[attr-defined]
    assert type(wire("openai", "transformers")) is LocalRewardAPI
    assert type(wire("anthropic", "chat")).__name__ == "AnthropicTransport"
    assert unserved("anthropic", "pooling") == (
        "--provider anthropic",
        "which only OpenAI-compatible endpoints serve (use --provider openai)",
    )
    assert unserved("openai", "completions", batch=True) == ("--batch", "which batch APIs do not serve")
    assert unserved("gemini", "chat", batch=True) is None and unserved("openai", "chat") is None
    with pytest.raises(ValueError, match="no wire for the pooling API"):
        wire("gemini", "pooling")

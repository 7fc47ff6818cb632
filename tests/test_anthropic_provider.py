"""`--provider anthropic`: the official anthropic SDK against a real local server that validates requests
as Anthropic's Messages API does; the requests are JudgeBench's, and a whole run replays claude-3-haiku's
official score on the Claude pairs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from judgebench_flows.calls.anthropic_api import AnthropicTransport
from judgebench_flows.calls.anthropic_rules import ANTHROPIC_VERSION, anthropic_rule
from judgebench_flows.calls.caller import ChatCaller
from judgebench_flows.calls.providers import provider_rule
from judgebench_flows.core.completion import CallFailed
from judgebench_flows.core.errors import FatalEndpointError
from judgebench_flows.testing.fake_anthropic import FakeAnthropicServer
from tests._helpers import complete_once, provider_caller, run_command
from tests._replay import judgment_set, official_score, replay_responder
from tests.conftest import CANARY_KEY, CLAUDE_FILE, SHARED, load_jsonl

HAIKU = "claude-3-haiku-20240307"
SYSTEM = {"role": "system", "content": "You are an impartial judge."}
USER = {"role": "user", "content": "Which answer is better?"}


def caller_for(server: FakeAnthropicServer, model: str = HAIKU, **fields) -> ChatCaller:
    return provider_caller(server, "anthropic", model, CANARY_KEY, **fields)


def recording(answer: str, bodies: list[dict]):
    def respond(body: dict) -> str:
        bodies.append(body)
        return answer

    return respond


def test_the_request_is_judgebenchs_system_on_top_temperature_zero_and_only_messages_params() -> None:
    bodies: list[dict] = []
    with FakeAnthropicServer(recording("[[A>B]]", bodies), api_key=CANARY_KEY) as server:
        sampling = {"temperature": 0.0, "max_tokens": 4096, "presence_penalty": 0.0}
        completion = complete_once(caller_for(server), [SYSTEM, USER], sampling)
    assert completion.text == "[[A>B]]" and completion.finish_reason == "stop"
    assert bodies == [
        {
            "model": HAIKU,
            "max_tokens": 4096,
            "temperature": 0.0,
            "system": SYSTEM["content"],
            "messages": [USER],
        }
    ]


def test_rate_limits_and_overload_are_retried_after_retry_after() -> None:
    with FakeAnthropicServer("[[B>A]]", fail_first=1, fail_kind="429", retry_after=0.2) as server:
        caller = caller_for(server)
        completion = complete_once(caller, [USER], {"max_tokens": 16})
        assert completion.text == "[[B>A]]"
        assert server.status_counts == {429: 1, 200: 1} and caller.stats.retries == 1
        server.configure(fail_first=2, fail_kind="503")  # Anthropic's 529 "overloaded"
        caller = caller_for(server)
        complete_once(caller, [{"role": "user", "content": "again"}], {"max_tokens": 16})
        assert server.status_counts[529] == 2 and caller.stats.retries == 2


def test_a_bad_key_stops_the_run_and_never_shows_the_key() -> None:
    """The message names where an Anthropic run's key comes from, not OpenAI's variable."""
    from judgebench_flows.core.endpoint import EndpointSettings

    with FakeAnthropicServer("[[A>B]]", api_key="the-right-key") as server:
        settings = EndpointSettings(provider="anthropic", base_url=server.base_url)
        rule = provider_rule("anthropic", HAIKU, "auto", ())
        caller = ChatCaller(settings, model=HAIKU, api_key=CANARY_KEY, request_rule=rule)
        with pytest.raises(FatalEndpointError) as caught:
            complete_once(caller, [USER], {"max_tokens": 16})
    message = str(caught.value)
    assert "401" in message and "check $ANTHROPIC_API_KEY" in message and CANARY_KEY not in message


def test_a_400_naming_a_sampling_parameter_drops_it_for_the_run_and_is_recorded() -> None:
    bodies: list[dict] = []
    model = "claude-new-model-that-refuses-top-k"
    with FakeAnthropicServer(recording("[[A>B]]", bodies), rejected_params={"top_k"}) as server:
        caller = caller_for(server, model=model)
        complete_once(caller, [USER], {"temperature": 0.0, "top_k": 5, "max_tokens": 32})
    assert bodies == [{"model": model, "max_tokens": 32, "temperature": 0.0, "system": "", "messages": [USER]}]
    [adjustment] = caller.adjustments
    assert adjustment["param"] == "top_k" and adjustment["action"] == "dropped"
    assert "not supported" in adjustment["endpoint_said"]


def test_api_version_2026_refuses_sampling_and_its_rule_sends_none() -> None:
    """The version SDK 2.x names by default refuses temperature even at 0: the 2023-06-01 rule sent under it
    is refused, the 2026-10-21 rule is accepted; every request names the version it is valid for."""
    bodies: list[dict] = []

    async def post(rule_version: str) -> object:
        transport = AnthropicTransport(server.base_url, HAIKU, "k", 10.0, 1, version="2026-10-21")
        rule = anthropic_rule(HAIKU, rule_version)
        params = {n: v for n, v in {"temperature": 0.0, "max_tokens": 8}.items() if n in (rule.keep_only or ())}
        try:
            return await transport.post([USER], params)
        finally:
            await transport.aclose()

    from judgebench_flows.calls.errors import CallError

    with FakeAnthropicServer(recording("[[A>B]]", bodies)) as server:
        with pytest.raises(CallError) as refused:
            asyncio.run(post(ANTHROPIC_VERSION))
        assert refused.value.status == 400 and refused.value.param == "temperature"
        assert refused.value.error["code"] == "unsupported_parameter"
        asyncio.run(post("2026-10-21"))
    assert bodies == [{"model": HAIKU, "max_tokens": 8, "system": "", "messages": [USER]}]
    assert anthropic_rule(HAIKU).keep_only is not None and "temperature" in anthropic_rule(HAIKU).keep_only


def test_an_invalid_request_fails_that_call_with_the_apis_message() -> None:
    with FakeAnthropicServer("[[A>B]]") as server:
        with pytest.raises(CallFailed) as failed:
            complete_once(caller_for(server), [USER], {"max_tokens": 8, "temperature": 1.5})
    assert "HTTP 400" in str(failed.value)


@pytest.mark.slow
def test_claude_3_haiku_replay_reproduces_its_official_score_on_the_claude_pairs(
    run_cli, judgebench_repo, tmp_path: Path
) -> None:
    """The whole run through `--provider anthropic`: 32.22 on the Claude pairs, as JudgeBench reports for
    claude-3-haiku, from a synthetic judgment set with that score (JudgeBench's recorded verdicts are not
    available here); every request valid for the API version it names, temperature 0 in each, and the
    follow-up turn sent as a second user turn."""
    pairs = load_jsonl(SHARED / "data" / CLAUDE_FILE)
    decisions = judgment_set(pairs, correct=87)
    assert official_score(pairs, decisions) == 32.22
    bodies: list[dict] = []
    replay = replay_responder(pairs, decisions)

    def respond(body: dict) -> str:
        bodies.append(body)
        return replay(body)

    with FakeAnthropicServer(respond, api_key=CANARY_KEY, rate_429=0.02, rate_503=0.02, seed=3) as server:
        command = run_command(judgebench_repo, server, tmp_path, "--provider", "anthropic", model=HAIKU)
        command[command.index("--data-file") + 1] = CLAUDE_FILE
        result = run_cli(*command, env={"ANTHROPIC_API_KEY": CANARY_KEY, "OPENAI_API_KEY": ""})
        assert result.returncode == 0, result.stderr[-3000:]
        assert server.status_counts.get(400, 0) == 0
    results = json.loads((tmp_path / "results/judgebench.json").read_text())
    assert round(100 * results["overall_accuracy"]["accuracy"], 2) == 32.22
    assert all(b["temperature"] == 0.0 and b["system"] and b["max_tokens"] == 4096 for b in bodies)
    follow_ups = [b for b in bodies if len(b["messages"]) == 3]
    assert follow_ups and all([m["role"] for m in b["messages"]] == ["user", "assistant", "user"] for b in follow_ups)
    written = "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".db")
    assert CANARY_KEY not in written + result.stdout + result.stderr
    assert results["run"]["requests"]["rule"] == f"anthropic-{ANTHROPIC_VERSION}"

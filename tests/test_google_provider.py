"""`--provider gemini` and `--provider vertex`: the openai SDK against local servers that enforce what
Google's endpoints enforce (`testing/fake_google`), and google-auth's service-account flow for real
against a loopback token endpoint (a service-account file with a fresh RSA key whose `token_uri` points
at it). The requests are JudgeBench's; whole runs replay JudgeBench's scores; a Vertex run outlives
several tokens without a failed judgment; no key, token or private key reaches anything written."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from judgebench_flows.calls.caller import ChatCaller
from judgebench_flows.calls.google_api import VertexToken, token_budget
from judgebench_flows.calls.providers import provider_rule
from judgebench_flows.calls.state import CallState
from judgebench_flows.core.completion import CallFailed
from judgebench_flows.core.endpoint import EndpointSettings
from judgebench_flows.core.errors import FatalEndpointError
from judgebench_flows.testing.fake_google import FakeGoogleServer, FakeTokenServer
from tests._helpers import run_command
from tests._replay import judgment_set, official_score, replay_responder
from tests.conftest import CANARY_KEY, CLAUDE_FILE, GPT4O_FILE, SHARED, load_jsonl

FLASH = "gemini-2.0-flash"
SYSTEM = {"role": "system", "content": "You are an impartial judge."}
USER = {"role": "user", "content": "Which answer is better?"}
ARENA_HARD = {"temperature": 0.0, "max_tokens": 4096}


def recording(answer: str, bodies: list[dict]):
    def respond(body: dict) -> str:
        bodies.append(body)
        return answer

    return respond


def caller_for(
    server: FakeGoogleServer, provider: str, model: str = FLASH, state: CallState | None = None, **settings
) -> ChatCaller:
    endpoint = EndpointSettings(provider=provider, base_url=server.base_url, retry_initial_wait=0.01, **settings)  # type: ignore[arg-type]
    rule = provider_rule(provider, model, "auto", ())
    return ChatCaller(endpoint, model=model, api_key=CANARY_KEY, request_rule=rule, state=state or CallState())


def complete(caller: ChatCaller, messages: list[dict], sampling: dict, times: int = 1):
    async def go():
        try:
            return await asyncio.gather(
                *(
                    caller.complete(
                        [*messages[:-1], {**messages[-1], "content": f"{messages[-1]['content']} {i}"}], sampling
                    )
                    for i in range(times)
                )
            )
        finally:
            await caller.aclose()

    answers = asyncio.run(go())
    return answers[0] if times == 1 else answers


@pytest.fixture()
def credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A token endpoint on loopback and a service-account file for it, as Application Default Credentials."""
    with FakeTokenServer(lifetime=3600) as tokens:
        path = tokens.service_account(tmp_path / "service-account.json")
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
        yield tokens


def test_gemini_gets_judgebenchs_request_with_its_key_as_a_bearer_key() -> None:
    bodies: list[dict] = []
    with FakeGoogleServer(recording("[[A>B]]", bodies), api_key=CANARY_KEY) as server:
        completion = complete(caller_for(server, "gemini"), [SYSTEM, USER], ARENA_HARD)
    assert completion.text == "[[A>B]]"
    assert bodies == [{"model": FLASH, "messages": [SYSTEM, {**USER, "content": USER["content"] + " 0"}], **ARENA_HARD}]


def test_a_wrong_gemini_key_stops_the_run_naming_GEMINI_API_KEY_never_the_key() -> None:
    """Google answers a wrong key 400 API_KEY_INVALID: read as the bad key it is, not as a bad request."""
    with FakeGoogleServer("[[A>B]]", api_key="the-right-key") as server:
        with pytest.raises(FatalEndpointError) as caught:
            complete(caller_for(server, "gemini"), [USER], ARENA_HARD)
        assert server.status_counts == {400: 1}
    message = str(caught.value)
    assert "check $GEMINI_API_KEY" in message and CANARY_KEY not in message


def test_an_answer_without_a_message_is_retried_as_judgebench_does() -> None:
    with FakeGoogleServer("[[B>A]]", rate_empty=0.4, seed=5) as server:
        caller = caller_for(server, "gemini")
        answers = complete(caller, [USER], ARENA_HARD, times=20)
    assert all(a.text == "[[B>A]]" for a in answers)
    assert server.empty_answers >= 4 and caller.stats.retries == server.empty_answers and caller.stats.failed == 0


def test_gemini_25_thinks_within_max_tokens_so_the_judges_budget_gets_room_to_think() -> None:
    """A 2.5 model's thinking counts against max_tokens: the judge's 1024 alone would end in "length" with
    no verdict; sent with room for thinking (and never above the model's cap, which it refuses), it answers,
    and its thinking (reported in total_tokens only) is paid as output."""
    bodies: list[dict] = []
    with FakeGoogleServer(recording("[[A>B]]", bodies), thinking_tokens=3000) as server:
        completion = complete(caller_for(server, "gemini", "gemini-2.5-flash"), [USER], {"max_tokens": 1024})
        assert completion.text == "[[A>B]]" and completion.completion_tokens == 3001
        assert bodies[-1]["max_tokens"] == 1024 + 24576
        complete(caller_for(server, "gemini", "gemini-2.5-pro"), [USER], {"max_tokens": 60000})
        assert bodies[-1]["max_tokens"] == 65536 and server.status_counts == {200: 2}
    assert token_budget(FLASH, {"max_tokens": 1024}) == {"max_tokens": 1024}  # 2.0 does not think: as JudgeBench sends
    assert token_budget("gemini-2.5-flash", {"max_tokens": 1024, "reasoning_effort": "low"})["max_tokens"] == 2048


def test_a_field_google_does_not_know_is_dropped_for_the_run_and_recorded() -> None:
    bodies: list[dict] = []
    with FakeGoogleServer(recording("[[A>B]]", bodies), rejected_params={"top_p"}) as server:
        caller = caller_for(server, "gemini")
        complete(caller, [USER], {"temperature": 0.0, "top_p": 1.0, "max_tokens": 1024})
        assert server.status_counts == {400: 1, 200: 1}
    assert "top_p" not in bodies[-1]
    [adjustment] = caller.adjustments
    assert adjustment["param"] == "top_p" and adjustment["action"] == "dropped"
    assert "Unknown name" in adjustment["endpoint_said"]


def test_an_invalid_request_fails_that_call_with_googles_message() -> None:
    with FakeGoogleServer("[[A>B]]") as server:
        with pytest.raises(CallFailed) as failed:
            complete(caller_for(server, "gemini"), [USER], {"temperature": 3.0, "max_tokens": 64})
        assert complete(caller_for(server, "gemini"), [USER], {"max_tokens": 100_000}).text == "[[A>B]]"  # sent capped
    assert "HTTP 400" in str(failed.value) and "temperature value of 3" in str(failed.value)


def test_vertex_sends_google_model_names_with_one_shared_token_from_the_service_account(credentials) -> None:
    bodies: list[dict] = []
    with FakeGoogleServer(recording("[[B>A]]", bodies), mode="vertex", tokens=credentials) as server:
        answers = complete(caller_for(server, "vertex", concurrency=8), [SYSTEM, USER], ARENA_HARD, times=12)
        assert all(a.text == "[[B>A]]" for a in answers)
        assert {b["model"] for b in bodies} == {f"google/{FLASH}"} and credentials.issued == 1
        assert server.unauthenticated == 0 and credentials.refused == []


def test_vertex_takes_a_fresh_token_once_when_a_call_is_answered_401(credentials) -> None:
    """A token revoked (or expired early) is refreshed once and the call goes through; 401 again is a
    credentials problem: the run stops naming the Application Default Credentials."""
    run = CallState()  # one run's callers: one token
    with FakeGoogleServer("[[A>B]]", mode="vertex", tokens=credentials) as server:
        complete(caller_for(server, "vertex", state=run), [USER], ARENA_HARD)
        credentials.expire_all()
        caller = caller_for(server, "vertex", state=run)
        assert complete(caller, [USER], ARENA_HARD, times=4)[0].text == "[[A>B]]"
        assert server.unauthenticated >= 1 and caller.stats.failed == 0 and caller.stats.retries == 0
        assert credentials.issued == 2

    with FakeTokenServer() as stranger, FakeGoogleServer("[[A>B]]", mode="vertex", tokens=stranger) as server:
        with pytest.raises(FatalEndpointError) as caught:
            complete(caller_for(server, "vertex"), [USER], ARENA_HARD)
    assert "Application Default Credentials" in str(caught.value)


def test_vertex_tokens_are_refreshed_before_they_expire(credentials) -> None:
    """Tokens living 2 s, calls for more than three lifetimes: each refreshed before it expires, none
    refused, all calls sharing one refresh at a time."""
    credentials.lifetime = 2
    token = VertexToken()

    async def calls() -> list[str]:
        seen = []
        for _ in range(36):
            seen.append(await token.bearer())
            await asyncio.sleep(0.2)
        return seen

    seen = asyncio.run(calls())
    assert 4 <= credentials.issued <= 8 and token.refreshes == credentials.issued
    assert len(set(seen)) == credentials.issued


def test_vertex_refuses_batch_and_keys_in_one_line(run_cli, tmp_path: Path) -> None:
    for extra, said in (
        (["--batch"], "needs a Cloud Storage bucket"),
        (["--api-key-env", "SOME_KEY"], "Application Default Credentials"),
    ):
        result = run_cli("run", "--provider", "vertex", "--model", FLASH, "--vertex-project", "p-1", *extra)
        assert result.returncode == 2, result.stderr
        errors = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(errors) == 1 and said in errors[0] and "Traceback" not in result.stderr, result.stderr
    missing, data = str(tmp_path / "no-such-file.json"), tmp_path / "pairs.jsonl"
    pair = {"pair_id": "p", "source": "livebench-math", "question": "q", "response_A": "a", "response_B": "b"}
    data.write_text(json.dumps({**pair, "label": "A>B"}) + "\n")
    result = run_cli(
        "run", "--provider", "vertex", "--model", FLASH, "--vertex-project", "p-1", "--data-path", str(data),
        env={"GOOGLE_APPLICATION_CREDENTIALS": missing},
    )  # fmt: skip
    assert result.returncode == 2 and "no Application Default Credentials" in result.stderr, result.stderr


@pytest.mark.slow
def test_gemini_replay_reproduces_o1_minis_score_through_the_gemini_api(
    run_cli, judgebench_repo, tmp_path: Path
) -> None:
    """A whole run with `--provider gemini` and Google's faults (429, 503, answers without a message):
    65.71 on the GPT-4o pairs from a judgment set with that score, every request JudgeBench's."""
    pairs = load_jsonl(SHARED / "data" / GPT4O_FILE)
    decisions = judgment_set(pairs, correct=230)
    assert official_score(pairs, decisions) == 65.71
    bodies: list[dict] = []
    replay = replay_responder(pairs, decisions)

    def respond(body: dict) -> str:
        bodies.append(body)
        return replay(body)

    with FakeGoogleServer(respond, api_key=CANARY_KEY, rate_429=0.02, rate_503=0.02, rate_empty=0.02, seed=3) as server:
        command = run_command(judgebench_repo, server, tmp_path, "--provider", "gemini", model=FLASH)
        result = run_cli(*command, env={"GEMINI_API_KEY": CANARY_KEY, "OPENAI_API_KEY": ""})
        assert result.returncode == 0, result.stderr[-3000:]
        assert server.empty_answers > 0 and server.status_counts.get(400, 0) == 0
    results = json.loads((tmp_path / "results/judgebench.json").read_text())
    assert round(100 * results["overall_accuracy"]["accuracy"], 2) == 65.71
    assert all(b["temperature"] == 0.0 and b["max_tokens"] == 4096 and b["model"] == FLASH for b in bodies)
    written = "".join(p.read_bytes().decode("latin-1") for p in tmp_path.rglob("*") if p.is_file())
    assert CANARY_KEY not in written + result.stdout + result.stderr


@pytest.mark.slow
def test_a_vertex_run_longer_than_three_token_lifetimes_has_no_failed_judgment(
    run_cli, judgebench_repo, tmp_path: Path
) -> None:
    """`--provider vertex` with the service-account flow for real, tokens living 2 s and calls spread over
    more than three lifetimes: claude-3-haiku's 32.22 on the Claude pairs, 0 failed judgments, no call
    refused for an expired token, and neither a token nor the private key in anything the run wrote or
    printed."""
    pairs = load_jsonl(SHARED / "data" / CLAUDE_FILE)
    decisions = judgment_set(pairs, correct=87)
    replay = replay_responder(pairs, decisions)
    called: list[float] = []

    def respond(body: dict) -> str:
        called.append(time.monotonic())
        return replay(body)

    lifetime = 2
    with FakeTokenServer(lifetime=lifetime) as tokens:
        account = tokens.service_account(tmp_path.parent / f"{tmp_path.name}-service-account.json")
        with FakeGoogleServer(respond, mode="vertex", tokens=tokens, latency=0.25) as server:
            command = run_command(
                judgebench_repo, server, tmp_path, "--provider", "vertex", model=FLASH, concurrency=16
            )
            command[command.index("--data-file") + 1] = CLAUDE_FILE
            result = run_cli(*command, env={"GOOGLE_APPLICATION_CREDENTIALS": str(account)})
            assert result.returncode == 0, result.stderr[-3000:]
        results = json.loads((tmp_path / "results/judgebench.json").read_text())
        assert round(100 * results["overall_accuracy"]["accuracy"], 2) == 32.22
        assert results["invalid"]["failed_judgments"] == 0
        assert max(called) - min(called) > 3 * lifetime
        # Each token refreshed before it expired: none refused, no call answered 401.
        assert tokens.issued >= 4 and tokens.refused == [] and server.unauthenticated == 0, tokens.issued
        written = "".join(p.read_bytes().decode("latin-1") for p in tmp_path.rglob("*") if p.is_file())
        assert "ya29." not in written + result.stdout + result.stderr
        assert "PRIVATE KEY" not in written + result.stdout + result.stderr


@pytest.mark.slow
def test_a_gemini_run_is_estimated_budgeted_and_costed_at_geminis_prices(
    run_cli, judgebench_repo, tmp_path: Path
) -> None:
    """`judgebench estimate --provider gemini --model gemini-2.5-flash` prices a run at the Gemini API's
    bundled price (its worst case with the room a 2.5 model gets to think); through the stand-in (which
    bills nothing: unpriced unless --prices names it) a budget below the worst case is refused before any
    call, and a run's cost is in results.json and the history."""
    env = {"GEMINI_API_KEY": CANARY_KEY, "OPENAI_API_KEY": ""}
    model = "gemini-2.5-flash"
    with FakeGoogleServer("My final verdict is [[A>B]]", api_key=CANARY_KEY, thinking_tokens=200) as server:
        command = run_command(judgebench_repo, server, tmp_path, "--provider", "gemini", model=model, max_samples=10)
        at_google = command[1:]
        index = at_google.index("--base-url")
        del at_google[index : index + 2]  # Google's own endpoint: the bundled price applies (estimate calls nothing)
        estimate = run_cli("estimate", *at_google, env=env)
        assert estimate.returncode == 0, estimate.stderr
        assert "worst case: $" in estimate.stdout and "bundled, read 2025-09-01" in estimate.stdout, estimate.stdout
        prices = tmp_path / "gemini-prices.yaml"
        prices.write_text(f"models:\n  {model}: {{input_per_mtok: 0.30, output_per_mtok: 2.50}}\n")
        command += ["--prices", str(prices)]
        refused = run_cli(*command, "--max-cost", "0.01", env=env)
        assert refused.returncode == 2 and "worst case is $" in refused.stderr, refused.stderr
        assert server.requests == 0
        result = run_cli(*command, "--max-cost", "5", env=env)
        assert result.returncode == 0, result.stderr[-3000:]
    usage = json.loads((tmp_path / "results/judgebench.json").read_text())["usage"]
    assert usage["prices"]["model"] == model and usage["prices"]["input_per_mtok"] == 0.30
    expected = (usage["prompt_tokens"] * 0.30 + usage["completion_tokens"] * 2.50) / 1e6
    assert usage["cost_usd"] == pytest.approx(expected, abs=1e-6) and usage["completion_tokens"] >= 200 * 20
    history = run_cli("history", "--db-url", f"sqlite:///{tmp_path}/judgebench.db", env={"COLUMNS": "250"})
    assert f"${usage['cost_usd']:.4f}" in history.stdout, history.stdout


def test_vertex_and_gemini_hosts_are_the_providers_own_and_priced_from_the_bundled_table() -> None:
    from judgebench_flows.core.pricing import price_for, providers_own_endpoint

    vertex = "https://us-central1-aiplatform.googleapis.com/v1/projects/p/locations/us-central1/endpoints/openapi"
    assert providers_own_endpoint(vertex) and providers_own_endpoint("https://aiplatform.googleapis.com/v1/x")
    assert providers_own_endpoint("https://generativelanguage.googleapis.com/v1beta/openai")
    assert not providers_own_endpoint("https://aiplatform.googleapis.com.example.com/v1")
    price = price_for("gemini-2.5-flash", None, batch=True, base_url=vertex)
    assert price is not None and (price.input_per_mtok, price.output_per_mtok, price.factor) == (0.30, 2.50, 0.5)

"""`--provider bedrock`: the Converse API signed by botocore (SigV4) against a real local server that
recomputes every signature with botocore and validates requests per model family as Bedrock does; AWS's
credential chain (environment, profile, credential_process); throttling retried; a whole run replays
claude-3-haiku's official score on the Claude pairs through Bedrock."""

from __future__ import annotations

import asyncio
import json
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from judgebench_flows.calls.bedrock_api import BedrockTransport, converse_body
from judgebench_flows.calls.bedrock_rules import bedrock_rule, family_of, model_id
from judgebench_flows.calls.caller import ChatCaller
from judgebench_flows.calls.errors import CallError
from judgebench_flows.core.errors import FatalEndpointError, UserError
from judgebench_flows.testing.fake_bedrock import FakeBedrockServer, SigV4Check
from tests._helpers import complete_once, only_these_aws_credentials, provider_caller, run_command
from tests._replay import judgment_set, official_score, replay_responder
from tests.conftest import CLAUDE_FILE, SHARED, load_jsonl

KEY_ID = "AKIAJUDGEBENCHTEST01"
SECRET = "bedrock-secret-canary-2b7f9e4c1d8a6f3e"
TOKEN = "bedrock-session-token-canary-9c4e1f7a"
HAIKU = "anthropic.claude-3-haiku-20240307-v1:0"
SYSTEM = {"role": "system", "content": "You are an impartial judge."}
USER = {"role": "user", "content": "Which answer is better?"}


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    only_these_aws_credentials(monkeypatch, tmp_path, KEY_ID, SECRET)


@pytest.fixture()
def bedrock() -> Iterator[FakeBedrockServer]:
    with FakeBedrockServer("[[A>B]]", credentials={KEY_ID: (SECRET, None)}) as server:
        yield server


def caller_for(server: FakeBedrockServer, model: str = HAIKU, **fields) -> ChatCaller:
    return provider_caller(server, "bedrock", model, "EMPTY", **fields)


def test_model_ids_profiles_and_arns_name_their_family() -> None:
    assert model_id("us.anthropic.claude-3-haiku-20240307-v1:0") == HAIKU
    arn = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/global.anthropic.claude-sonnet-4-5-20250929-v1:0"
    assert family_of(arn).one_of == ("temperature", "top_p")
    assert family_of("meta.llama3-1-405b-instruct-v1:0").max_tokens == 2048
    assert not family_of("mistral.mixtral-8x7b-instruct-v0:1").system
    assert family_of("amazon.nova-pro-v1:0").prefix == ""


def test_the_request_is_judgebenchs_in_converse_shape(bedrock: FakeBedrockServer) -> None:
    """System on top, temperature 0, the judge's max_tokens (else 4096), top_k as Claude's own field."""
    completion = complete_once(caller_for(bedrock), [SYSTEM, USER], {"temperature": 0.0, "top_k": 5})
    assert completion.text == "[[A>B]]" and completion.prompt_tokens > 0
    (body,) = bedrock.bodies
    assert body["system"] == [{"text": SYSTEM["content"]}]
    assert body["messages"] == [{"role": "user", "content": [{"text": USER["content"]}]}]
    assert body["inferenceConfig"] == {"maxTokens": 4096, "temperature": 0.0}
    assert body["additionalModelRequestFields"] == {"top_k": 5}
    assert bedrock.signature_failures == 0


@pytest.mark.parametrize(
    ("model", "sampling", "expected"),
    [
        # Claude Sonnet 4.5 refuses temperature with top_p: JudgeBench's temperature is kept
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", {"temperature": 0.0, "top_p": 0.9}, {"temperature": 0.0}),
        # Llama: at most 2048 tokens, no stop sequences, no top_k
        ("meta.llama3-1-70b-instruct-v1:0", {"max_tokens": 4096, "stop": ["\n\n"], "top_k": 3}, {"maxTokens": 2048}),
        ("mistral.mistral-large-2407-v1:0", {"stop": "END", "top_k": 3}, {"maxTokens": 4096, "stopSequences": ["END"]}),
    ],
)
def test_each_familys_rules_keep_the_request_valid(
    bedrock: FakeBedrockServer, model: str, sampling: dict, expected: dict
) -> None:
    complete_once(caller_for(bedrock, model), [SYSTEM, USER], {"temperature": 0.0, **sampling})
    (body,) = bedrock.bodies
    assert body["inferenceConfig"] == {"maxTokens": expected.get("maxTokens", 4096), "temperature": 0.0, **expected}
    assert bedrock.status_counts == {200: 1}


def test_mistral_7b_gets_its_system_message_folded_into_the_first_turn(bedrock: FakeBedrockServer) -> None:
    assert bedrock_rule("mistral.mistral-7b-instruct-v0:2").fold_system
    complete_once(caller_for(bedrock, "mistral.mistral-7b-instruct-v0:2"), [SYSTEM, USER], {"temperature": 0.0})
    (body,) = bedrock.bodies
    assert "system" not in body and SYSTEM["content"] in body["messages"][0]["content"][0]["text"]


def test_the_server_enforces_what_the_rules_prevent() -> None:
    """Without the rules the same requests are refused, in Bedrock's words: the stand-in checks them."""
    from judgebench_flows.testing.fake_bedrock import body_problem

    both = converse_body(family_of(""), [USER], {"temperature": 0.0, "top_p": 0.5})
    assert "cannot both be specified" in str(body_problem("anthropic.claude-haiku-4-5-20251001-v1:0", both))
    assert "model limit of 2048" in str(
        body_problem("meta.llama3-70b-instruct-v1:0", converse_body(family_of(""), [USER], {}))
    )
    system = converse_body(family_of(""), [SYSTEM, USER], {})
    assert "system messages" in str(body_problem("mistral.mixtral-8x7b-instruct-v0:1", system))


def test_an_unforeseen_refusal_is_learned_and_recorded(bedrock: FakeBedrockServer) -> None:
    """A Claude model the table does not know yet refuses temperature with top_p: the 400 names top_p,
    which the run drops for that model from then on, keeping JudgeBench's temperature."""
    model = "anthropic.claude-opus-4-9-20270101-v1:0"  # the server refuses both for every Opus 4.x
    caller = caller_for(bedrock, model)
    complete_once(caller, [USER], {"temperature": 0.0, "top_p": 0.9})
    assert bedrock.status_counts == {400: 1, 200: 1}
    assert bedrock.bodies[-1]["inferenceConfig"] == {"maxTokens": 4096, "temperature": 0.0}
    (adjustment,) = caller.adjustments
    assert adjustment["param"] == "top_p" and adjustment["action"] == "dropped"


def test_throttling_is_retried_as_a_rate_limit(bedrock: FakeBedrockServer) -> None:
    bedrock.configure(fail_first=2, fail_kind="429")
    caller = caller_for(bedrock, max_retries=3, retry_initial_wait=0.01, retry_max_wait=0.02)
    assert complete_once(caller, [USER], {"temperature": 0.0}).text == "[[A>B]]"
    assert bedrock.status_counts == {429: 2, 200: 1}


def test_a_throttling_answer_is_a_rate_limit_error() -> None:
    with FakeBedrockServer("x", credentials={KEY_ID: (SECRET, None)}, fail_first=1, fail_kind="429") as server:
        wire = BedrockTransport(server.base_url, HAIKU, "EMPTY", 10, 2)

        async def go():
            try:
                await wire.post([USER], {})
            finally:
                await wire.aclose()

        with pytest.raises(CallError) as failed:
            asyncio.run(go())
    assert failed.value.rate_limited and failed.value.retryable and failed.value.code == "ThrottlingException"


def test_a_wrong_secret_is_refused_by_the_signature_and_stops_the_run(
    bedrock: FakeBedrockServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = "another-secret-canary-4e8d2a"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", wrong)
    with pytest.raises(FatalEndpointError) as failed:
        complete_once(caller_for(bedrock), [USER], {"temperature": 0.0})
    assert "signature we calculated does not match" in str(failed.value)
    assert wrong not in str(failed.value) and SECRET not in str(failed.value)
    assert bedrock.signature_failures == 1 and bedrock.status_counts == {403: 1}


def test_the_signature_covers_the_body_path_and_time() -> None:
    """The stand-in's check is botocore's signature: a request botocore signed passes, the same request
    with another body, path or an old date does not."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    check = SigV4Check({KEY_ID: (SECRET, TOKEN)}, "us-east-1")
    url = "http://127.0.0.1:9/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse"
    request = AWSRequest(method="POST", url=url, data=b'{"messages": []}', headers={"Content-Type": "application/json"})
    SigV4Auth(Credentials(KEY_ID, SECRET, TOKEN), "bedrock", "us-east-1").add_auth(request)
    headers = {**dict(request.headers.items()), "Host": "127.0.0.1:9"}
    assert check.problem("POST", url, headers, b'{"messages": []}') is None
    assert check.problem("POST", url, headers, b'{"messages": [1]}') == (
        "InvalidSignatureException",
        check.problem("POST", url.replace("haiku", "opus"), headers, b'{"messages": []}')[1],  # type: ignore[index]
    )
    old = {**headers, "X-Amz-Date": "20200101T000000Z"}
    assert "Signature expired" in check.problem("POST", url, old, b'{"messages": []}')[1]  # type: ignore[index]
    assert check.problem("POST", url, {**headers, "X-Amz-Security-Token": "x"}, b'{"messages": []}')[0] == (
        "UnrecognizedClientException"
    )


def test_credentials_and_region_from_a_profile_with_credential_process(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """AWS's chain, not our own: a profile whose credential_process hands out temporary credentials (as
    SSO helpers and aws-vault do), its region from the config file; the session token is signed along."""
    helper = tmp_path / "credentials.py"
    answer = {"Version": 1, "AccessKeyId": KEY_ID, "SecretAccessKey": SECRET, "SessionToken": TOKEN}
    answer["Expiration"] = "2999-01-01T00:00:00Z"
    helper.write_text(f"print({json.dumps(json.dumps(answer))})\n")
    helper.chmod(helper.stat().st_mode | stat.S_IEXEC)
    config = tmp_path / "aws-config"
    config.write_text(f"[profile judge]\nregion = eu-west-1\ncredential_process = {sys.executable} {helper}\n")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_PROFILE", "judge")
    with FakeBedrockServer("[[B>A]]", credentials={KEY_ID: (SECRET, TOKEN)}, region="eu-west-1") as server:
        assert complete_once(caller_for(server), [USER], {"temperature": 0.0}).text == "[[B>A]]"
        assert server.signature_failures == 0


def test_missing_credentials_or_region_are_one_line_before_any_call(monkeypatch: pytest.MonkeyPatch) -> None:
    from judgebench_flows.core import aws_credentials

    monkeypatch.delenv("AWS_REGION")
    with pytest.raises(UserError, match="no AWS region; set AWS_REGION"):
        aws_credentials.region(aws_credentials.session())
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(UserError, match="no AWS credentials found"):
        aws_credentials.credentials(aws_credentials.session())


def test_the_endpoint_comes_from_the_option_the_environment_or_the_region(monkeypatch: pytest.MonkeyPatch) -> None:
    from judgebench_flows.core.config import build_config

    config = build_config(model=HAIKU, provider="bedrock")
    assert config.resolved_base_url() == "https://bedrock-runtime.us-east-1.amazonaws.com"
    monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", "http://127.0.0.1:9")
    assert config.resolved_base_url() == "http://127.0.0.1:9"
    assert build_config(model=HAIKU, provider="bedrock", base_url="http://h:1").resolved_base_url() == "http://h:1"
    with pytest.raises(UserError, match="not a key"):
        build_config(model=HAIKU, provider="bedrock", api_key_env="AWS_SECRET_ACCESS_KEY")


@pytest.mark.slow
def test_claude_3_haiku_on_bedrock_reproduces_its_official_score(run_cli, judgebench_repo, tmp_path: Path) -> None:
    """The whole run through `--provider bedrock` with the endpoint from AWS_ENDPOINT_URL_BEDROCK_RUNTIME:
    32.22 on the Claude pairs, as JudgeBench reports for claude-3-haiku, from a synthetic judgment set with
    that score; every request signed and checked, some throttled and retried; no secret written anywhere."""
    pairs = load_jsonl(SHARED / "data" / CLAUDE_FILE)
    decisions = judgment_set(pairs, correct=87)
    assert official_score(pairs, decisions) == 32.22
    replay = replay_responder(pairs, decisions)
    with FakeBedrockServer(replay, credentials={KEY_ID: (SECRET, TOKEN)}, rate_429=0.03, seed=5) as server:
        command = run_command(judgebench_repo, server, tmp_path, "--provider", "bedrock", model=HAIKU)
        at = command.index("--base-url")
        del command[at : at + 2]
        command[command.index("--data-file") + 1] = CLAUDE_FILE
        env = {
            "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": server.base_url,
            "AWS_SESSION_TOKEN": TOKEN,
            "OPENAI_API_KEY": "",
        }
        result = run_cli(*command, env=env)
        assert result.returncode == 0, result.stderr[-3000:]
        counts = server.status_counts
        assert server.signature_failures == 0 and counts.get(400, 0) == 0 and counts.get(429, 0) > 0
    results = json.loads((tmp_path / "results/judgebench.json").read_text())
    assert round(100 * results["overall_accuracy"]["accuracy"], 2) == 32.22
    assert results["run"]["requests"]["rule"] == "bedrock-anthropic"
    assert all(b["inferenceConfig"]["temperature"] == 0.0 and b["system"] for b in server.bodies)
    written = "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".db")
    written += "".join(p.read_bytes().decode(errors="replace") for p in tmp_path.rglob("*.db"))
    for secret in (SECRET, TOKEN):
        assert secret not in written + result.stdout + result.stderr

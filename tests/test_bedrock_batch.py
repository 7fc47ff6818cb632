"""`--batch --provider bedrock`: Bedrock's batch inference (CreateModelInvocationJob with Converse records in
S3, GetModelInvocationJob polled, the `.jsonl.out` read back) against a real S3 API (moto's server) and a
control-plane stand-in that checks every SigV4 signature with botocore and fails jobs as Bedrock does
(fewer than 100 records, a malformed role ARN); the options checked before any call, rounds under 100
records sent synchronously, expired and failed records answered later, a killed run re-attached without a
second job, and claude-3-haiku's official 32.22 through it."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from judgebench_flows.calls.caller import ChatCaller
from judgebench_flows.calls.retry import RetryPolicy
from judgebench_flows.core.config import build_config
from judgebench_flows.core.errors import UserError
from judgebench_flows.data import db
from judgebench_flows.testing.fake_bedrock import FakeBedrockBatchServer
from tests._helpers import batch_requests as requests
from tests._helpers import (
    cancel_after_first_batch,
    judge_each,
    kill_after_first_batch_and_rerun,
    only_these_aws_credentials,
    provider_caller,
    run_command,
)
from tests._replay import judgment_set, official_score, replay_responder
from tests._s3 import S3Server
from tests.conftest import CLAUDE_FILE, SHARED, load_jsonl

KEY_ID = "AKIAJUDGEBENCHBATCH1"
SECRET = "bedrock-batch-secret-canary-4c1d8a6f3e2b"
HAIKU = "anthropic.claude-3-haiku-20240307-v1:0"
BUCKET = "judgebench-batch"
ROLE = "arn:aws:iam::123456789012:role/BedrockBatchJudging"
SAMPLING = {"temperature": 0.0, "max_tokens": 1024}
BATCH_OPTIONS = {
    "bedrock_batch_input": f"s3://{BUCKET}/input/",
    "bedrock_batch_output": f"s3://{BUCKET}/output/",
    "bedrock_role_arn": ROLE,
}


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with S3Server() as server:
        server.make_bucket(BUCKET)
        yield server


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    only_these_aws_credentials(monkeypatch, tmp_path, KEY_ID, SECRET)


def bedrock_server(s3: S3Server, answer: Any = "[[A>B]]", **options: Any) -> FakeBedrockBatchServer:
    return FakeBedrockBatchServer(answer, credentials={KEY_ID: (SECRET, None)}, s3_endpoint=s3.url, **options)


def batch_caller(
    server: FakeBedrockBatchServer, s3: S3Server, monkeypatch: pytest.MonkeyPatch, engine=None
) -> ChatCaller:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3.url)
    monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK", server.base_url)
    return provider_caller(
        server,
        "bedrock",
        HAIKU,
        "EMPTY",
        batch=True,
        batch_poll_seconds=0.1,
        engine=engine,
        retry=RetryPolicy(max_retries=6, initial_wait=0.05, max_wait=0.2),
        **BATCH_OPTIONS,
    )


def judge_all(caller: ChatCaller, n: int) -> list:
    return judge_each(caller, requests(n), SAMPLING)


def test_batch_options_are_checked_before_any_call() -> None:
    with pytest.raises(UserError) as missing:
        build_config(model=HAIKU, provider="bedrock", batch=True)
    message = str(missing.value)
    assert "--bedrock-batch-input" in message and "--bedrock-role-arn" in message and "\n" not in message
    with pytest.raises(UserError, match="--bedrock-role-arn: expected arn:aws:iam"):
        build_config(model=HAIKU, provider="bedrock", batch=True, **{**BATCH_OPTIONS, "bedrock_role_arn": "Role"})
    with pytest.raises(UserError, match="--bedrock-batch-output: expected s3://"):
        build_config(model=HAIKU, provider="bedrock", batch=True, **{**BATCH_OPTIONS, "bedrock_batch_output": "/tmp"})
    assert build_config(model=HAIKU, provider="bedrock", batch=True, **BATCH_OPTIONS).endpoint.batch


def test_one_job_holds_the_rounds_records_as_converse_bodies(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    with bedrock_server(s3) as server:
        caller = batch_caller(server, s3, monkeypatch)
        answers = judge_all(caller, 120)
        assert [getattr(a, "text", a) for a in answers] == ["[[A>B]]"] * 120
        assert server.requests == 0 and server.batches_created == 1 and server.signature_failures == 0
        [job] = server.jobs.values()
    assert job["status"] == "Completed" and job["modelId"] == HAIKU and job["roleArn"] == ROLE
    assert job["modelInvocationType"] == "Converse" and len(job["records"]) == 120
    body = job["records"][0]["modelInput"]
    assert body["system"] == [{"text": "Judge."}] and body["inferenceConfig"] == {"maxTokens": 1024, "temperature": 0.0}
    written = s3.objects(BUCKET)
    assert any(k.startswith("input/judgebench-") for k in written)
    assert any(k.endswith(".jsonl.out") for k in written) and any(k.endswith("manifest.json.out") for k in written)
    assert caller.stats.answered == 120 and caller.stats.failed == 0


def test_a_round_under_100_records_is_sent_synchronously(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bedrock takes no job of fewer than 100 records: the run says so and calls Converse instead."""
    with bedrock_server(s3) as server:
        answers = judge_all(batch_caller(server, s3, monkeypatch), 30)
        assert [getattr(a, "text", a) for a in answers] == ["[[A>B]]"] * 30
        assert server.batches_created == 0 and server.requests == 30


def test_the_stand_in_fails_a_job_as_bedrock_does(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job of 5 records fails at validation with Bedrock's reason; a wrong signature is refused."""
    import botocore.session

    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3.url)
    with bedrock_server(s3) as server:
        session = botocore.session.Session()
        client = session.create_client("bedrock", region_name="us-east-1", endpoint_url=server.base_url)
        store = session.create_client("s3", region_name="us-east-1")
        records = "".join(json.dumps({"recordId": f"r{i}", "modelInput": {"messages": []}}) + "\n" for i in range(5))
        store.put_object(Bucket=BUCKET, Key="few/in.jsonl", Body=records.encode())
        job = client.create_model_invocation_job(
            jobName="few",
            roleArn=ROLE,
            modelId=HAIKU,
            modelInvocationType="Converse",
            inputDataConfig={"s3InputDataConfig": {"s3Uri": f"s3://{BUCKET}/few/in.jsonl"}},
            outputDataConfig={"s3OutputDataConfig": {"s3Uri": f"s3://{BUCKET}/few-out/"}},
        )
        for _ in range(3):
            state = client.get_model_invocation_job(jobIdentifier=job["jobArn"])
        assert state["status"] == "Failed" and "minimum number of records" in state["message"]
        wrong = botocore.session.Session()
        wrong.set_credentials(KEY_ID, "not-the-secret")
        refused = wrong.create_client("bedrock", region_name="us-east-1", endpoint_url=server.base_url)
        with pytest.raises(Exception, match="signature"):
            refused.get_model_invocation_job(jobIdentifier=job["jobArn"])
        assert server.signature_failures == 1


def test_expired_and_failed_records_are_answered_later(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    with bedrock_server(s3, expire_after=110, line_failure_rate=0.05, seed=4) as server:
        caller = batch_caller(server, s3, monkeypatch)
        answers = judge_all(caller, 150)
        assert all(getattr(a, "text", None) == "[[A>B]]" for a in answers)
        assert next(iter(server.jobs.values()))["status"] == "Expired"
        assert set(server.answered_lines.values()) == {1}  # no record paid twice
        assert server.requests > 0  # the rest, under 100 records, went synchronously


def test_a_killed_caller_re_attaches_to_its_stored_job(
    s3: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    engine = db.open_database(f"sqlite:///{tmp_path}/batches.db")
    with bedrock_server(s3, hold=True) as server:
        cancel_after_first_batch(lambda: batch_caller(server, s3, monkeypatch, engine), server, requests(100), SAMPLING)
        server.release()
        answers = judge_all(batch_caller(server, s3, monkeypatch, engine), 100)
        assert all(getattr(a, "text", None) == "[[A>B]]" for a in answers)
        assert server.batches_created == 1 and set(server.submitted_lines.values()) == {1}
        assert server.requests == 0


# ----- whole runs ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def haiku_replay():
    pairs = load_jsonl(SHARED / "data" / CLAUDE_FILE)
    decisions = judgment_set(pairs, correct=87)
    assert official_score(pairs, decisions) == 32.22
    return replay_responder(pairs, decisions)


def bedrock_command(judgebench_repo, server, tmp_path: Path) -> list[str]:
    command = run_command(
        judgebench_repo,
        server,
        tmp_path,
        *("--batch", "--batch-poll-seconds", "0.5", "--provider", "bedrock"),
        *("--bedrock-batch-input", BATCH_OPTIONS["bedrock_batch_input"]),
        *("--bedrock-batch-output", BATCH_OPTIONS["bedrock_batch_output"], "--bedrock-role-arn", ROLE),
        model=HAIKU,
    )
    command[command.index("--data-file") + 1] = CLAUDE_FILE
    return command


def bedrock_env(server: FakeBedrockBatchServer, s3: S3Server) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL_S3": s3.url,
        "AWS_ENDPOINT_URL_BEDROCK": server.base_url,
        "AWS_ACCESS_KEY_ID": KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_REGION": "us-east-1",
        "OPENAI_API_KEY": "",
    }


def accuracy(tmp_path: Path) -> float:
    results = json.loads((tmp_path / "results/judgebench.json").read_text())
    return round(100 * results["overall_accuracy"]["accuracy"], 2)


@pytest.mark.slow
def test_claude_3_haiku_bedrock_batch_run_reproduces_32_22(
    run_cli, judgebench_repo, haiku_replay, s3: S3Server, tmp_path: Path
) -> None:
    with bedrock_server(s3, haiku_replay, line_failure_rate=0.03, seed=2) as server:
        result = run_cli(*bedrock_command(judgebench_repo, server, tmp_path), env=bedrock_env(server, s3), timeout=900)
        assert result.returncode == 0, result.stderr[-3000:]
        assert server.batches_created >= 1 and server.signature_failures == 0
        assert set(server.answered_lines.values()) == {1}
    assert accuracy(tmp_path) == 32.22
    written = "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".db")
    assert SECRET not in written + result.stdout + result.stderr


@pytest.mark.slow
def test_a_bedrock_batch_run_killed_after_submitting_resumes_without_a_second_job(
    judgebench_repo, haiku_replay, prefect_server, s3: S3Server, tmp_path: Path
) -> None:
    with bedrock_server(s3, haiku_replay, hold=True) as server:
        env = {**os.environ, "JUDGEBENCH_CACHE_DIR": str(tmp_path / "cache"), **bedrock_env(server, s3)}
        again = kill_after_first_batch_and_rerun(
            bedrock_command(judgebench_repo, server, tmp_path), server, tmp_path, env
        )
        assert again.returncode == 0, again.stderr[-3000:]
        assert "re-attached to arn:aws:bedrock" in again.stderr
        assert server.batches_created == 1 and set(server.submitted_lines.values()) == {1}
    assert accuracy(tmp_path) == 32.22

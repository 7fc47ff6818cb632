"""`--batch --provider azure`: Azure OpenAI's Batch API through the openai SDK's AsyncAzureOpenAI, against a
local server that checks what Azure checks (api-version, api-key or Entra ID token on the Files and Batch
APIs, `/chat/completions` lines naming a batch deployment, one deployment per file); failed and expired
lines, a non-batch deployment refused as our input, a killed run re-attached, and whole runs reproducing
o1-mini's official 65.71 with no synchronous call (mirroring tests/test_batch.py)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from judgebench_flows.calls.caller import ChatCaller
from judgebench_flows.calls.providers import provider_rule
from judgebench_flows.calls.retry import RetryPolicy
from judgebench_flows.core.errors import BatchRefused
from judgebench_flows.data import db
from judgebench_flows.testing.fake_azure import FakeAzureBatchServer
from tests._helpers import (
    cancel_after_first_batch,
    chat_caller,
    judge_each,
    kill_after_first_batch_and_rerun,
    run_command,
)
from tests._replay import judgment_set, official_score, replay_responder
from tests.conftest import CANARY_KEY
from tests.test_batch import accuracy, requests

O1_MINI = "o1-mini-2024-09-12"
BATCH_DEPLOYMENT = "judge-batch"
STANDARD_DEPLOYMENT = "judge-standard"
SAMPLING = {"temperature": 0.0, "max_tokens": 4096}
VERSION = "2024-10-21"


@pytest.fixture(autouse=True)
def azure_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The key as a run reads it (without one, the wire signs in with Microsoft Entra ID)."""
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", CANARY_KEY)


def azure_server(answer: Any, **options: Any) -> FakeAzureBatchServer:
    return FakeAzureBatchServer(
        answer,
        deployments={BATCH_DEPLOYMENT: O1_MINI, STANDARD_DEPLOYMENT: O1_MINI},
        deployment_types={BATCH_DEPLOYMENT: "GlobalBatch"},
        **{"api_key": CANARY_KEY, **options},
    )


def azure_caller(
    server: FakeAzureBatchServer, engine=None, deployment: str = BATCH_DEPLOYMENT, **options: Any
) -> ChatCaller:
    return chat_caller(
        base_url=server.endpoint,
        model=deployment,
        api_key=CANARY_KEY,
        provider="azure",
        batch=True,
        batch_poll_seconds=0.1,
        engine=engine,
        request_rule=provider_rule("azure", O1_MINI, "auto", ()),  # shaped for the model it serves
        retry=RetryPolicy(max_retries=6, initial_wait=0.05, max_wait=0.2),
        **options,
    )


def judge_all(caller: ChatCaller, n: int) -> list:
    return judge_each(caller, requests(n), SAMPLING)


def test_one_azure_batch_holds_the_requests_named_by_the_deployment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_VERSION", VERSION)
    with azure_server("[[A>B]]", openai_rules=True) as server:
        caller = azure_caller(server)
        answers = judge_all(caller, 20)
        assert [getattr(a, "text", a) for a in answers] == ["[[A>B]]"] * 20
        assert server.requests == 0 and server.batches_created == 1  # no synchronous call
        assert server.seen["batch-api"] >= 4 and server.seen["api-key"] >= 4  # upload, create, poll, read
        assert not server.seen["no-version"] and not server.seen["bad-version"]
        [batch] = server.batches.values()
    assert batch.endpoint == "/chat/completions" and {line["url"] for line in batch.lines} == {"/chat/completions"}
    assert {line["body"]["model"] for line in batch.lines} == {BATCH_DEPLOYMENT}
    assert all("temperature" not in line["body"] for line in batch.lines)  # o1-mini's rules, from the served model
    assert caller.stats.answered == 20 and caller.stats.failed == 0


def test_failed_and_expired_lines_are_answered_in_later_batches() -> None:
    with azure_server("[[B>A]]", line_failure_rate=0.2, expire_after=12, seed=3) as server:
        caller = azure_caller(server)
        answers = judge_all(caller, 24)
        assert all(getattr(a, "text", None) == "[[B>A]]" for a in answers)
        assert server.batches_created > 1 and set(server.answered_lines.values()) == {1}
        assert next(iter(server.batches.values())).status == "expired"


def test_a_standard_deployment_is_refused_as_azure_refuses_it() -> None:
    """Azure takes batches only on a GlobalBatch or DataZoneBatch deployment: the batch fails whole, with
    the reason, as a refusal of what the run asked for (exit 2), and nothing is answered."""
    with azure_server("[[A>B]]") as server:
        answers = judge_all(azure_caller(server, deployment=STANDARD_DEPLOYMENT), 3)
        assert server.answered_lines == {} and server.requests == 0
    assert all(isinstance(a, BatchRefused) for a in answers)
    assert answers[0].our_input and "GlobalStandard deployment" in str(answers[0])
    assert "model_not_found" in str(answers[0])


def test_what_azure_checks_on_the_batch_api_the_server_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrong key, an API version without batches and a deployment the resource lacks are refused."""
    with azure_server("[[A>B]]") as server:
        refused = judge_all(
            chat_caller(
                base_url=server.endpoint,
                model=BATCH_DEPLOYMENT,
                api_key="wrong-key",
                provider="azure",
                batch=True,
                batch_poll_seconds=0.1,
                retry=RetryPolicy(max_retries=0, initial_wait=0.01, max_wait=0.01),
            ),
            1,
        )
        assert "401" in str(refused[0]) and "wrong-key" not in str(refused[0])
        monkeypatch.setenv("OPENAI_API_VERSION", "2024-06-01")
        old = judge_all(azure_caller(server), 1)
        assert "404" in str(old[0]) and server.seen["bad-version"] >= 1
        monkeypatch.delenv("OPENAI_API_VERSION")
        missing = judge_all(azure_caller(server, deployment="no-such-deployment"), 1)
        assert isinstance(missing[0], BatchRefused) and missing[0].our_input
        assert server.answered_lines == {}


def test_entra_id_tokens_sign_the_batch_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    from judgebench_flows.calls.azure_api import EntraToken
    from judgebench_flows.calls.state import CallState

    monkeypatch.delenv("AZURE_OPENAI_API_KEY", raising=False)
    with azure_server("[[A>B]]", api_key=None) as server:
        credential = server.credential(lifetime=3600.0)
        state = CallState()
        state.entra = EntraToken(credential)
        caller = azure_caller(server, state=state)
        answers = judge_all(caller, 4)
        assert [getattr(a, "text", a) for a in answers] == ["[[A>B]]"] * 4
        assert server.seen["bearer"] >= 4 and server.seen["api-key"] == 0 and credential.calls == 1


def test_a_killed_caller_re_attaches_to_its_stored_azure_batch(tmp_path: Path) -> None:
    engine = db.open_database(f"sqlite:///{tmp_path}/batches.db")
    with azure_server("[[A>B]]", hold=True) as server:
        cancel_after_first_batch(lambda: azure_caller(server, engine), server, requests(10), SAMPLING)
        server.release()
        answers = judge_all(azure_caller(server, engine), 10)
    assert all(getattr(a, "text", None) == "[[A>B]]" for a in answers)
    assert server.batches_created == 1 and set(server.submitted_lines.values()) == {1}
    with sqlite3.connect(tmp_path / "batches.db") as con:
        assert con.execute("select provider, status from provider_batches").fetchall() == [("azure", "done")]


# ----- whole runs ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def o1_replay(gpt4o_pairs):
    decisions = judgment_set(gpt4o_pairs, correct=230)
    assert official_score(gpt4o_pairs, decisions) == 65.71
    return replay_responder(gpt4o_pairs, decisions)


def azure_command(judgebench_repo, server: FakeAzureBatchServer, tmp_path: Path) -> list[str]:
    command = run_command(
        judgebench_repo,
        server,
        tmp_path,
        "--batch",
        "--batch-poll-seconds",
        "0.5",
        "--provider",
        "azure",
        "--priced-model",
        O1_MINI,
        model=BATCH_DEPLOYMENT,
    )
    at = command.index("--base-url")
    command[at : at + 2] = []  # the endpoint from AZURE_OPENAI_ENDPOINT
    return command


def azure_env(server: FakeAzureBatchServer) -> dict[str, str]:
    return {
        "AZURE_OPENAI_ENDPOINT": server.endpoint,
        "AZURE_OPENAI_API_KEY": CANARY_KEY,
        "OPENAI_API_VERSION": VERSION,
        "OPENAI_API_KEY": "",
    }


@pytest.mark.slow
def test_o1_mini_azure_batch_run_reproduces_65_71_with_no_synchronous_call(
    run_cli, judgebench_repo, o1_replay, tmp_path: Path
) -> None:
    with azure_server(o1_replay, openai_rules=True, seed=11, line_failure_rate=0.03) as server:
        result = run_cli(*azure_command(judgebench_repo, server, tmp_path), env=azure_env(server), timeout=900)
        assert result.returncode == 0, result.stderr[-3000:]
        assert server.requests == 0 and "submitted batch_" in result.stderr
        assert set(server.answered_lines.values()) == {1}  # nothing paid twice
    assert accuracy(tmp_path) == 65.71
    written = "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".db")
    assert CANARY_KEY not in written + result.stdout + result.stderr


@pytest.mark.slow
def test_an_azure_batch_run_killed_after_submitting_resumes_without_submitting_a_line_twice(
    judgebench_repo, o1_replay, prefect_server, tmp_path: Path
) -> None:
    with azure_server(o1_replay, openai_rules=True, hold=True) as server:
        env = {**os.environ, "JUDGEBENCH_CACHE_DIR": str(tmp_path / "cache"), **azure_env(server)}
        again = kill_after_first_batch_and_rerun(
            azure_command(judgebench_repo, server, tmp_path), server, tmp_path, env
        )
        assert again.returncode == 0, again.stderr[-3000:]
        assert "re-attached to batch_" in again.stderr
        assert set(server.submitted_lines.values()) == {1} and server.batches_created == 2
        assert server.requests == 0
    assert accuracy(tmp_path) == 65.71


@pytest.mark.slow
def test_a_standard_deployment_with_batch_is_exit_2_naming_it(run_cli, judgebench_repo, tmp_path: Path) -> None:
    with azure_server("My final verdict is [[A>B]]") as server:
        command = azure_command(judgebench_repo, server, tmp_path)
        command[command.index("--model") + 1] = STANDARD_DEPLOYMENT
        result = run_cli(*command, "--max-samples", "4", env=azure_env(server), timeout=600)
        assert server.answered_lines == {} and server.requests == 0
    assert result.returncode == 2, result.stderr[-3000:]
    assert "GlobalBatch" in result.stderr and "Traceback" not in result.stderr

"""JudgeBench's README commands with `judgebench run` in place of `python run_judge.py`, inside a
JudgeBench checkout, with no --base-url and no --provider: each model goes where run_judge.py sends it
(`utils/models.py`), tested against local servers: Anthropic's Messages API through ANTHROPIC_BASE_URL,
the vLLM server run_judge.py assumes on localhost:8000, and OpenAI's and Together's own endpoints named
by `judgebench estimate` and in the error when they cannot be reached (this machine has no internet)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from judgebench_flows.calls.anthropic_rules import ANTHROPIC_VERSION
from judgebench_flows.testing.fake_anthropic import FakeAnthropicServer
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._replay import judgment_set, official_score, replay_responder
from tests.conftest import (
    CANARY_KEY,
    CLAUDE_FILE,
    GPT4O_FILE,
    NO_DATA_REASON,
    SHARED,
    load_jsonl,
    make_repo,
    requires_shared,
    shared_data_available,
)

ROUTING_VARIABLES = ("OPENAI_BASE_URL", "BASE_URL", "ANTHROPIC_BASE_URL", "TOGETHER_BASE_URL")
CLAUDE = "claude-3-haiku-20240307"
LLAMA_405B = "meta-llama/Meta-Llama-3.1-405B-Instruct"

Runner = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A JudgeBench checkout, as a user's working directory."""
    if not shared_data_available():
        pytest.skip(NO_DATA_REASON)
    path = tmp_path_factory.mktemp("user") / "JudgeBench"
    make_repo(path)
    return path


def judgebench(checkout: Path, tmp_path: Path) -> Runner:
    def run(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        base = {k: v for k, v in os.environ.items() if k not in ROUTING_VARIABLES and not k.endswith("_API_KEY")}
        full_env = {**base, "JUDGEBENCH_CACHE_DIR": str(tmp_path / "cache"), **(env or {})}
        return subprocess.run(
            [sys.executable, "-m", "judgebench_flows.cli.main", *args],
            cwd=checkout,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run


def readme_command(model: str, data_file: str, *extra: str, command: str = "run") -> list[str]:
    """JudgeBench's README command line, `python run_judge.py` replaced (its options as it spells them)."""
    return [command, "--judge_name", "arena_hard", "--judge_model", model, "--pairs", f"data/{data_file}", *extra]


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def outputs(checkout: Path) -> str:
    return "".join(
        p.read_text(errors="replace") for p in (checkout / "results").rglob("*") if p.is_file() and p.suffix != ".db"
    )


@requires_shared
def test_claude_goes_to_anthropics_messages_api_with_judgebenchs_published_number(
    checkout: Path, tmp_path: Path, prefect_server: str
) -> None:
    """claude-3-haiku: Anthropic's Messages API (here ANTHROPIC_BASE_URL), 32.22 on the Claude pairs as
    JudgeBench publishes it, from a judgment set with that score."""
    pairs = load_jsonl(SHARED / "data" / CLAUDE_FILE)
    decisions = judgment_set(pairs, correct=87)
    assert official_score(pairs, decisions) == 32.22
    with FakeAnthropicServer(replay_responder(pairs, decisions), api_key=CANARY_KEY) as server:
        result = judgebench(checkout, tmp_path)(
            *readme_command(CLAUDE, CLAUDE_FILE, "--db-url", f"sqlite:///{tmp_path}/r.db"),
            env={"ANTHROPIC_API_KEY": CANARY_KEY, "ANTHROPIC_BASE_URL": server.base_url},
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert server.status_counts.get(200, 0) > 0
        assert f"{CLAUDE}: Anthropic's Messages API at {server.base_url}" in result.stderr
    results = json.loads((checkout / "results" / "latest" / "results.json").read_text())
    assert round(100 * results["overall_accuracy"]["accuracy"], 2) == 32.22
    assert results["run"]["requests"]["rule"] == f"anthropic-{ANTHROPIC_VERSION}"  # the Messages API's rules
    assert CANARY_KEY not in outputs(checkout) + result.stdout + result.stderr


@requires_shared
def test_any_other_model_goes_to_the_vllm_server_on_localhost_8000_with_the_official_score(
    checkout: Path, tmp_path: Path, prefect_server: str
) -> None:
    """A local Llama judge: the vLLM server run_judge.py assumes on localhost:8000 (its URL is fixed
    there, as in run_judge.py, and any base URL in the options or the environment turns routing off, so
    this test needs that port), answering each request with its own scripted verdict; the run's accuracy
    on the GPT-4o pairs is the one JudgeBench's metric gives the same verdicts, computed here apart from
    the product's code (`official_score`)."""
    if not port_free(8000):
        pytest.skip("port 8000 is taken on this machine (another server runs there): the vLLM route is not tried")
    model = "meta-llama/Meta-Llama-3.1-8B-Instruct"
    pairs = load_jsonl(SHARED / "data" / GPT4O_FILE)
    decisions = judgment_set(pairs, correct=181, seed=8)
    expected = official_score(pairs, decisions)
    assert expected == 51.71  # 181 of 350: JudgeBench's protocol over the scripted verdicts
    replay = replay_responder(pairs, decisions)
    seen: list[str] = []

    def respond(body: dict) -> str:
        seen.append(body["model"])
        return replay(body)

    with FakeOpenAIServer(respond, port=8000) as server:
        result = judgebench(checkout, tmp_path)(
            *readme_command(model, GPT4O_FILE, "--db-url", f"sqlite:///{tmp_path}/r.db")
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert server.base_url.endswith(":8000/v1")
    assert set(seen) == {model} and len(seen) > 2 * len(pairs)  # both orders of each pair, and follow-ups
    said = " ".join(result.stderr.split())  # wrapped at words
    assert f"{model}: a local vLLM server's OpenAI-compatible API at http://localhost:8000/v1" in said
    results = json.loads((checkout / "results" / "latest" / "results.json").read_text())
    assert round(100 * results["overall_accuracy"]["accuracy"], 2) == expected


@requires_shared
@pytest.mark.parametrize(
    ("model", "url", "key"),
    [
        ("gpt-4o-mini", "https://api.openai.com/v1", "OPENAI_API_KEY"),
        (LLAMA_405B, "https://api.together.xyz/v1", "TOGETHER_API_KEY"),
    ],
)
def test_openai_and_together_are_their_own_endpoints_shown_by_estimate_and_named_when_unreachable(
    checkout: Path, tmp_path: Path, model: str, url: str, key: str
) -> None:
    run = judgebench(checkout, tmp_path)
    estimate = run(*readme_command(model, GPT4O_FILE, command="estimate"))
    assert estimate.returncode == 0, estimate.stderr[-2000:]
    assert url in estimate.stdout
    missing = run(*readme_command(model, GPT4O_FILE, "--db-url", f"sqlite:///{tmp_path}/r.db"))
    assert missing.returncode == 2 and f"set {key}" in missing.stderr, missing.stderr[-2000:]
    assert len(missing.stderr.strip().splitlines()) <= 2  # the routing line and the one error line
    unreachable = run(
        *readme_command(model, GPT4O_FILE, "--db-url", f"sqlite:///{tmp_path}/r.db"), env={key: CANARY_KEY}
    )
    host = url.split("/")[2]
    assert unreachable.returncode in (2, 9) and f"https://{host}:443" in unreachable.stderr, unreachable.stderr[-2000:]
    assert CANARY_KEY not in unreachable.stdout + unreachable.stderr

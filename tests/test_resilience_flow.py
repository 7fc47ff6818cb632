"""Nothing lost, nothing paid twice: the real CLI, the real GPT-4o file, a real endpoint that misbehaves.

Every run clones the JudgeBench copy from `judgebench_repo`, judges a seeded subset of it through the
`openai` client against `FakeOpenAIServer`, and is compared with a fault-free run of the same subset.
The server's per-request counters are the ledger: `answered_keys()` says how often each distinct request
was paid for, across runs. The judge's answers are deterministic per prompt and deliberately wrong for
some prompts, so "same results" means every single judgment came out the same, not just "all correct".

Retry waits are shrunk with --retry-initial-wait/--retry-max-wait so faults cost milliseconds.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._helpers import run_command
from tests.conftest import CANARY_KEY, VERDICTS, load_jsonl, oracle_responder

pytestmark = pytest.mark.slow  # every test here runs `judgebench run` end to end

SAMPLES = 60
CALLS = 2 * SAMPLES  # both orders, one call each (every answer carries a verdict label)
MODEL = "judge-model"
FAST_RETRIES = ("--retry-initial-wait", "0.01", "--retry-max-wait", "0.2")


def mixed_judge(pairs: list[dict]) -> Callable[[dict], str]:
    """Right for most prompts, wrong for about a quarter, decided by the prompt alone (so reproducible)."""
    right = oracle_responder(pairs, VERDICTS["arena_hard"])
    wrong = oracle_responder(pairs, VERDICTS["arena_hard"], wrong=True)

    def respond(body: dict) -> str:
        text = "\n".join(m["content"] for m in body["messages"] if m["role"] == "user")
        return wrong(body) if hashlib.sha256(text.encode()).digest()[0] % 4 == 0 else right(body)

    return respond


def cli_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "OPENAI_API_KEY": CANARY_KEY, **extra}


def run_args(
    repo: tuple[str, str], server: FakeOpenAIServer, workdir: Path, *extra: str, samples: int = SAMPLES
) -> list[str]:
    """`judgebench run` in a subprocess, with the CLI's defaults for the judge, concurrency, shards and outputs."""
    return [
        sys.executable,
        "-m",
        "judgebench_flows.cli.main",
        *run_command(
            repo,
            server,
            workdir,
            "--no-report",
            *FAST_RETRIES,
            *extra,
            judge_type=None,
            model=MODEL,
            concurrency=None,
            shard_size=None,
            max_samples=samples,
            result_path=None,
            output_dir=None,
        ),
    ]


def run(args: list[str], workdir: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """One CLI run in `workdir` (its results/ and clone cache live there); fails the test on a non-zero exit."""
    workdir.mkdir(parents=True, exist_ok=True)
    full_env = env or cli_env()
    full_env.setdefault("JUDGEBENCH_CACHE_DIR", str(workdir / "clones"))
    result = subprocess.run(args, cwd=workdir, env=full_env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


def results_of(workdir: Path) -> dict[str, Any]:
    return json.loads((workdir / "results" / "latest" / "results.json").read_text())


def scores(results: dict[str, Any]) -> dict[str, Any]:
    """What a run measured (accuracy, counts, intervals, consistency), without timings and usage."""
    return {
        "n_pairs": results["dataset"]["n_pairs"],
        "overall": results["overall_accuracy"],
        "category": results["category_accuracy"],
        "source": results["source_accuracy"],
        "consistency": results["consistency"],
    }


def decisions(workdir: Path) -> dict[tuple[str, int], str | None]:
    rows = load_jsonl(next((workdir / "results" / "latest").glob("*.jsonl")))
    return {(row["pair_id"], j["order"]): j["decision"] for row in rows for j in row["judgments"]}


@pytest.fixture(scope="module")
def baseline(prefect_server, judgebench_repo, gpt4o_pairs, tmp_path_factory) -> dict[str, Any]:
    """A fault-free, uninterrupted run of the subset: what every other run must reproduce."""
    workdir = tmp_path_factory.mktemp("baseline")
    with FakeOpenAIServer(mixed_judge(gpt4o_pairs)) as server:
        run(run_args(judgebench_repo, server, workdir), workdir)
        assert server.answered == CALLS and set(server.answered_keys().values()) == {1}
    results = results_of(workdir)
    assert results["invalid"]["failed_judgments"] == 0 and results["invalid"]["invalid_judgments"] == 0
    assert 0.5 < results["overall_accuracy"]["accuracy"] < 1.0, "the mixed judge should be right often, not always"
    assert results["consistency"]["consistency"] < 1.0
    return {"scores": scores(results), "decisions": decisions(workdir)}


@pytest.fixture()
def server(gpt4o_pairs) -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(mixed_judge(gpt4o_pairs)) as fake:
        yield fake


# ----- a. faults ------------------------------------------------------------------------------------


def test_faulty_endpoint_gives_the_fault_free_results_and_pays_each_call_once(
    baseline, judgebench_repo, server, tmp_path
) -> None:
    server.configure(
        rate_429=0.1,
        retry_after=0.05,
        rate_500=0.05,
        rate_503=0.05,
        rate_drop=0.05,
        rate_hang=0.03,
        hang_seconds=10,
        seed=11,
    )
    run(
        run_args(
            judgebench_repo, server, tmp_path, "--request-timeout", "1", "--max-retries", "8", "--concurrency", "8"
        ),
        tmp_path,
    )

    results = results_of(tmp_path)
    assert results["invalid"]["failed_judgments"] == 0
    assert results["invalid"]["invalid_judgments"] == 0
    assert scores(results) == baseline["scores"]
    assert decisions(tmp_path) == baseline["decisions"]

    counts = server.status_counts
    for fault in (429, 500, 503, "drop", "hang"):
        assert counts.get(fault, 0) > 0, f"no {fault} was injected: {counts}"
    paid = server.answered_keys()
    assert len(paid) == CALLS and set(paid.values()) == {1}, "every distinct call answered exactly once"
    assert results["usage"]["paid_calls"] == CALLS


# ----- b. kill and resume -----------------------------------------------------------------------------


def test_killed_run_resumes_without_losing_or_repaying_calls(baseline, judgebench_repo, server, tmp_path) -> None:
    concurrency = 4
    server.configure(latency=0.2)
    args = run_args(judgebench_repo, server, tmp_path, "--concurrency", str(concurrency))
    env = cli_env(JUDGEBENCH_CACHE_DIR=str(tmp_path / "clones"))
    with open(tmp_path / "killed.log", "w") as log:
        process = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 120
            while server.answered < 0.3 * CALLS:
                assert process.poll() is None, (
                    f"the run ended before it was killed: {(tmp_path / 'killed.log').read_text()}"
                )
                assert time.monotonic() < deadline, "the run never got going"
                time.sleep(0.01)
            os.kill(process.pid, signal.SIGKILL)
        finally:
            process.wait(timeout=30)
    answered_before_kill = server.answered
    assert answered_before_kill < CALLS, "killed too late to test anything"
    assert not list(tmp_path.glob("results/*/results.json"))

    run(args, tmp_path, env)

    results = results_of(tmp_path)
    assert results["invalid"]["failed_judgments"] == 0
    assert scores(results) == baseline["scores"]
    assert decisions(tmp_path) == baseline["decisions"]

    paid = server.answered_keys()
    assert len(paid) == CALLS, "every call was answered at least once over the two runs"
    twice = [key for key, n in paid.items() if n == 2]
    assert max(paid.values()) <= 2
    assert len(twice) <= concurrency, f"{len(twice)} calls paid twice; at most the {concurrency} in flight at the kill"
    assert server.answered <= CALLS + concurrency
    assert results["usage"]["cached_calls"] >= answered_before_kill - concurrency, "the resumed run used the cache"


# ----- c, d. the caches -------------------------------------------------------------------------------


def test_cached_rerun_is_free_no_cache_and_refresh_pay_again(baseline, judgebench_repo, server, tmp_path) -> None:
    samples = 20
    calls = 2 * samples

    def run_with(*extra: str) -> dict[str, Any]:
        server.reset_counters()
        run(run_args(judgebench_repo, server, tmp_path, *extra, samples=samples), tmp_path)
        return results_of(tmp_path)

    first = run_with()
    assert server.answered == calls and first["usage"]["paid_calls"] == calls

    cached = run_with()
    assert server.requests == 0, "a fully cached re-run must not send a single request"
    assert cached["usage"] == {**first["usage"], "cached_calls": calls, "paid_calls": 0, "attempts": 0, "errors": 0}
    assert scores(cached) == scores(first)

    resharded = run_with("--shard-size", "7")  # new shards miss Prefect's shard cache; the call cache answers
    assert server.requests == 0
    assert resharded["usage"]["cached_calls"] == calls
    assert scores(resharded) == scores(first)

    uncached = run_with("--no-cache")
    assert server.answered == calls and set(server.answered_keys().values()) == {1}
    assert uncached["usage"]["paid_calls"] == calls and uncached["usage"]["cached_calls"] == 0
    assert scores(uncached) == scores(first)

    refreshed = run_with("--refresh-cache")
    assert server.answered == calls
    assert refreshed["usage"]["paid_calls"] == calls

    after_refresh = run_with()
    assert server.requests == 0
    assert after_refresh["usage"]["cached_calls"] == calls
    assert scores(after_refresh) == scores(first)


# ----- e. unparseable verdicts -------------------------------------------------------------------------


def test_unparseable_verdicts_are_kept_counted_and_asked_again(judgebench_repo, gpt4o_pairs, tmp_path) -> None:
    samples = 20
    judge = mixed_judge(gpt4o_pairs)
    garbage = "Both answers have merit; I cannot decide."

    def pair_of(body: dict) -> dict:
        text = "\n".join(m["content"] for m in body["messages"] if m["role"] == "user")
        return next(p for p in gpt4o_pairs if p["response_A"] in text and p["response_B"] in text)

    def unparseable(pair: dict) -> bool:
        return hashlib.sha256(pair["pair_id"].encode()).digest()[0] % 3 == 0

    def respond(body: dict) -> str:
        return garbage if unparseable(pair_of(body)) else judge(body)

    with FakeOpenAIServer(respond) as server:
        # A third of the verdicts invalid is above the default --max-failed-fraction: allowed here.
        run(run_args(judgebench_repo, server, tmp_path, "--max-failed-fraction", "1", samples=samples), tmp_path)
        results = results_of(tmp_path)
        rows = load_jsonl(next((tmp_path / "results" / "latest").glob("*.jsonl")))
        bad_pairs = {row["pair_id"] for row in rows if unparseable(row)}
        assert 0 < len(bad_pairs) < samples

        for row in rows:
            for j in row["judgments"]:
                if row["pair_id"] in bad_pairs:
                    assert j["status"] == "invalid" and j["decision"] is None
                    assert garbage in j["judgment"]["response"], "the raw answer is kept"
                else:
                    assert j["status"] == "ok" and j["decision"] in ("A>B", "B>A")
        assert results["invalid"]["invalid_judgments"] == 2 * len(bad_pairs)
        assert results["invalid"]["failed_judgments"] == 0
        assert results["invalid"]["pairs_with_invalid"] == len(bad_pairs)
        # Arena-Hard asks once more for a label: two paid calls per unparseable judgment, one per good one.
        good_calls = 2 * (samples - len(bad_pairs))
        assert server.answered == good_calls + 4 * len(bad_pairs)

        server.reset_counters()
        run(run_args(judgebench_repo, server, tmp_path, "--max-failed-fraction", "1", samples=samples), tmp_path)
        again = results_of(tmp_path)
        assert server.answered == 4 * len(bad_pairs), "only the unparseable judgments are asked again"
        asked = server.answered_keys()
        assert all(n == 1 for n in asked.values())
        assert again["usage"]["cached_calls"] == good_calls
        assert again["invalid"] == results["invalid"]


# ----- failed calls: the shard is retried, answered calls are not paid again ---------------------------


def test_failing_attempts_are_retried_within_one_budget_and_answers_are_paid_once(
    judgebench_repo, gpt4o_pairs, tmp_path
) -> None:
    """A call's retries and the shard task's retries share one budget (`calls.budget`): with --max-retries 2
    a call that fails twice is answered by its third attempt, and nothing answered is paid again. (With
    --max-retries 1 it would fail for good: the shard's retry no longer sends it a third time;
    tests/test_real_servers.py counts that.)"""
    samples = 10
    judge = mixed_judge(gpt4o_pairs)
    failures: dict[str, int] = {}

    def flaky(body: dict) -> str:
        """A third of the prompts fail twice (HTTP 500 from the server), then answer."""
        text = body["messages"][-1]["content"]
        digest = hashlib.sha256(text.encode()).hexdigest()
        if int(digest, 16) % 3 == 0 and failures.get(digest, 0) < 2:
            failures[digest] = failures.get(digest, 0) + 1
            raise RuntimeError("temporarily broken")
        return judge(body)

    with FakeOpenAIServer(flaky) as server:
        run(run_args(judgebench_repo, server, tmp_path, "--max-retries", "2", samples=samples), tmp_path)
        results = results_of(tmp_path)
        assert failures and all(n == 2 for n in failures.values()), "some calls failed twice before their answer"
        assert results["invalid"]["failed_judgments"] == 0 and results["invalid"]["invalid_judgments"] == 0
        paid = server.answered_keys()
        assert len(paid) == 2 * samples and set(paid.values()) == {1}, "answered calls are not paid again"
        assert server.requests == 2 * samples + 2 * len(failures)


# ----- f. secrets ------------------------------------------------------------------------------------


def files_containing(root: Path, needle: bytes) -> list[str]:
    hits = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                if needle in path.read_bytes():
                    hits.append(str(path))
            except OSError:
                pass
    return hits


def prefect_server_files() -> Path | None:
    """The directory of the session Prefect server's database (set by prefect_test_harness)."""
    from prefect.settings import PREFECT_SERVER_DATABASE_CONNECTION_URL

    url = PREFECT_SERVER_DATABASE_CONNECTION_URL.value() or ""
    if url.startswith("sqlite+aiosqlite:///"):
        return Path(url.removeprefix("sqlite+aiosqlite:///")).parent
    return None


async def flow_run_parameters(flow_run_id: str) -> tuple[dict, list[dict]]:
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        ours = await client.read_flow_run(flow_run_id)
        every = await client.read_flow_runs(limit=200)
    return ours.parameters, [run.parameters for run in every]


def test_the_api_key_is_written_nowhere(prefect_server, judgebench_repo, gpt4o_pairs, tmp_path) -> None:
    canary = CANARY_KEY.encode()
    home = tmp_path / "prefect-home"
    env = cli_env(PREFECT_HOME=str(home), JUDGEBENCH_CACHE_DIR=str(tmp_path / "clones"))
    with FakeOpenAIServer(mixed_judge(gpt4o_pairs), api_key=CANARY_KEY) as server:
        args = run_args(judgebench_repo, server, tmp_path, samples=6)
        args.remove("--no-report")
        ok = run(args, tmp_path, env)
        assert server.answered == 12, "the key did reach the endpoint"
    results = results_of(tmp_path)
    assert Path(tmp_path / "results" / "latest" / "report.html").is_file()

    with FakeOpenAIServer(mixed_judge(gpt4o_pairs), api_key="sk-some-other-key-000000") as server:
        failing = subprocess.run(
            run_args(judgebench_repo, server, tmp_path / "failing", samples=6),
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert failing.returncode == 2, failing.stderr
    errors = [line for line in failing.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "rejected the API key" in errors[0], failing.stderr
    assert "sk-some-other-key" not in failing.stderr + failing.stdout
    assert "Traceback" not in failing.stderr

    for stream in (ok.stdout, ok.stderr, failing.stdout, failing.stderr):
        assert CANARY_KEY not in stream
    assert files_containing(tmp_path, canary) == []  # results, JSONL, report, SQLite db, clones, our Prefect home
    assert list(home.rglob("*")), "the run used the Prefect home it was given"
    session_home = Path(os.environ["PREFECT_HOME"])
    assert files_containing(session_home, canary) == []
    server_files = prefect_server_files()
    assert server_files is not None and any(server_files.iterdir())
    assert files_containing(server_files, canary) == []  # the server's database: flow runs, task runs, logs

    ours, every = asyncio.run(flow_run_parameters(results["run"]["flow_run_id"]))
    assert ours["config"]["model"] == MODEL
    assert CANARY_KEY not in json.dumps(every, default=str)

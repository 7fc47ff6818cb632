"""Issue 13 (hardening) and issue 18 item 6 (what a run paid): each test failed before its fix.

Real parts throughout: the CLI in a subprocess, the bundled OpenAI-compatible server on loopback, real git
repositories, SQLite files and PostgreSQL on 127.0.0.1 (skipped when unreachable), the session's Prefect
server (whose stored flow-run parameters and logs are read back through Prefect's client).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._runs import local_server_env, stop_background_server
from tests.conftest import CANARY_KEY, git, make_repo, requires_shared
from tests.test_bad_input import assert_one_error, base_args, pair, write_jsonl

VERDICT = "My final verdict is [[A>B]]"


def pairs_file(path: Path, n: int = 3, tag: str = "") -> Path:
    return write_jsonl(path, [pair(i, question=f"{tag}What is {i}+{i}?") for i in range(n)])


def results_of(tmp_path: Path, name: str = "results/latest/results.json") -> dict:
    return json.loads((tmp_path / name).read_text())


# ----- 1. checks before paying -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--seed", "-5"], "--seed"),
        (["--output-dir", "blocker"], "--output-dir"),
        (["--result-path", "blocker/sub/results.json"], "--result-path"),
    ],
)
def test_bad_options_refused_before_any_call(run_cli, tmp_path: Path, extra: list[str], fragment: str) -> None:
    (tmp_path / "blocker").write_text("a file where a directory is needed\n")
    data = pairs_file(tmp_path / "pairs.jsonl")
    with FakeOpenAIServer(VERDICT) as server:
        result = run_cli(*base_args(server, tmp_path, "--data-path", str(data), *extra))
        assert_one_error(result, fragment)
        assert server.requests == 0, "nothing may be paid for before the options are known to work"


def test_long_model_name_gets_a_short_safe_file_name(run_cli, tmp_path: Path) -> None:
    model = "org/" + "m" * 256
    data = pairs_file(tmp_path / "pairs.jsonl", 2)
    with FakeOpenAIServer(VERDICT) as server:
        result = run_cli(*base_args(server, tmp_path, "--data-path", str(data)), "--model", model)
    assert result.returncode == 0, result.stderr
    (jsonl,) = (tmp_path / "results" / "latest").glob("*.jsonl")
    assert len(jsonl.name.encode()) <= 255
    assert jsonl.name.startswith("pairs,judge_name=arena_hard,judge_model=org_mmm")
    from judgebench_flows.tasks.publish import output_file_name

    assert output_file_name("pairs.jsonl", "arena_hard", model + "x") != jsonl.name  # the hash tells them apart


# ----- 2. no credential in any store ------------------------------------------------------------------


PG_PASSWORD = "pg-canary-Zq81xT7vRw"
REPO_TOKEN = "ghp_canaryToken4417aa"


def _postgres_reachable() -> bool:
    try:
        import psycopg

        psycopg.connect("postgresql://postgres@127.0.0.1:5432/test", connect_timeout=3).close()
        return True
    except Exception:
        return False


async def _prefect_record(flow_run_id: str) -> str:
    """Everything Prefect stored about a flow run that a secret could hide in: the run (its parameters),
    its task runs, its logs and its artifacts, as one text."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        FlowRunFilter,
        FlowRunFilterId,
        LogFilter,
        LogFilterFlowRunId,
    )

    async with get_client() as client:
        flow_run = await client.read_flow_run(flow_run_id)
        task_runs = await client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
        logs = await client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
        artifacts = await client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    assert flow_run.parameters["config"]["db_url"], "the flow's parameters were not read back"
    return "\n".join(
        [
            flow_run.model_dump_json(),
            *(t.model_dump_json() for t in task_runs),
            *(log.model_dump_json() for log in logs),
            *(a.model_dump_json() for a in artifacts),
        ]
    )


@pytest.mark.postgres
@requires_shared
@pytest.mark.skipif(
    not _postgres_reachable(), reason="PostgreSQL on 127.0.0.1:5432 (trust auth, database test) not reachable"
)
def test_credentials_in_urls_reach_no_store(run_cli, tmp_path: Path, judgebench_repo) -> None:
    """A password in --db-url (PostgreSQL with trust auth ignores it) and a token in --repo-url (git's
    url.insteadOf maps that https URL to the local test repository): neither may be in Prefect's
    database, the results database, results.json, the JSONL, the report or the terminal."""
    import sqlalchemy as sa

    file_url, sha = judgebench_repo
    repo_url = f"https://ci-user:{REPO_TOKEN}@git.example.invalid/JudgeBench.git"
    db_url = f"postgresql+psycopg://postgres:{PG_PASSWORD}@127.0.0.1:5432/test"
    git_env = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": f"url.{file_url}.insteadOf", "GIT_CONFIG_VALUE_0": repo_url}
    with FakeOpenAIServer(VERDICT) as server:
        args = [
            "run",
            "--model",
            "judge-model",
            "--base-url",
            server.base_url,
            "--db-url",
            db_url,
            "--repo-url",
            repo_url,
            "--ref",
            sha,
            "--max-samples",
            "2",
            "--no-progress",
            "--verbose",
        ]
        result = run_cli(*args, env=git_env)
    assert result.returncode == 0, result.stderr
    results_text = (tmp_path / "results" / "latest" / "results.json").read_text()
    results = json.loads(results_text)
    texts = {
        "terminal": result.stdout + result.stderr,
        "results.json": results_text,
        "jsonl": next((tmp_path / "results" / "latest").glob("*.jsonl")).read_text(),
        "report": (tmp_path / "results" / "latest" / "report.html").read_text(),
        "prefect": asyncio.run(_prefect_record(results["run"]["flow_run_id"])),
    }
    engine = sa.create_engine("postgresql+psycopg://postgres@127.0.0.1:5432/test")
    run_id = results["run"]["run_id"]
    with engine.connect() as connection:
        for table in ("runs", "judgments", "metrics"):
            rows = connection.execute(sa.text(f"SELECT * FROM {table} WHERE run_id = :r"), {"r": run_id}).fetchall()
            assert rows, table
            texts[f"db.{table}"] = "\n".join(repr(tuple(row)) for row in rows)
    engine.dispose()
    for where, text in texts.items():
        for secret in (PG_PASSWORD, REPO_TOKEN, CANARY_KEY):
            assert secret not in text, f"{secret} found in {where}"
    assert "git.example.invalid/JudgeBench.git" in results["dataset"]["repo_url"]
    assert "postgres@127.0.0.1" in texts["prefect"]  # the credential-free URL is what the flow was given


def test_credential_free_url_resolves_from_the_environment(monkeypatch) -> None:
    """A deployment's worker: the parameter holds the URL without its password, the worker's environment
    the full one; the database is opened with the full URL, the configuration never holds it."""
    from judgebench_flows.core import credentials
    from judgebench_flows.core.config import build_config

    full = "postgresql+psycopg://judge:s3cret-Worker-pw@db.example.invalid:5432/judgebench"
    monkeypatch.setenv("JUDGEBENCH_DB_URL", full)
    config = build_config(model="m", db_url="postgresql+psycopg://judge@db.example.invalid:5432/judgebench")
    assert "s3cret" not in config.model_dump_json()
    assert credentials.resolve(config.db_url) == full
    assert credentials.resolve("postgresql+psycopg://judge@other.example.invalid/judgebench").endswith(
        "other.example.invalid/judgebench"
    )


# ----- 4. no local file sent through a template ---------------------------------------------------------


def test_template_symlink_out_of_the_checkout_is_refused(tmp_path: Path) -> None:
    from judgebench_flows.core.errors import UserError
    from judgebench_flows.judges import get_judge

    outside = tmp_path / "secret.txt"
    outside.write_text("root:x:0:0:SECRET-LINE\n")
    templates = tmp_path / "checkout" / "utils" / "templates"
    templates.mkdir(parents=True)
    for name in ("arena_hard_judge_system", "arena_hard_judge_prompt"):
        (templates / f"{name}.jinja2").symlink_to(outside)
    with pytest.raises(UserError, match="outside"):
        get_judge("arena_hard", templates)
    # A template inside its directory still works, and so does one that includes another inside it.
    for name in ("arena_hard_judge_system", "arena_hard_judge_prompt"):
        (templates / f"{name}.jinja2").unlink()
    (templates / "arena_hard_judge_system.jinja2").write_text("You are a judge.")
    (templates / "arena_hard_judge_prompt.jinja2").write_text("{{ prompt }} {{ answer_a }} {{ answer_b }}")
    assert get_judge("arena_hard", templates).format("q", "a", "b")[0]["content"] == "You are a judge."


def test_custom_judge_file_linking_out_is_refused(tmp_path: Path) -> None:
    from judgebench_flows.core.errors import UserError
    from judgebench_flows.judges import get_judge

    real = tmp_path / "elsewhere" / "judge.py"
    real.parent.mkdir()
    real.write_text(
        "class J:\n    def format(self, q, a, b):\n        return [{'role': 'user', 'content': q}]\n    def parse(self, t):\n        return ''\n"
    )
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "judge.py").symlink_to(real)
    with pytest.raises(UserError, match="outside"):
        get_judge("custom", judge_template=f"{checkout / 'judge.py'}:J")
    assert get_judge("custom", judge_template=f"{real}:J")  # the file itself is fine


# ----- 5. reading commands create nothing ---------------------------------------------------------------


@pytest.mark.parametrize("command", [["history"], ["compare", "aaaa", "bbbb"], ["report", "aaaa"]])
def test_reading_a_missing_database_is_an_error_and_creates_nothing(
    run_cli, tmp_path: Path, command: list[str]
) -> None:
    target = tmp_path / "missing" / "dir" / "x.db"
    result = run_cli(*command, "--db-url", f"sqlite:///{target}")
    assert_one_error(result, "no database")
    assert not (tmp_path / "missing").exists()


def test_history_of_an_empty_database_says_no_runs_yet(run_cli, tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    result = run_cli("history", "--db-url", f"sqlite:///{empty}")
    assert result.returncode == 0, result.stderr
    assert "no runs yet" in result.stdout
    with sqlite3.connect(empty) as connection:
        assert connection.execute("SELECT name FROM sqlite_master").fetchall() == []  # no tables created


# ----- 6 and issue 18.6. what a run paid ---------------------------------------------------------------


@pytest.mark.slow
def test_two_identical_runs_at_once_each_count_what_they_sent(tmp_path: Path) -> None:
    """The run whose shard task starts second often finds that shard already in Prefect's cache, put
    there by the other. Whatever the order, what the two runs say they paid adds up to what the endpoint
    answered."""
    data = pairs_file(tmp_path / "pairs.jsonl", 10, tag="together ")
    with FakeOpenAIServer(VERDICT, latency=1.0) as server:
        args = [
            sys.executable,
            "-m",
            "judgebench_flows.cli.main",
            *base_args(server, tmp_path, "--data-path", str(data), "--concurrency", "32"),
        ]
        # As two users run them: no PREFECT_API_URL, each its own PREFECT_HOME and so its own Prefect
        # server; shard results go to the one result storage both read (the shard cache).
        envs = {
            name: local_server_env(
                tmp_path / f"home-{name}",
                JUDGEBENCH_CACHE_DIR=str(tmp_path / "cache"),
                PREFECT_LOCAL_STORAGE_PATH=str(tmp_path / "prefect-storage"),
            )
            for name in ("first", "second")
        }
        try:
            first, second = (
                subprocess.Popen(
                    [*args, "--result-path", f"{name}.json"],
                    cwd=tmp_path,
                    env=envs[name],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for name in ("first", "second")
            )
            outputs = [process.communicate(timeout=600) for process in (first, second)]
        finally:
            for env in envs.values():
                stop_background_server(env)
        assert first.returncode == 0 and second.returncode == 0, outputs
        answered, requests = server.answered, server.requests
    usages = [results_of(tmp_path, name)["usage"] for name in ("first.json", "second.json")]
    assert sum(u["paid_calls"] for u in usages) == answered, usages
    for usage in usages:
        assert usage["judgments"] == 20
        assert usage["cached_calls"] + usage["paid_calls"] >= usage["calls"], (
            usage
        )  # every judgment's answer came from somewhere
    assert sum(u["attempts"] for u in usages) == requests, usages
    assert [u["errors"] for u in usages] == [0, 0]


def test_paid_calls_count_answers_only_attempts_and_errors_beside(run_cli, tmp_path: Path) -> None:
    """Every request's first attempt gets a 500 and its retry an answer: 6 calls paid, 12 attempts, 6
    errors. A call that never got an answer is not paid for."""
    data = pairs_file(tmp_path / "pairs.jsonl", 3, tag="retried ")
    with FakeOpenAIServer(VERDICT, fail_first=1, fail_kind="500") as server:
        result = run_cli(
            *base_args(server, tmp_path, "--data-path", str(data), "--retry-initial-wait", "0", "--retry-max-wait", "0")
        )
        assert result.returncode == 0, result.stderr
        requests = server.requests
    usage = results_of(tmp_path)["usage"]
    assert (usage["paid_calls"], usage["attempts"], usage["errors"]) == (6, 12, 6), usage
    assert requests == 12


def test_tally_does_not_count_a_failed_call_as_paid() -> None:
    from judgebench_flows.core.records import JudgmentRecord
    from judgebench_flows.scoring.metrics import Tally

    common = {"source": "s", "category": "s", "label": "A>B", "judge_model": "m"}
    records = [
        JudgmentRecord(pair_id="p", order=0, status="ok", decision="A>B", decision_for_pair="A>B", calls=1, **common),
        JudgmentRecord(pair_id="p", order=1, status="failed", error="HTTP 500 after 7 attempts", calls=1, **common),
    ]
    usage = Tally.of(records).usage_totals()
    assert (usage.calls, usage.paid_calls, usage.failed_calls) == (2, 1, 1)


# ----- 7. no silent change of data, no secret in stored answers ------------------------------------------


def test_non_utf8_row_is_skipped_and_named(tmp_path: Path) -> None:
    from judgebench_flows.data.loading import index_pairs

    path = tmp_path / "pairs.jsonl"
    rows = [json.dumps(pair(i)).encode() for i in range(3)]
    rows[1] = rows[1].replace(b"It is 2.", b"It is \xff\xfe 2.")
    path.write_bytes(b"\n".join(rows) + b"\n")
    index = index_pairs(path)
    assert len(index.offsets) == 2
    assert [s.line for s in index.skipped] == [2] and "UTF-8" in index.skipped[0].reason


def test_api_key_echoed_in_an_answer_is_stored_redacted(run_cli, tmp_path: Path) -> None:
    data = pairs_file(tmp_path / "pairs.jsonl", 2, tag="echo ")
    with FakeOpenAIServer(f"Your key is {CANARY_KEY}. {VERDICT}") as server:
        result = run_cli(*[a for a in base_args(server, tmp_path, "--data-path", str(data)) if a != "--no-report"])
    assert result.returncode == 0, result.stderr
    results = results_of(tmp_path)
    stored = {
        "results.json": json.dumps(results),
        "jsonl": next((tmp_path / "results" / "latest").glob("*.jsonl")).read_text(),
        "report": (tmp_path / "results" / "latest" / "report.html").read_text(),
    }
    with sqlite3.connect(tmp_path / "j.db") as connection:
        for table in ("judgments", "call_cache", "runs"):
            stored[table] = repr(connection.execute(f"SELECT * FROM {table}").fetchall())
    assert "Your key is ***" in stored["judgments"]
    for where, text in stored.items():
        assert CANARY_KEY not in text, where


# ----- 8. runs left "running" --------------------------------------------------------------------------


@pytest.mark.slow
def test_killed_run_is_marked_crashed_and_compare_warns(run_cli, tmp_path: Path, prefect_server) -> None:
    data = pairs_file(tmp_path / "pairs.jsonl", 4, tag="killed ")
    db_file = tmp_path / "j.db"
    with FakeOpenAIServer(VERDICT) as server:
        done = run_cli(*base_args(server, tmp_path, "--data-path", str(data)))
        assert done.returncode == 0, done.stderr
        finished_id = results_of(tmp_path)["run"]["run_id"]
        server.configure(latency=60.0)
        args = [
            sys.executable,
            "-m",
            "judgebench_flows.cli.main",
            *base_args(server, tmp_path, "--data-path", str(data), "--no-cache"),
        ]
        env = {**os.environ, "OPENAI_API_KEY": CANARY_KEY, "JUDGEBENCH_CACHE_DIR": str(tmp_path / "cache")}
        victim = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline, running = time.monotonic() + 180, []
            while not running and time.monotonic() < deadline and victim.poll() is None:
                time.sleep(0.2)
                with sqlite3.connect(db_file) as connection:
                    running = connection.execute("SELECT run_id FROM runs WHERE status = 'running'").fetchall()
            assert running, "the second run never started"
            os.kill(victim.pid, signal.SIGKILL)
            victim.wait(timeout=30)
        finally:
            if victim.poll() is None:
                victim.kill()
    killed_id = running[0][0]
    history = run_cli("history", "--db-url", f"sqlite:///{db_file}", env={"COLUMNS": "250"})
    assert history.returncode == 0, history.stderr
    with sqlite3.connect(db_file) as connection:
        status = connection.execute("SELECT status FROM runs WHERE run_id = ?", (killed_id,)).fetchone()[0]
    assert status == "crashed"
    assert "crashed" in history.stdout
    compared = run_cli("compare", finished_id, killed_id, "--db-url", f"sqlite:///{db_file}")
    assert compared.returncode == 0, compared.stderr
    assert "warning:" in compared.stderr and "crashed" in compared.stderr


def test_a_live_running_run_is_not_marked_crashed(tmp_path: Path) -> None:
    import socket

    from judgebench_flows.data import db

    engine = db.open_database(f"sqlite:///{tmp_path}/runs.db")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    for run_id, pid, host in (
        ("alive", os.getpid(), socket.gethostname()),
        ("dead", gone.pid, socket.gethostname()),
        ("elsewhere", gone.pid, "another-host"),
    ):
        db.save_run(
            engine,
            run_id=run_id,
            config_key="k",
            judge_type="j",
            model="m",
            status="running",
            host=host,
            pid=pid,
            config_json="{}",
        )
    assert db.mark_crashed(engine) == ["dead"]
    assert {r.run_id: r.status for r in db.list_runs(engine)} == {
        "alive": "running",
        "dead": "crashed",
        "elsewhere": "running",
    }


def test_compare_warns_when_runs_differ() -> None:
    from judgebench_flows.data.db import RunRow
    from judgebench_flows.scoring.compare import comparison_warnings

    a = RunRow(
        run_id="a" * 8,
        config_key="k",
        judge_type="arena_hard",
        model="m1",
        status="completed",
        config_json='{"single_game": false}',
    )
    b = RunRow(
        run_id="b" * 8,
        config_key="k",
        judge_type="arena_hard",
        model="m2",
        status="completed",
        config_json='{"single_game": true}',
    )
    (warning,) = comparison_warnings(a, b)
    assert "differ in model, protocol: a difference in accuracy may come from any of them" in warning
    assert comparison_warnings(a, a) == []


# ----- 9. any revision git understands, for a local repository ------------------------------------------


def test_local_repository_refs(tmp_path: Path) -> None:
    from judgebench_flows.core.errors import UserError
    from judgebench_flows.data.dataset import fetch_repository

    source = tmp_path / "source"
    first = make_repo(source, {"data/x.jsonl": json.dumps(pair(0)) + "\n"}, copy_shared=False)
    (source / "data" / "x.jsonl").write_text(json.dumps(pair(1)) + "\n")
    git("commit", "-qam", "second", cwd=source)
    second = git("rev-parse", "HEAD", cwd=source)
    git("tag", "v1", first, cwd=source)
    cache = tmp_path / "cache"
    for url in (f"file://{source}", str(source)):
        assert fetch_repository(url, "HEAD", cache).commit == second
        assert fetch_repository(url, "HEAD~1", cache).commit == first
        assert fetch_repository(url, first[:8], cache).commit == first
        assert fetch_repository(url, "v1", cache).commit == first
        assert fetch_repository(url, "main", cache).commit == second
    checkout = fetch_repository(f"file://{source}", "HEAD~1", cache)
    assert "p0" in (checkout.path / "data" / "x.jsonl").read_text()
    with pytest.raises(UserError, match="ref 'nope' not found"):
        fetch_repository(f"file://{source}", "nope", cache)

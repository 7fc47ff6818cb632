"""Whole runs (`judgebench run` in a subprocess, real Prefect server, real clone) against an endpoint that
rejects what OpenAI's API rejects for reasoning models, and runs that measured nothing ending loudly."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._helpers import run_command
from tests.conftest import SHARED, VERDICTS, load_jsonl, oracle_responder

pytestmark = pytest.mark.slow
EXIT_RUN_FAILED = 4


def readme_command(
    repo: tuple[str, str], server: FakeOpenAIServer, tmp_path: Path, model: str, *extra: str
) -> list[str]:
    """The README's headline command (o1-mini, arena_hard), on a seeded subset to stay quick."""
    return run_command(repo, server, tmp_path, "--max-samples", "40", *extra, model=model)


def arena_system() -> str:
    from judgebench_flows.judges.prompts import TemplateSet

    return TemplateSet(SHARED / "utils" / "templates").render("arena_hard_judge_system")


def flow_run_state(tmp_path: Path) -> str:
    import asyncio

    from prefect.client.orchestration import get_client

    with sqlite3.connect(tmp_path / "judgebench.db") as con:
        [(flow_run_id,)] = con.execute("select flow_run_id from runs").fetchall()

    async def read() -> str:
        async with get_client() as client:
            return (await client.read_flow_run(flow_run_id)).state.type.value

    return asyncio.run(read())


def test_readme_o1_mini_command_completes_with_judgebenchs_folded_requests(
    run_cli, judgebench_repo, gpt4o_pairs, tmp_path
):
    bodies: list[dict] = []
    oracle = oracle_responder(gpt4o_pairs, VERDICTS["arena_hard"])

    def respond(body: dict) -> str:
        bodies.append(body)
        return oracle(body)

    with FakeOpenAIServer(respond, openai_rules=True) as server:
        result = run_cli(*readme_command(judgebench_repo, server, tmp_path, "o1-mini-2024-09-12"))
        assert result.returncode == 0, result.stderr[-3000:]
        assert server.status_counts == {200: 80}, "no request rejected"
    results = json.loads((tmp_path / "results/judgebench.json").read_text())
    assert results["invalid"]["failed_judgments"] == 0 and results["overall_accuracy"]["accuracy"] == 1.0
    assert results["run"]["requests"]["rule"] == "o1" and results["run"]["requests"]["adjustments"] == []

    # Byte for byte what JudgeBench's utils/models.py sends an o1 model: one user turn, no sampling.
    system = arena_system()
    rows = load_jsonl(next((tmp_path / "results/run").glob("*judge_name=arena_hard*.jsonl")))
    expected = {
        f"<|BEGIN_SYSTEM_MESSAGE|>\n{system.strip()}\n<|END_SYSTEM_MESSAGE|>\n\n{j['judgment']['prompt']}"
        for row in rows
        for j in row["judgments"]
    }
    assert all(set(body) == {"model", "messages"} and len(body["messages"]) == 1 for body in bodies)
    assert {body["messages"][0]["content"] for body in bodies} == expected


@pytest.mark.parametrize("model", ["o3-mini-2025-01-31", "gpt-5-2025-08-07"])
def test_o3_mini_and_gpt_5_complete_with_no_failed_judgment(run_cli, judgebench_repo, gpt4o_pairs, tmp_path, model):
    bodies: list[dict] = []
    oracle = oracle_responder(gpt4o_pairs, VERDICTS["arena_hard"])

    def respond(body: dict) -> dict:
        bodies.append(body)
        return {"content": oracle(body), "reasoning_tokens": 7}

    with FakeOpenAIServer(respond, openai_rules=True) as server:
        result = run_cli(*readme_command(judgebench_repo, server, tmp_path, model, "--reasoning-effort", "low"))
        assert result.returncode == 0, result.stderr[-3000:]
        assert server.status_counts == {200: 80}
    results = json.loads((tmp_path / "results/judgebench.json").read_text())
    assert results["invalid"]["failed_judgments"] == 0 and results["usage"]["reasoning_tokens"] == 80 * 7
    assert all(
        b["max_completion_tokens"] == 4096 and b["reasoning_effort"] == "low" and "temperature" not in b for b in bodies
    )


def test_unknown_model_rejecting_temperature_gets_one_adjustment_recorded_in_results_and_report(
    run_cli, judgebench_repo, gpt4o_pairs, tmp_path
):
    with FakeOpenAIServer(
        oracle_responder(gpt4o_pairs, VERDICTS["arena_hard"]), rejected_params={"temperature"}
    ) as server:
        result = run_cli(
            *readme_command(
                judgebench_repo, server, tmp_path, "acme-judge-7", "--concurrency", "1", "--max-samples", "5"
            )
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert server.status_counts == {400: 1, 200: 10}, "exactly one rejected request"
    results = json.loads((tmp_path / "results/judgebench.json").read_text())
    [change] = results["run"]["requests"]["adjustments"]
    assert change["param"] == "temperature" and change["action"] == "dropped"
    assert results["invalid"]["failed_judgments"] == 0
    report = (tmp_path / "results/run/report.html").read_text()
    assert 'id="request-adjustments"' in report and "temperature" in report
    assert "temperature" in result.stdout and "adjusted" in result.stdout


def test_every_call_rejected_stops_early_exit_4_flow_failed(run_cli, judgebench_repo, tmp_path, prefect_server):
    with FakeOpenAIServer("[[A>B]]", max_context_chars=10) as server:
        result = run_cli(
            *readme_command(judgebench_repo, server, tmp_path, "gpt-4o", "--max-samples", "200", "--concurrency", "4")
        )
        sent = server.requests
    assert result.returncode == EXIT_RUN_FAILED, result.stderr[-3000:]
    assert 20 <= sent <= 24, f"stopped after the first 20 rejected calls (plus those in flight), not {sent} of 400"
    lines = [line for line in result.stderr.splitlines() if line.startswith("run failed:")]
    assert len(lines) == 1 and "stopped early" in lines[0] and "maximum context length is 10 tokens" in lines[0]
    assert "Traceback" not in result.stderr
    with sqlite3.connect(tmp_path / "judgebench.db") as con:
        assert [status for (status,) in con.execute("select status from runs")] == ["failed"]
    assert flow_run_state(tmp_path) == "FAILED"
    # What it had is published all the same: results.json says why the run is not a measurement.
    published = json.loads((tmp_path / "results/judgebench.json").read_text())
    assert published["run"]["status"] == "failed" and published["run"]["failure"].startswith("stopped early")


def test_mostly_invalid_verdicts_fail_the_run_after_publishing(run_cli, judgebench_repo, tmp_path, prefect_server):
    with FakeOpenAIServer("I would rather not say.") as server:
        result = run_cli(*readme_command(judgebench_repo, server, tmp_path, "gpt-4o", "--max-samples", "10"))
    assert result.returncode == EXIT_RUN_FAILED, result.stderr[-3000:]
    results = json.loads((tmp_path / "results/judgebench.json").read_text())  # published: inspectable
    assert results["run"]["status"] == "failed" and "20 of 20 judgments" in results["run"]["failure"]
    assert "0.00%" not in result.stdout and "n/a" in result.stdout
    assert "0 failed and 20 invalid of 20 judgments" in result.stdout and "no verdict found" in result.stdout
    with sqlite3.connect(tmp_path / "judgebench.db") as con:
        assert [status for (status,) in con.execute("select status from runs")] == ["failed"]
    assert flow_run_state(tmp_path) == "FAILED"
    # Allowed by a looser threshold: the same run then succeeds.
    with FakeOpenAIServer("I would rather not say.") as server:
        again = run_cli(
            *readme_command(
                judgebench_repo, server, tmp_path, "gpt-4o", "--max-samples", "10", "--max-failed-fraction", "1"
            )
        )
    assert again.returncode == 0, again.stderr[-3000:]

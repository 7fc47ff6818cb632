"""The whole product as a user runs it: `judgebench run` clones the real JudgeBench data, judges it through
the real openai client against a real HTTP endpoint, and publishes every output."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter

import pytest

from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._helpers import run_command
from tests.conftest import GPT4O_FILE, VERDICTS, load_jsonl, oracle_responder

CATEGORY_SIZES = {"mmlu-pro": 154, "livebench-reasoning": 98, "livebench-math": 56, "livecodebench": 42}


@pytest.fixture(scope="module")
def oracle_server(gpt4o_pairs):
    with FakeOpenAIServer(oracle_responder(gpt4o_pairs, VERDICTS["arena_hard"])) as server:
        yield server


def official_accuracy(rows: list[dict]) -> float:
    """JudgeBench's own metric (utils/metrics.py), applied to our JSONL exactly as its scripts would."""

    def flip(d):
        return {"A>B": "B>A", "B>A": "A>B"}.get(d, d)

    correct = 0
    for row in rows:
        d1, d2 = row["judgments"][0]["decision"], flip(row["judgments"][1]["decision"])
        score = sum(1 if d == row["label"] else -1 if d == flip(row["label"]) else 0 for d in (d1, d2))
        correct += score > 0
    return correct / len(rows)


def test_full_gpt4o_run_writes_every_output_and_reruns_free(run_cli, judgebench_repo, oracle_server, tmp_path):
    oracle_server.reset_counters()
    result = run_cli(*run_command(judgebench_repo, oracle_server, tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert oracle_server.answered == 700  # 350 pairs x both orders, nothing paid twice

    results = json.loads((tmp_path / "results/judgebench.json").read_text())
    assert results["model"] == "o1-mini-2024-09-12" and results["judge_type"] == "arena_hard"
    assert results["dataset"]["commit"] == judgebench_repo[1]
    assert results["dataset"]["n_pairs"] == 350 and results["dataset"]["data_file"] == GPT4O_FILE
    overall = results["overall_accuracy"]
    assert (overall["accuracy"], overall["correct_count"], overall["valid_samples"], overall["total_samples"]) == (
        1.0,
        350,
        350,
        350,
    )
    assert {name: acc["total_samples"] for name, acc in results["category_accuracy"].items()} == CATEGORY_SIZES
    assert all(acc["accuracy"] == 1.0 for acc in results["category_accuracy"].values())
    assert results["source_accuracy"]["mmlu-pro-law"]["total_samples"] == 11
    assert results["consistency"]["consistency"] == 1.0
    assert results["invalid"]["invalid_judgments"] == 0 and results["invalid"]["failed_judgments"] == 0
    assert results["usage"]["calls"] == 700 and results["usage"]["prompt_tokens"] > 0
    assert results["run"]["flow_run_id"] and results["run"]["started"] <= results["run"]["finished"]

    # The JudgeBench-shaped JSONL: its own metric code reads it and agrees.
    jsonl = (
        tmp_path
        / "results/run"
        / f"{GPT4O_FILE.removesuffix('.jsonl')},judge_name=arena_hard,judge_model=o1-mini-2024-09-12.jsonl"
    )
    rows = load_jsonl(jsonl)
    assert len(rows) == 350 and all(len(r["judgments"]) == 2 for r in rows)
    first = rows[0]["judgments"][0]["judgment"]
    assert set(first) == {"judge_model", "prompt", "response"} and "[[" in first["response"]
    assert first["prompt"].startswith("<|User Prompt|>") and rows[0]["question"] in first["prompt"]
    assert official_accuracy(rows) == 1.0

    with sqlite3.connect(tmp_path / "judgebench.db") as con:
        assert con.execute("select status, n_pairs from runs").fetchall() == [("completed", 350)]
        assert con.execute("select count(*) from judgments").fetchone()[0] == 700
        assert con.execute("select count(*) from metrics where scope='category'").fetchone()[0] == 4
        assert con.execute("select count(*) from call_cache").fetchone()[0] == 700
    assert (tmp_path / "results/run/report.html").stat().st_size > 10_000

    # Same command again: every answer comes from the cache, the endpoint sees nothing.
    oracle_server.reset_counters()
    again = run_cli(*run_command(judgebench_repo, oracle_server, tmp_path))
    assert again.returncode == 0, again.stderr[-3000:]
    assert oracle_server.requests == 0
    rerun = json.loads((tmp_path / "results/judgebench.json").read_text())
    assert rerun["overall_accuracy"]["accuracy"] == 1.0 and rerun["usage"]["cached_calls"] == 700
    assert rerun["regression"] is not None and rerun["regression"]["regressed"] is False


def test_always_a_scores_zero_in_both_orders_and_label_share_in_single_game(
    run_cli, judgebench_repo, gpt4o_pairs, tmp_path
):
    share_a = Counter(p["label"] for p in gpt4o_pairs)["A>B"] / len(gpt4o_pairs)
    with FakeOpenAIServer("My final verdict is [[A>B]]") as server:
        both = run_cli(*run_command(judgebench_repo, server, tmp_path))
        assert both.returncode == 0, both.stderr[-3000:]
        results = json.loads((tmp_path / "results/judgebench.json").read_text())
        assert results["overall_accuracy"]["accuracy"] == 0.0
        assert results["consistency"]["consistency"] == 0.0

        single = run_cli(
            *run_command(judgebench_repo, server, tmp_path, "--single-game", "--result-path", "single.json")
        )
        assert single.returncode == 0, single.stderr[-3000:]
        single_results = json.loads((tmp_path / "single.json").read_text())
        assert single_results["overall_accuracy"]["accuracy"] == pytest.approx(share_a, abs=1e-6)
        assert single_results["overall_accuracy"]["correct_count"] == 193
        assert single_results["run"]["mode"] == "single-game"


def test_shuffle_is_seeded_and_keeps_an_oracle_perfect(run_cli, judgebench_repo, oracle_server, tmp_path):
    def swaps(result_name: str, out: str) -> list[bool]:
        rows = load_jsonl(next((tmp_path / out).glob("*.jsonl")))
        return [bool(r.get("swapped")) for r in rows]

    args = ("--shuffle-responses", "--seed", "7", "--max-samples", "80")
    first = run_cli(
        *run_command(judgebench_repo, oracle_server, tmp_path, *args, "--output-dir", "a", "--result-path", "a.json")
    )
    second = run_cli(
        *run_command(
            judgebench_repo,
            oracle_server,
            tmp_path,
            *args,
            "--output-dir",
            "b",
            "--result-path",
            "b.json",
            "--no-cache",
        )
    )
    assert first.returncode == 0 and second.returncode == 0, first.stderr[-2000:] + second.stderr[-2000:]
    a, b = json.loads((tmp_path / "a.json").read_text()), json.loads((tmp_path / "b.json").read_text())
    assert a["overall_accuracy"]["accuracy"] == b["overall_accuracy"]["accuracy"] == 1.0
    assert swaps("a.json", "a") == swaps("b.json", "b")
    assert 20 < sum(swaps("a.json", "a")) < 60  # about half of 80 pairs swapped
    other = run_cli(
        *run_command(
            judgebench_repo,
            oracle_server,
            tmp_path,
            "--shuffle-responses",
            "--seed",
            "8",
            "--max-samples",
            "80",
            "--output-dir",
            "c",
            "--result-path",
            "c.json",
        )
    )
    assert other.returncode == 0
    assert swaps("c.json", "c") != swaps("a.json", "a")

"""A pairwise external judge decides JudgeBench pairs through the same flow as an LLM judge: both orders,
the official metric, the JudgeBench-shaped JSONL, no endpoint at all."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import load_jsonl

PAIRWISE = str(Path(__file__).resolve().parents[1] / "judges" / "external" / "pairwise_exact.py")


def write_pairs(path: Path, gpt4o_pairs: list[dict]) -> None:
    """20 pairs whose better response ends with the reference answer, 4 with no reference at all."""
    rows = []
    for i, pair in enumerate(gpt4o_pairs[:24]):
        row = dict(pair)
        better, worse = ("response_A", "response_B") if pair["label"] == "A>B" else ("response_B", "response_A")
        row[better] = f"{pair[better]}\nThe answer is ANSWER{i}."
        row[worse] = f"{pair[worse]}\nThe answer is WRONG{i}."
        if i < 20:
            row["ground_truth"] = f"ANSWER{i}"
        rows.append(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_pairwise_external_judge_scores_judgebench_pairs_without_an_endpoint(run_cli, gpt4o_pairs, tmp_path):
    write_pairs(tmp_path / "pairs.jsonl", gpt4o_pairs)
    result = run_cli(
        "run",
        "--judge-type",
        "external",
        "--external-judge-path",
        PAIRWISE,
        "--data-path",
        "pairs.jsonl",
        "--result-path",
        "r.json",
        "--output-dir",
        "out",
        "--db-url",
        f"sqlite:///{tmp_path}/jb.db",
        "--no-progress",
        "--max-failed-fraction",
        "0.2",  # 8 of 48 verdicts invalid (no reference): allowed here
    )
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((tmp_path / "r.json").read_text())
    assert results["judge_type"] == "external:pairwise_exact"
    overall = results["overall_accuracy"]
    assert (overall["correct_count"], overall["valid_samples"], overall["total_samples"]) == (20, 20, 24)
    assert results["invalid"]["invalid_judgments"] == 8  # 4 pairs without a reference, both orders
    assert results["usage"]["calls"] == 0
    rows = load_jsonl(next((tmp_path / "out").glob("*.jsonl")))
    judged = rows[0]["judgments"]
    assert [j["decision"] for j in judged] == [rows[0]["label"], {"A>B": "B>A", "B>A": "A>B"}[rows[0]["label"]]]
    assert "reference answer" in judged[0]["judgment"]["response"]

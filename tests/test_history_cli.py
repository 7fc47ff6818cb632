"""Run history through the CLI: `history`, `compare`, `report`, and regression alerts end to end.

Four real runs of `judgebench run` on a small JudgeBench-shaped file, each against a real
OpenAI-compatible server on loopback whose answers are right or wrong on known pairs:

  A  judge-a, always right         -> completed, 100%
  B  judge-b, wrong on 3 pairs     -> completed, 87.5%; `compare A B` flips exactly those 3
  C  judge-a again, always right   -> same configuration as A, equal: not flagged
  D  judge-a, wrong on 18 pairs    -> same configuration, much worse: "regressed", exit code 1,
                                      a `regression` block in results.json and in the Prefect artifact
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from judgebench_flows.scoring.compare import compare_runs
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._helpers import labelled_responder, table_rows

CATEGORY_SOURCES = {
    "mmlu-pro": "mmlu-pro-law",
    "livebench-reasoning": "livebench-reasoning",
    "livebench-math": "livebench-math",
    "livecodebench": "livecodebench",
}
WRONG_FOR_B = {"pair-mmlu-pro-1", "pair-livebench-math-2", "pair-livebench-math-4"}


def _pairs() -> list[dict]:
    """24 pairs, 6 per category, labels alternating, every response text unique."""
    rows = []
    for category, source in CATEGORY_SOURCES.items():
        for i in range(6):
            pair_id = f"pair-{category}-{i}"
            rows.append(
                {
                    "pair_id": pair_id,
                    "original_id": i,
                    "source": source,
                    "response_model": "gpt-4o-2024-05-13",
                    "question": f"Question {i} about {category}: which answer is right?",
                    "response_A": f"Answer A to {pair_id}: the result is {i * 7 + 1}.",
                    "response_B": f"Answer B to {pair_id}: the result is {i * 7 + 2}.",
                    "label": "A>B" if i % 2 == 0 else "B>A",
                }
            )
    return rows


@pytest.mark.slow
def test_history_compare_report_and_regression_alerts(run_cli, prefect_server, tmp_path):
    pairs = _pairs()
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(p) + "\n" for p in pairs))
    db_url = f"sqlite:///{tmp_path}/history.db"
    wide = {"COLUMNS": "250"}  # rich tables: no truncated ids
    with FakeOpenAIServer() as probe:  # one endpoint address for every run: the endpoint is part of a configuration
        port = probe.port

    def run(name: str, model: str, wrong: set[str], *extra: str):
        with FakeOpenAIServer(labelled_responder(pairs, wrong), port=port) as server:
            proc = run_cli(
                "run",
                "--model",
                model,
                "--data-path",
                str(data),
                "--base-url",
                server.base_url,
                "--db-url",
                db_url,
                "--result-path",
                f"{name}/results.json",
                "--output-dir",
                name,
                "--no-progress",
                *extra,
                env=wide,
            )
        results_file = tmp_path / name / "results.json"
        results = json.loads(results_file.read_text()) if results_file.exists() else None
        return proc, results

    a, results_a = run("a", "judge-a", set())
    assert a.returncode == 0, a.stderr[-3000:]
    assert results_a["overall_accuracy"]["accuracy"] == 1.0 and results_a["regression"] is None
    assert (tmp_path / "a" / "report.html").is_file()
    b, results_b = run("b", "judge-b", WRONG_FOR_B)
    assert b.returncode == 0, b.stderr[-3000:]
    assert results_b["overall_accuracy"]["accuracy"] == 21 / 24
    id_a, id_b = results_a["run"]["run_id"], results_b["run"]["run_id"]

    history = run_cli("history", "--db-url", db_url, env=wide)
    assert history.returncode == 0, history.stderr
    # columns: run, started, judge, model, data, commit, status, accuracy, 95% CI, pairs
    rows = {row[0]: row for row in table_rows(history.stdout)}
    assert set(rows) == {id_a, id_b}
    assert (rows[id_a][3], rows[id_a][6], rows[id_a][7], rows[id_a][9]) == (
        "judge-a",
        "completed",
        "100.00",
        "24",
    )
    assert (rows[id_b][3], rows[id_b][6], rows[id_b][7]) == ("judge-b", "completed", "87.50")

    compare = run_cli("compare", id_a, id_b, "--db-url", db_url, env=wide)
    assert compare.returncode == 0, compare.stderr
    # slice, A, B, delta, 95% CI, p, verdict, pairs
    slices = {row[0]: row[3] for row in table_rows(compare.stdout) if len(row) == 8}
    assert slices == {
        "overall": "-12.50",
        "mmlu-pro": "-16.67",
        "livebench-reasoning": "+0.00",
        "livebench-math": "-33.33",
        "livecodebench": "+0.00",
    }
    assert "3 pairs changed verdict (0 fixed, 3 broken)" in compare.stdout
    shown = set(re.findall(r"pair-[a-z-]+-\d", compare.stdout))
    assert shown == WRONG_FOR_B
    comparison = compare_runs(db_url, id_a, id_b).model_dump()
    assert {f["pair_id"] for f in comparison["flipped"]} == WRONG_FOR_B and not any(
        f["now_correct"] for f in comparison["flipped"]
    )

    report = run_cli("report", id_a, "--db-url", db_url, "--output", "report-a.html")
    assert report.returncode == 0, report.stderr
    html = Path(tmp_path / report.stdout.strip().splitlines()[-1]).read_text()
    assert html.lstrip().lower().startswith("<!doctype html") and id_a in html

    # Same configuration as A and just as good: compared with A, not flagged.
    c, results_c = run("c", "judge-a", set(), "--no-cache")
    assert c.returncode == 0, c.stdout[-2000:] + c.stderr[-2000:]
    assert results_c["regression"]["baseline_run_id"] == id_a and results_c["regression"]["regressed"] is False

    # Same configuration, much worse: a regression against C, the previous run of this configuration.
    worse = {p["pair_id"] for p in pairs[:18]}
    d, results_d = run("d", "judge-a", worse, "--no-cache")
    assert d.returncode == 1, d.stdout[-2000:] + d.stderr[-2000:]
    regression = results_d["regression"]
    assert regression["regressed"] is True and regression["baseline_run_id"] == results_c["run"]["run_id"]
    assert regression["delta"] == pytest.approx(-18 / 24) and "regression" in regression["message"]
    assert "regression" in d.stdout

    history = run_cli("history", "--db-url", db_url, env=wide)
    rows = {row[0]: row for row in table_rows(history.stdout)}
    assert len(rows) == 4
    # the accuracy, and beside it the judge's run-to-run noise as measured across its earlier runs
    assert (rows[results_d["run"]["run_id"]][6], rows[results_d["run"]["run_id"]][7].split()[0]) == (
        "regressed",
        "25.00",
    )
    assert rows[results_c["run"]["run_id"]][6] == "completed"

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey

    with get_client(sync_client=True) as client:

        def summary(results: dict) -> str:
            [artifact] = client.read_artifacts(
                artifact_filter=ArtifactFilter(
                    key=ArtifactFilterKey(like_="judgebench-summary-"),
                    flow_run_id=ArtifactFilterFlowRunId(any_=[results["run"]["flow_run_id"]]),
                )
            )
            return artifact.data

        assert "**Regression check:**" in summary(results_d) and regression["message"] in summary(results_d)
        assert "within the judge's noise" in summary(results_c)

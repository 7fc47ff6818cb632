"""Each run keeps its own results: a folder per run id (`results/<run id>/`), `results/latest` linking the
newest; nothing a past run wrote is overwritten unless `--result-path`/`--output-dir` name it.

Real parts: `judgebench run` as a subprocess, the bundled OpenAI-compatible server, the session's Prefect
server, a JudgeBench-shaped JSONL file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from judgebench_flows.data.outputs import point_latest
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests.test_bad_input import base_args, pair, write_jsonl


@pytest.fixture(scope="module")
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer("My final verdict is [[A>B]]") as fake:
        yield fake


def test_two_runs_keep_two_folders_and_latest_names_the_newest(run_cli, server, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "pairs.jsonl", [pair(i) for i in range(3)])
    args = base_args(server, tmp_path, "--data-path", str(data), "--no-cache")
    runs = []
    for _ in range(2):
        done = run_cli(*[a for a in args if a != "--no-report"])
        assert done.returncode == 0, done.stderr
        runs.append(json.loads((tmp_path / "results/latest/results.json").read_text())["run"]["run_id"])
    first, second = runs
    assert first != second
    for run_id in runs:
        folder = tmp_path / "results" / run_id
        kept = json.loads((folder / "results.json").read_text())
        assert kept["run"]["run_id"] == run_id, "a later run overwrote an earlier one's results"
        assert (folder / "report.html").is_file() and list(folder.glob("*.jsonl"))
    assert (tmp_path / "results/latest").resolve() == (tmp_path / "results" / second).resolve()
    assert not (tmp_path / "results/judgebench.json").exists()

    named = run_cli(*args, "--result-path", "mine.json", "--output-dir", "mine")
    assert named.returncode == 0, named.stderr
    assert json.loads((tmp_path / "mine.json").read_text())["run"]["run_id"] not in runs
    assert (tmp_path / "results/latest").resolve() == (tmp_path / "results" / second).resolve()


def test_latest_is_replaced_not_followed(tmp_path: Path) -> None:
    """A second link replaces the first (no `latest/<id>` link inside the previous run's folder)."""
    (tmp_path / "out" / "a").mkdir(parents=True)
    (tmp_path / "out" / "b").mkdir(parents=True)
    layout = str(tmp_path / "out" / "{run_id}")
    assert point_latest(layout, "a") == tmp_path / "out" / "latest"
    assert point_latest(layout, "b") == tmp_path / "out" / "latest"
    assert (tmp_path / "out" / "latest").resolve() == tmp_path / "out" / "b"
    assert list((tmp_path / "out" / "a").iterdir()) == []
    assert point_latest(str(tmp_path / "fixed"), "c") is None


def test_a_failed_run_keeps_its_folder_and_latest_stays_the_last_good_one(run_cli, server, tmp_path: Path) -> None:
    """A run whose every verdict is unreadable (the endpoint answers nonsense) measured nothing: it keeps its
    own folder, marked FAILED, and `results/latest` still names the newest run that finished with results."""
    data = write_jsonl(tmp_path / "pairs.jsonl", [pair(i) for i in range(3)])
    good = run_cli(*base_args(server, tmp_path, "--data-path", str(data), "--no-cache"))
    assert good.returncode == 0, good.stderr
    good_id = json.loads((tmp_path / "results/latest/results.json").read_text())["run"]["run_id"]
    with FakeOpenAIServer("I cannot decide.") as nonsense:
        failed = run_cli(*base_args(nonsense, tmp_path, "--data-path", str(data), "--no-cache"))
    assert failed.returncode == 4, failed.stderr
    folders = {p.parent.name for p in (tmp_path / "results").glob("*/results.json") if p.parent.name != "latest"}
    [failed_id] = folders - {good_id}
    assert "judgments failed or were invalid" in (tmp_path / "results" / failed_id / "FAILED").read_text()
    assert json.loads((tmp_path / "results" / failed_id / "results.json").read_text())["run"]["status"] == "failed"
    assert (tmp_path / "results/latest").resolve() == (tmp_path / "results" / good_id).resolve()
    assert not (tmp_path / "results" / good_id / "FAILED").exists()


def test_results_written_under_the_old_name_are_still_read(tmp_path: Path) -> None:
    """The CLI wrote `judgebench.json` before; deployments `results.json`: one name now, the old one read."""
    from judgebench_flows.data.outputs import latest_results
    from judgebench_flows.scoring.run_results import results_of_flow_run

    old = tmp_path / "results" / "r1"
    old.mkdir(parents=True)
    (old / "judgebench.json").write_text(json.dumps({"run": {"run_id": "r1", "flow_run_id": "f1"}}))
    point_latest(str(tmp_path / "results" / "{run_id}"), "r1")
    layout = str(tmp_path / "results" / "{run_id}" / "results.json")
    assert latest_results(layout) == {"run": {"run_id": "r1", "flow_run_id": "f1"}}
    found = results_of_flow_run(layout, "f1")
    assert found is not None and (found.run.run_id, found.run.flow_run_id) == ("r1", "f1")
    assert results_of_flow_run(layout, "f2") is None


def test_a_published_file_that_is_not_a_results_json_is_skipped_like_a_missing_one(tmp_path: Path) -> None:
    """The runs' files are read back as `RunResults`, checked once where read: one that is JSON but not
    a results.json (or not JSON at all) is passed over, and the runs around it are still found."""
    from judgebench_flows.scoring.run_results import published_results, results_of_flow_run

    for name, text in [
        ("good", json.dumps({"run": {"run_id": "good", "flow_run_id": "f1"}, "overall_accuracy": {"accuracy": 0.5}})),
        ("wrong", json.dumps({"run": {"run_id": "wrong", "flow_run_id": "f2", "status": "maybe"}})),
        ("list", json.dumps([{"run": {"flow_run_id": "f3"}}])),
        ("torn", '{"run": {"flow_run_id": "f4"'),
    ]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(text)
    layout = str(tmp_path / "{run_id}" / "results.json")
    assert [r.run.run_id for r in published_results(layout)] == ["good"]
    found = results_of_flow_run(layout, "f1")
    assert found is not None and found.overall_accuracy.accuracy == 0.5
    assert all(results_of_flow_run(layout, f) is None for f in ("f2", "f3", "f4"))

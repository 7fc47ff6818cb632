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
        runs.append(json.loads((tmp_path / "results/latest/judgebench.json").read_text())["run"]["run_id"])
    first, second = runs
    assert first != second
    for run_id in runs:
        folder = tmp_path / "results" / run_id
        kept = json.loads((folder / "judgebench.json").read_text())
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

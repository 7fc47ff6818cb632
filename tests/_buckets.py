"""A run and a night whose results go to a bucket, as the object-storage tests drive them: `s3://` on moto's
server (test_object_storage), `gs://` and `az://` on their emulators (test_object_storage_clouds). A store
is any of tests/_s3.py's or tests/_clouds.py's servers: its `scheme`, its `env` and its `objects(bucket)`.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._helpers import run_night
from tests.conftest import CANARY_KEY, make_repo
from tests.test_bad_input import pair, write_jsonl

JUDGMENTS = "pairs,judge_name=arena_hard,judge_model=judge-model.jsonl"


def bucket_places(tmp_path: Path) -> dict[str, Path]:
    """An empty working directory (a run to a bucket must leave it empty), and everything else the run
    needs somewhere else: four pairs and the SQLite database."""
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    data = write_jsonl(elsewhere / "pairs.jsonl", [pair(i) for i in range(4)])
    return {"work": work, "elsewhere": elsewhere, "data": data, "db": elsewhere / "results.db"}


def judgebench(cwd: Path, store: Any, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`judgebench ...` as a user runs it, in `cwd`, with the cloud's own chain pointed at `store`."""
    env = {**os.environ, **store.env, "OPENAI_API_KEY": CANARY_KEY}
    return subprocess.run(
        [sys.executable, "-m", "judgebench_flows.cli.main", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_args(endpoint: FakeOpenAIServer, places: dict[str, Path], *extra: str) -> list[str]:
    return [
        "run",
        "--model",
        "judge-model",
        "--base-url",
        endpoint.base_url,
        "--data-path",
        str(places["data"]),
        "--db-url",
        f"sqlite:///{places['db']}",
        "--no-progress",
        "--bootstrap-resamples",
        "50",
        *extra,
    ]


def two_runs_to_bucket(
    store: Any, bucket: str, endpoint: FakeOpenAIServer, places: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str], list[str], str]:
    """Two runs to `{scheme}://{bucket}/runs/{run_id}`, checked: each run its folder (results, judgments,
    report, nothing else), `runs/latest` naming the newer, nothing in the working directory. The two
    runs' processes, their ids and the newer one's."""
    layout = f"{store.scheme}://{bucket}/runs/{{run_id}}"
    args = run_args(endpoint, places, "--output-dir", layout, "--result-path", f"{layout}/results.json")
    monkeypatch.setenv("JUDGEBENCH_CACHE_DIR", str(places["elsewhere"] / "cache"))
    first = judgebench(places["work"], store, *args)
    assert first.returncode == 0, first.stderr
    second = judgebench(places["work"], store, *args)
    assert second.returncode == 0, second.stderr
    assert list(places["work"].iterdir()) == [], "the working directory got files"

    objects = {k: v for k, v in store.objects(bucket).items() if k.startswith("runs/")}
    run_ids = sorted({key.split("/")[1] for key in objects if key != "runs/latest"})
    assert len(run_ids) == 2, sorted(objects)
    for run_id in run_ids:
        folder = {key.split("/", 2)[2] for key in objects if key.startswith(f"runs/{run_id}/")}
        assert folder == {"results.json", "report.html", JUDGMENTS}
    newest = max(run_ids, key=lambda r: json.loads(objects[f"runs/{r}/results.json"])["run"]["started"])
    assert objects["runs/latest"].decode().strip() == newest  # `latest`: a pointer object to the newest run
    assert f"{store.scheme}://{bucket}/runs/" in first.stdout  # the summary says where the results are
    return first, second, run_ids, newest


def night_to_bucket(
    store: Any, bucket: str, endpoint: FakeOpenAIServer, places: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> dict[str, bytes]:
    """A night of two judges whose `output_root` is `{scheme}://{bucket}/nightly`, on the session's Prefect
    server, checked: both cells completed with an accuracy, each cell's folder and `latest` there, the
    night's leaderboard there, nothing in the working directory. The bucket's objects after it."""
    for name, value in store.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    repo = places["elsewhere"] / "JudgeBench"
    sha = make_repo(repo, {"data/pairs.jsonl": places["data"].read_text()}, copy_shared=False)
    root = f"{store.scheme}://{bucket}/nightly"
    matrix = {
        "judge_types": ["arena_hard"],
        "models": ["judge-a", "judge-b"],
        "data_files": ["pairs.jsonl"],
        "base_url": endpoint.base_url,
        "db_url": f"sqlite:///{places['db']}",
        "output_root": root,
        "repo_url": f"file://{repo}",
        "ref": sha,
        "options": {"cache_dir": str(places["elsewhere"] / "cache"), "bootstrap_resamples": 50},
    }
    path = places["elsewhere"] / "matrix.yaml"
    path.write_text(yaml.safe_dump(matrix))
    monkeypatch.chdir(places["work"])
    state = run_night(path)
    assert state.is_completed(), state.message
    outcomes = asyncio.run(state.aresult())
    assert [(o["status"], o["accuracy"] is not None) for o in outcomes] == [("completed", True)] * 2
    objects = store.objects(bucket)
    for outcome in outcomes:
        assert outcome["result_path"].startswith(f"{root}/{outcome['name']}/")
        pointer = objects[f"nightly/{outcome['name']}/latest"].decode().strip()
        results = json.loads(objects[f"nightly/{outcome['name']}/{pointer}/results.json"])
        assert results["run"]["run_id"] == outcome["run_id"]
    board = json.loads(objects["nightly/leaderboard.json"])
    assert {e["judge_model"] for e in board["entries"] if e["origin"] == "run"} >= {"judge-a", "judge-b"}
    assert "nightly/leaderboard.html" in objects
    page = objects["nightly/dashboard.html"].decode()  # the night's page, beside its outputs in the bucket
    [own] = [k for k in objects if k.startswith("nightly/dashboards/")]
    assert re.fullmatch(r"nightly/dashboards/\d{4}-\d{2}-\d{2}\.html", own), own
    assert objects[own].decode() == page and page.count('<tr data-config="') == 2
    assert list(places["work"].iterdir()) == []
    return objects

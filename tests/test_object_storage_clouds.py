"""Results in `gs://` and `az://` as in `s3://` (tests/test_object_storage.py), on real storage APIs on
loopback: Google Cloud Storage's emulator and Azure's Azurite (tests/_clouds.py), started here; each
test skips with one line when its emulator is not installed.

A run's folder and its `latest` pointer in the bucket, a report written there, nothing in the working
directory; a night whose `output_root` is the bucket, its summary reading each cell's results back and
its leaderboard there; a missing bucket or container and refused credentials: one line naming the URL,
exit 2, before any call, no secret shown.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._clouds import (
    AZURITE_KEY,
    GCS_PRIVATE_KEY_CANARY,
    WRONG_AZURE_KEY,
    AzuriteServer,
    GcsServer,
    RefusingTokenEndpoint,
)
from tests.conftest import CANARY_KEY, make_repo
from tests.test_bad_input import assert_one_error, pair, write_jsonl
from tests.test_object_storage import judgebench, run_args

BUCKET = "judgebench"
CLOUDS = {"gs": GcsServer, "az": AzuriteServer}


@pytest.fixture(scope="module", params=sorted(CLOUDS))
def cloud(request, tmp_path_factory) -> Iterator[GcsServer | AzuriteServer]:
    kind = CLOUDS[request.param]
    why = kind.missing()
    if why:
        pytest.skip(why)
    with kind(log=tmp_path_factory.mktemp(request.param) / "emulator.log") as server:
        server.make_bucket(BUCKET)
        yield server


@pytest.fixture()
def places(tmp_path: Path) -> dict[str, Path]:
    """An empty working directory, and everything else the run needs somewhere else."""
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    data = write_jsonl(elsewhere / "pairs.jsonl", [pair(i) for i in range(4)])
    return {"work": work, "elsewhere": elsewhere, "data": data, "db": elsewhere / "results.db"}


@pytest.fixture(scope="module")
def endpoint() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer("My final verdict is [[A>B]]") as fake:
        yield fake


def assert_no_secret(*texts: str | bytes) -> None:
    for text in texts:
        data = text.encode() if isinstance(text, str) else text
        for secret in (AZURITE_KEY, CANARY_KEY, GCS_PRIVATE_KEY_CANARY, "BEGIN PRIVATE KEY"):
            assert secret.encode() not in data


@pytest.mark.slow
def test_a_run_writes_its_folder_latest_and_report_to_the_bucket(cloud, endpoint, places, prefect_server, monkeypatch):
    layout = f"{cloud.scheme}://{BUCKET}/runs/{{run_id}}"
    args = run_args(endpoint, places, "--output-dir", layout, "--result-path", f"{layout}/results.json")
    monkeypatch.setenv("JUDGEBENCH_CACHE_DIR", str(places["elsewhere"] / "cache"))
    first = judgebench(places["work"], cloud, *args)
    assert first.returncode == 0, first.stderr
    second = judgebench(places["work"], cloud, *args)
    assert second.returncode == 0, second.stderr
    assert list(places["work"].iterdir()) == [], "the working directory got files"

    objects = {k: v for k, v in cloud.objects(BUCKET).items() if k.startswith("runs/")}
    run_ids = sorted({key.split("/")[1] for key in objects if key != "runs/latest"})
    assert len(run_ids) == 2, sorted(objects)
    for run_id in run_ids:
        folder = {key.split("/", 2)[2] for key in objects if key.startswith(f"runs/{run_id}/")}
        assert folder == {"results.json", "report.html", "pairs,judge_name=arena_hard,judge_model=judge-model.jsonl"}
    newest = max(run_ids, key=lambda r: json.loads(objects[f"runs/{r}/results.json"])["run"]["started"])
    assert objects["runs/latest"].decode().strip() == newest  # `latest`: a pointer object to the newest run
    assert f"{cloud.scheme}://{BUCKET}/runs/" in first.stdout

    report = judgebench(
        places["work"], cloud, "report", newest, "--db-url", f"sqlite:///{places['db']}",
        "--output", f"{cloud.scheme}://{BUCKET}/reports/{newest}.html",
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    assert b"<html" in cloud.objects(BUCKET)[f"reports/{newest}.html"].lower()
    assert list(places["work"].iterdir()) == []
    assert_no_secret(*objects.values(), first.stdout, first.stderr, second.stderr, places["db"].read_bytes())


@pytest.mark.slow
def test_a_night_and_its_leaderboard_go_to_the_bucket(cloud, endpoint, places, prefect_server, monkeypatch):
    """Every cell's folder, its `latest` and the night's leaderboard in the bucket; the night's summary
    reads each cell's results back from it."""
    from judgebench_flows.flows.nightly import nightly_benchmarks

    for name, value in cloud.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    repo = places["elsewhere"] / "JudgeBench"
    sha = make_repo(repo, {"data/pairs.jsonl": places["data"].read_text()}, copy_shared=False)
    root = f"{cloud.scheme}://{BUCKET}/nightly"
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
    state = asyncio.run(nightly_benchmarks(str(path), retry_delay_seconds=0, return_state=True))
    assert state.is_completed(), state.message
    outcomes = asyncio.run(state.aresult())
    assert [(o["status"], o["accuracy"] is not None) for o in outcomes] == [("completed", True)] * 2
    objects = cloud.objects(BUCKET)
    for outcome in outcomes:
        assert outcome["result_path"].startswith(f"{root}/{outcome['name']}/")
        pointer = objects[f"nightly/{outcome['name']}/latest"].decode().strip()
        results = json.loads(objects[f"nightly/{outcome['name']}/{pointer}/results.json"])
        assert results["run"]["run_id"] == outcome["run_id"]
    board = json.loads(objects["nightly/leaderboard.json"])
    assert {e["judge_model"] for e in board["entries"] if e["origin"] == "run"} >= {"judge-a", "judge-b"}
    assert "nightly/leaderboard.html" in objects
    assert list(places["work"].iterdir()) == []
    assert_no_secret(*objects.values())


def test_a_missing_bucket_is_one_line_and_exit_2_before_any_call(cloud, endpoint, places):
    before = endpoint.snapshot()["requests"]
    url = f"{cloud.scheme}://no-such-bucket/runs"
    done = judgebench(places["work"], cloud, *run_args(endpoint, places, "--output-dir", url))
    assert_one_error(done, f"--output-dir: cannot write to '{url}': no such bucket or container")
    assert endpoint.snapshot()["requests"] == before, "a call was made before the storage was checked"
    assert list(places["work"].iterdir()) == []
    assert_no_secret(done.stdout, done.stderr)


def test_refused_credentials_are_one_line_naming_the_url(cloud, endpoint, places, tmp_path):
    """Azure: a wrong account key, which Azurite refuses as Azure does; Google: a service account whose
    token endpoint refuses its key, as Google's refuses a revoked one."""
    url = f"{cloud.scheme}://{BUCKET}/runs"
    before = endpoint.snapshot()["requests"]
    if isinstance(cloud, AzuriteServer):
        cloud.key = WRONG_AZURE_KEY
        try:
            done = judgebench(places["work"], cloud, *run_args(endpoint, places, "--output-dir", url))
        finally:
            cloud.key = AZURITE_KEY
        secrets = (WRONG_AZURE_KEY,)
    else:
        with RefusingTokenEndpoint(tmp_path) as refusing:
            with_key = _With(cloud, {"GOOGLE_APPLICATION_CREDENTIALS": str(refusing.file)})
            done = judgebench(places["work"], with_key, *run_args(endpoint, places, "--output-dir", url))
        secrets = (refusing.private_key.splitlines()[1],)
    assert_one_error(done, f"--output-dir: cannot write to '{url}': credentials refused")
    assert_no_secret(done.stdout, done.stderr)
    assert not any(secret in done.stdout + done.stderr for secret in secrets)
    assert endpoint.snapshot()["requests"] == before and list(places["work"].iterdir()) == []


class _With:
    """A store's environment with more variables (what `judgebench` runs with)."""

    def __init__(self, cloud: GcsServer | AzuriteServer, more: dict[str, str]) -> None:
        self.env = {**cloud.env, **more}

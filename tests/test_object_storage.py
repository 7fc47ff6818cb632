"""Results in object storage: a run, a night, a report, a rescore and the leaderboard to and from `s3://`
on a real S3 API (moto's server on loopback, started here), with the credentials only in AWS's own
environment chain: the run's working directory gets nothing, and the secret key is in no object, log,
Prefect parameter or database row. Bad storage input (an unknown scheme, a missing bucket, refused
credentials) is one line naming the URL and exit 2, before any call.

Real parts: `judgebench` as a subprocess, the bundled OpenAI-compatible server, the session's Prefect
server, moto's S3 server in its own process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._s3 import ACCESS_KEY_ID, SECRET_KEY, S3Server
from tests.conftest import CANARY_KEY, make_repo
from tests.test_bad_input import assert_one_error, pair, write_jsonl

BUCKET = "judgebench"


@pytest.fixture(scope="module")
def s3(tmp_path_factory) -> Iterator[S3Server]:
    with S3Server(log=tmp_path_factory.mktemp("moto") / "moto.log") as server:
        server.make_bucket(BUCKET)
        yield server


@pytest.fixture(scope="module")
def endpoint() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer("My final verdict is [[A>B]]") as fake:
        yield fake


def judgebench(cwd: Path, s3: S3Server, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`judgebench ...` as a user runs it, in `cwd`, with AWS's chain pointed at moto's server."""
    env = {**os.environ, **s3.env, "OPENAI_API_KEY": CANARY_KEY}
    return subprocess.run(
        [sys.executable, "-m", "judgebench_flows.cli.main", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_no_secret(*texts: str | bytes) -> None:
    for text in texts:
        data = text.encode() if isinstance(text, str) else text
        assert SECRET_KEY.encode() not in data and CANARY_KEY.encode() not in data


@pytest.fixture()
def places(tmp_path: Path) -> dict[str, Path]:
    """An empty working directory, and everything else the run needs somewhere else."""
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    data = write_jsonl(elsewhere / "pairs.jsonl", [pair(i) for i in range(4)])
    return {"work": work, "elsewhere": elsewhere, "data": data, "db": elsewhere / "results.db"}


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


def test_a_run_writes_its_folder_and_latest_to_s3_and_nothing_locally(
    s3, endpoint, places, prefect_server, monkeypatch
) -> None:
    layout = f"s3://{BUCKET}/runs/{{run_id}}"
    args = run_args(endpoint, places, "--output-dir", layout, "--result-path", f"{layout}/results.json")
    env_home = places["elsewhere"] / "cache"
    monkeypatch.setenv("JUDGEBENCH_CACHE_DIR", str(env_home))
    first = judgebench(places["work"], s3, *args)
    assert first.returncode == 0, first.stderr
    second = judgebench(places["work"], s3, *args)
    assert second.returncode == 0, second.stderr
    assert list(places["work"].iterdir()) == [], "the working directory got files"

    objects = s3.objects(BUCKET)
    run_ids = sorted({key.split("/")[1] for key in objects if key.startswith("runs/") and key != "runs/latest"})
    assert len(run_ids) == 2
    for run_id in run_ids:  # each run its folder: results, judgments, report; nothing else (no parts)
        folder = {key.split("/", 2)[2] for key in objects if key.startswith(f"runs/{run_id}/")}
        assert folder == {"results.json", "report.html", "pairs,judge_name=arena_hard,judge_model=judge-model.jsonl"}
        results = json.loads(objects[f"runs/{run_id}/results.json"])
        assert results["run"]["run_id"] == run_id and results["overall_accuracy"]["total_samples"] == 4
    newest = json.loads(objects[f"runs/{objects['runs/latest'].decode().strip()}/results.json"])
    assert newest["run"]["started"] == max(
        json.loads(objects[f"runs/{r}/results.json"])["run"]["started"] for r in run_ids
    ), "latest names the newest run"
    assert f"s3://{BUCKET}/runs/" in first.stdout  # the summary says where the results are

    # the report of a past run, and a rescore of a run's judgments, read from and written to the bucket
    run_id = run_ids[0]
    report = judgebench(
        places["work"],
        s3,
        "report",
        run_id,
        "--db-url",
        f"sqlite:///{places['db']}",
        "--output",
        f"s3://{BUCKET}/reports/{run_id}.html",
    )
    assert report.returncode == 0, report.stderr
    judged = f"s3://{BUCKET}/runs/{run_id}/pairs,judge_name=arena_hard,judge_model=judge-model.jsonl"
    rescore = judgebench(
        places["work"], s3, "rescore", judged, "--judge-type", "arena_hard",
        "--output", f"s3://{BUCKET}/rescored/judgments.jsonl", "--result-path", f"s3://{BUCKET}/rescored/rescore.json",
    )  # fmt: skip
    assert rescore.returncode == 0, rescore.stderr
    objects = s3.objects(BUCKET)
    assert b"<html" in objects[f"reports/{run_id}.html"].lower()
    assert json.loads(objects["rescored/rescore.json"])["pairs"] == 4
    assert len(objects["rescored/judgments.jsonl"].splitlines()) == 4
    assert list(places["work"].iterdir()) == []

    # the secret key: in no object, no output, no database row, no Prefect parameter or log
    assert_no_secret(*objects.values(), first.stdout, first.stderr, second.stderr, places["db"].read_bytes())
    assert_no_secret(_prefect_records(results["run"]["flow_run_id"]))
    assert ACCESS_KEY_ID not in first.stderr


def _prefect_records(flow_run_id: str) -> str:
    """A flow run's parameters and every log line the server holds for it, as one text."""
    from uuid import UUID

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    with get_client(sync_client=True) as client:
        run = client.read_flow_run(UUID(flow_run_id))
        logs = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run.id])))
    return json.dumps(run.parameters, default=str) + "\n".join(log.message for log in logs)


def test_a_night_and_its_leaderboard_go_to_s3(s3, endpoint, places, prefect_server, monkeypatch, tmp_path) -> None:
    """A night whose `output_root` is a bucket: every cell's folder, its `latest` and the night's
    leaderboard there; the summary reads each cell's results back from the bucket."""
    import asyncio

    import yaml

    from judgebench_flows.flows.nightly import nightly_benchmarks

    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    repo = places["elsewhere"] / "JudgeBench"
    sha = make_repo(repo, {"data/pairs.jsonl": places["data"].read_text()}, copy_shared=False)
    matrix = {
        "judge_types": ["arena_hard"],
        "models": ["judge-a", "judge-b"],
        "data_files": ["pairs.jsonl"],
        "base_url": endpoint.base_url,
        "db_url": f"sqlite:///{places['db']}",
        "output_root": f"s3://{BUCKET}/nightly",
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
    assert [o["status"] for o in outcomes] == ["completed", "completed"]
    objects = s3.objects(BUCKET)
    for outcome in outcomes:
        assert outcome["result_path"].startswith(f"s3://{BUCKET}/nightly/{outcome['name']}/")
        pointer = objects[f"nightly/{outcome['name']}/latest"].decode().strip()
        assert (
            json.loads(objects[f"nightly/{outcome['name']}/{pointer}/results.json"])["run"]["run_id"]
            == outcome["run_id"]
        )
    board = json.loads(objects["nightly/leaderboard.json"])
    assert {e["judge_model"] for e in board["entries"] if e["origin"] == "run"} >= {"judge-a", "judge-b"}
    assert "nightly/leaderboard.html" in objects
    assert list(places["work"].iterdir()) == []
    assert_no_secret(*objects.values())


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("foo://bucket/runs", "unknown URL scheme 'foo://' in 'foo://bucket/runs'"),
        ("s3://no-such-bucket/runs", "no such bucket or container"),
        (f"s3://{ACCESS_KEY_ID}:{SECRET_KEY}@{BUCKET}/runs", "carries credentials"),
    ],
    ids=["unknown-scheme", "missing-bucket", "credentials-in-url"],
)
def test_bad_storage_is_one_line_and_exit_2_before_any_call(s3, endpoint, places, url, says) -> None:
    before = endpoint.snapshot()["requests"]
    done = judgebench(places["work"], s3, *run_args(endpoint, places, "--output-dir", url))
    line = assert_one_error(done, "--output-dir", says)
    assert_no_secret(done.stdout, done.stderr)
    assert endpoint.snapshot()["requests"] == before, "a call was made before the storage was checked"
    assert list(places["work"].iterdir()) == []
    assert SECRET_KEY not in line


def test_refused_credentials_are_one_line_naming_the_url(endpoint, places, tmp_path) -> None:
    with S3Server(authenticated=True) as refusing:  # knows no key: refuses ours as AWS refuses a wrong one
        done = judgebench(places["work"], refusing, *run_args(endpoint, places, "--output-dir", f"s3://{BUCKET}/runs"))
    assert_one_error(done, f"--output-dir: cannot write to 's3://{BUCKET}/runs': credentials refused")
    assert_no_secret(done.stdout, done.stderr)
    assert ACCESS_KEY_ID not in done.stderr


def test_a_matrix_with_an_unknown_scheme_is_refused_when_read() -> None:
    from judgebench_flows.core.errors import UserError
    from judgebench_flows.judging.matrix import parse_matrix

    base = {"judge_types": ["vanilla"], "models": ["m"], "data_files": ["x.jsonl"]}
    with pytest.raises(UserError, match=r"output_root: .*unknown URL scheme 'ftp://'"):
        parse_matrix({**base, "output_root": "ftp://host/nightly"})
    assert parse_matrix({**base, "output_root": "s3://bucket/nightly"}).entries()[0].config.output_dir == (
        "s3://bucket/nightly/vanilla__m__x/{run_id}"
    )


def test_paths_and_urls_join_alike() -> None:
    from judgebench_flows.data import storage
    from judgebench_flows.data.outputs import resolve_latest

    assert storage.join("s3://b/runs", "x", "results.json") == "s3://b/runs/x/results.json"
    assert storage.parent("gs://b/runs/x") == "gs://b/runs" and storage.name("az://c/runs/x/") == "x"
    assert storage.shown("s3://AKIA:secret@b/k?X-Amz-Signature=abc") == "s3://b/k"
    assert resolve_latest("results/{run_id}/results.json") == "results/latest/results.json"

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
from collections.abc import Iterator
from pathlib import Path

import pytest

from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._buckets import JUDGMENTS, bucket_places, judgebench, night_to_bucket, run_args, two_runs_to_bucket
from tests._s3 import ACCESS_KEY_ID, SECRET_KEY, S3Server
from tests.conftest import CANARY_KEY
from tests.test_bad_input import assert_one_error

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


def assert_no_secret(*texts: str | bytes) -> None:
    for text in texts:
        data = text.encode() if isinstance(text, str) else text
        assert SECRET_KEY.encode() not in data and CANARY_KEY.encode() not in data


@pytest.fixture()
def places(tmp_path: Path) -> dict[str, Path]:
    return bucket_places(tmp_path)


def test_a_run_writes_its_folder_and_latest_to_s3_and_nothing_locally(
    s3, endpoint, places, prefect_server, monkeypatch
) -> None:
    first, second, run_ids, _ = two_runs_to_bucket(s3, BUCKET, endpoint, places, monkeypatch)
    objects = s3.objects(BUCKET)
    for run_id in run_ids:
        results = json.loads(objects[f"runs/{run_id}/results.json"])
        assert results["run"]["run_id"] == run_id and results["overall_accuracy"]["total_samples"] == 4

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
    judged = f"s3://{BUCKET}/runs/{run_id}/{JUDGMENTS}"
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


def test_a_night_and_its_leaderboard_go_to_s3(s3, endpoint, places, prefect_server, monkeypatch) -> None:
    """A night whose `output_root` is a bucket: every cell's folder, its `latest` and the night's
    leaderboard there; the summary reads each cell's results back from the bucket."""
    assert_no_secret(*night_to_bucket(s3, BUCKET, endpoint, places, monkeypatch).values())


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

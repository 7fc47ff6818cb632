"""Results in `gs://` and `az://` as in `s3://` (tests/test_object_storage.py), on real storage APIs on
loopback: Google Cloud Storage's emulator and Azure's Azurite (tests/_clouds.py), started here; each
test skips with one line when its emulator is not installed.

A run's folder and its `latest` pointer in the bucket, a report written there, nothing in the working
directory; a night whose `output_root` is the bucket, its summary reading each cell's results back and
its leaderboard there; a missing bucket or container and refused credentials: one line naming the URL,
exit 2, before any call, no secret shown.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._buckets import bucket_places, judgebench, night_to_bucket, run_args, two_runs_to_bucket
from tests._clouds import (
    AZURITE_KEY,
    GCS_PRIVATE_KEY_CANARY,
    WRONG_AZURE_KEY,
    AzuriteServer,
    GcsServer,
    RefusingTokenEndpoint,
)
from tests.conftest import CANARY_KEY
from tests.test_bad_input import assert_one_error

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
    return bucket_places(tmp_path)


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
    first, second, _, newest = two_runs_to_bucket(cloud, BUCKET, endpoint, places, monkeypatch)
    report = judgebench(
        places["work"], cloud, "report", newest, "--db-url", f"sqlite:///{places['db']}",
        "--output", f"{cloud.scheme}://{BUCKET}/reports/{newest}.html",
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    objects = cloud.objects(BUCKET)
    assert b"<html" in objects[f"reports/{newest}.html"].lower()
    assert list(places["work"].iterdir()) == []
    runs = [v for k, v in objects.items() if k.startswith("runs/")]
    assert_no_secret(*runs, first.stdout, first.stderr, second.stderr, places["db"].read_bytes())


@pytest.mark.slow
def test_a_night_and_its_leaderboard_go_to_the_bucket(cloud, endpoint, places, prefect_server, monkeypatch):
    """Every cell's folder, its `latest` and the night's leaderboard in the bucket; the night's summary
    reads each cell's results back from it."""
    assert_no_secret(*night_to_bucket(cloud, BUCKET, endpoint, places, monkeypatch).values())


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

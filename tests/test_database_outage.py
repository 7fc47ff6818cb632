"""The results database away mid-run, for real (issue 42): the machine's PostgreSQL restarted for 3 s is
waited for (complete numbers, no call paid twice, counted by the endpoint itself); stopped for longer than
`--db-lost-timeout`, the run ends with one line and exit 5, and the same command afterwards pays at most
the calls that were in flight.

These tests stop the PostgreSQL server every other test on the machine uses, so they run only when asked:
`JUDGEBENCH_PG_OUTAGE_TESTS=1` (the full run in `.ci/run` sets it) and marked `pg_outage` (and slow). Each
outage is a few seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._runs import GPT4O_PATH, run_argv
from tests.conftest import CANARY_KEY, requires_shared
from tests.test_db import postgresql_url  # noqa: F401 - a fixture

ENABLE = "JUDGEBENCH_PG_OUTAGE_TESTS"
pytestmark = [
    pytest.mark.pg_outage,
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get(ENABLE) != "1", reason=f"stops the shared PostgreSQL: set {ENABLE}=1"),
    pytest.mark.skipif(
        os.geteuid() != 0 or not Path("/etc/postgresql").is_dir(), reason="needs root and pg_ctlcluster"
    ),
]

VERDICT = "My final verdict is [[A>B]]"
PAIRS = 120  # 240 calls
CONCURRENCY = 8
LATENCY = 0.15  # about 5 s of judging at 8 calls at a time
STOPPED_AT = 60  # calls answered before the database goes away


def cluster(action: str) -> None:
    version = sorted(os.listdir("/etc/postgresql"))[0]
    command = ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", action]
    subprocess.run(
        [*command, *(["-m", "fast"] if action == "stop" else [])], check=True, timeout=120, capture_output=True
    )


def pairs_file(tmp_path: Path) -> Path:
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(GPT4O_PATH.read_text().splitlines(keepends=True)[:PAIRS]))
    return path


def start_run(command: list[str], tmp_path: Path, **env: str) -> subprocess.Popen[str]:
    full = {**os.environ, "OPENAI_API_KEY": CANARY_KEY, "JUDGEBENCH_CACHE_DIR": str(tmp_path / "cache"), **env}
    return subprocess.Popen(command, env=full, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def outage_when_answered(endpoint: FakeOpenAIServer, calls: int, seconds: float) -> threading.Thread:
    """Stop the database once the endpoint has answered `calls`, start it `seconds` later."""

    def outage() -> None:
        deadline = time.monotonic() + 300
        while endpoint.answered < calls and time.monotonic() < deadline:
            time.sleep(0.05)
        cluster("stop")
        try:
            time.sleep(seconds)
        finally:
            cluster("start")

    thread = threading.Thread(target=outage, daemon=True)
    thread.start()
    return thread


def cached_rows(url: str) -> int:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.connect() as connection:
        return connection.execute(sa.text("select count(*) from call_cache")).scalar_one()


@requires_shared
def test_a_database_restarted_for_3_s_is_waited_for_and_no_call_is_paid_twice(
    tmp_path,
    prefect_server,
    postgresql_url,  # noqa: F811 - the fixture
):
    out = tmp_path / "r"
    with FakeOpenAIServer(VERDICT, latency=LATENCY) as endpoint:
        command = run_argv(
            endpoint.base_url, out, None, "--concurrency", str(CONCURRENCY), "--shard-size", "10",
            data_path=pairs_file(tmp_path), db_url=postgresql_url,
        )  # fmt: skip
        run = start_run(command, tmp_path)
        outage = outage_when_answered(endpoint, STOPPED_AT, 3.0)
        stdout, stderr = run.communicate(timeout=600)
        outage.join(timeout=120)
        assert run.returncode == 0, stderr[-3000:]
        assert "Traceback" not in stderr, stderr[-3000:]
        results = json.loads(Path(f"{out}.json").read_text())
        assert results["usage"]["judgments"] == 2 * PAIRS
        assert results["invalid"]["failed_judgments"] == 0
        paid_twice = {key: n for key, n in endpoint.answered_keys().items() if n > 1}
        assert not paid_twice, f"{len(paid_twice)} calls paid twice"
        assert endpoint.answered == 2 * PAIRS
        print(f"measured: restart of 3 s, {endpoint.requests} requests for {2 * PAIRS} calls, none paid twice")
        assert "waiting: the results database" in stderr and "is back after" in stderr, stderr[-3000:]
    assert cached_rows(postgresql_url) == 2 * PAIRS
    assert not list((tmp_path / "cache" / "call-journal").rglob("*.jsonl"))  # all in the database


@requires_shared
def test_a_database_away_longer_than_the_wait_ends_the_run_with_exit_5_and_the_rerun_pays_only_calls_in_flight(
    tmp_path,
    prefect_server,
    postgresql_url,  # noqa: F811 - the fixture
):
    out = tmp_path / "r"
    wait = 6.0
    with FakeOpenAIServer(VERDICT, latency=LATENCY) as endpoint:
        port = endpoint.port
        command = run_argv(
            endpoint.base_url, out, None, "--concurrency", str(CONCURRENCY), "--shard-size", "10",
            "--db-lost-timeout", str(wait), data_path=pairs_file(tmp_path), db_url=postgresql_url,
        )  # fmt: skip
        run = start_run(command, tmp_path)
        outage = outage_when_answered(endpoint, STOPPED_AT, wait + 8)
        started = time.monotonic()
        stdout, stderr = run.communicate(timeout=600)
        ended = time.monotonic() - started
        outage.join(timeout=120)
        first = endpoint.answered_keys()
    assert run.returncode == 5, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "results database" in errors[0] and "--db-lost-timeout" in errors[0], stderr[-3000:]
    assert stderr.count("waiting: the results database") == 1, stderr[-3000:]
    assert list((tmp_path / "cache" / "call-journal").rglob("*.jsonl")), "the answers received were not journaled"

    with FakeOpenAIServer(VERDICT, port=port) as again:
        rerun = start_run(command, tmp_path)
        _, stderr2 = rerun.communicate(timeout=600)
        assert rerun.returncode == 0, stderr2[-3000:]
        paid_again = set(again.answered_keys()) & set(first)
        print(f"measured: exit 5 after {ended:.1f} s of run, {len(first)} answered, {len(paid_again)} paid again")
        assert len(paid_again) <= CONCURRENCY, f"{len(paid_again)} calls paid again (ended after {ended:.1f} s)"
        assert again.answered + len(first) - len(paid_again) == 2 * PAIRS
    assert not list((tmp_path / "cache" / "call-journal").rglob("*.jsonl"))

"""Schedules on a real `prefect server start`: the server's own scheduler creates the nightly runs, and an
every-minute schedule fires, a process worker picks the run up and it completes.

Our other deployment tests trigger runs by hand, which hid that Prefect 3.8's scheduler failed on every
loop under SQLAlchemy 2.1 (no scheduled run, ever). These tests start the server exactly as the README
says (its own PREFECT_HOME, SQLite), with the installed dependency set, and read its log for errors.
Everything talks to the server through the CLI or its REST API, so the in-process Prefect settings of
other tests are not touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests.conftest import CANARY_KEY, GPT4O_FILE, VERDICTS, oracle_responder

ROOT = Path(__file__).resolve().parents[1]
POOL = "judgebench-pool"

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# Prefect 3.9.1's server stores a worker's heartbeat in one deferred SQLite transaction that reads the work
# pool, then upserts the worker row. When another connection writes in between, SQLite refuses the upsert at
# once ("database is locked" without its busy wait); the server logs the refusal as an ERROR with its
# traceback and closes the worker's channel, and the worker opens a new one and sends its next heartbeat.
# Reproduced by a worker heartbeating every second beside a client creating flow runs, 18 such records in a
# minute; the CI's whole suite met one under load.
HEARTBEAT_REFUSED = ("Worker channel heartbeat persistence failed", "(sqlite3.OperationalError) database is locked")
_RECORD_START = re.compile(r"^\d\d:\d\d:\d\d\.\d+ \| ")
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit)\b")


def _records(log: str) -> list[list[str]]:
    """The server log's records: a timestamped line and the lines after it (a traceback) up to the next."""
    records: list[list[str]] = []
    for line in log.splitlines():
        if _RECORD_START.match(line) or not records:
            records.append([line])
        else:
            records[-1].append(line)
    return records


def _is_error(record: list[str]) -> bool:
    return any("Traceback" in line or "| ERROR" in line or " ERROR " in line for line in record)


def _summary(record: list[str]) -> list[str]:
    return record[:1] + [line for line in record[1:] if _EXCEPTION_LINE.match(line)]


class LiveServer:
    """A `prefect server start` subprocess with its own home, port and log file."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.port = _free_port()
        self.api_url = f"http://127.0.0.1:{self.port}/api"
        self.log_path = home / "server.log"
        base = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        self.env = {
            **base,
            "PREFECT_HOME": str(home),
            "PREFECT_API_URL": self.api_url,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            # The scheduler looks at deployments every few seconds instead of every minute (Prefect's own
            # "recently updated deployments" pass already runs every 5 s).
            "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "5",
            "PREFECT_LOCAL_STORAGE_PATH": str(home / "storage"),
            "COLUMNS": "200",
        }
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 300) -> None:
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(self.port)],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"prefect server exited with {self.process.returncode}:\n{self.log()[-4000:]}")
            try:
                if httpx.get(f"{self.api_url}/health", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"prefect server did not answer within {timeout} s:\n{self.log()[-4000:]}")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def errors_in_log(self, *, refused_heartbeats_ok: bool = False) -> list[str]:
        """Each error record of the log as its first line and its exception lines. With
        `refused_heartbeats_ok`, SQLite's refusals of a worker's heartbeat (see HEARTBEAT_REFUSED) are left out:
        the caller then shows that the worker's heartbeats land again."""
        errors = [record for record in _records(self.log()) if _is_error(record)]
        if refused_heartbeats_ok:
            errors = [record for record in errors if not all(mark in "\n".join(record) for mark in HEARTBEAT_REFUSED)]
        return ["\n".join(_summary(record)) for record in errors]

    def worker_heartbeat_after(self, moment: datetime) -> bool:
        workers = self.post(f"/work_pools/{POOL}/workers/filter", {})
        return any(
            w["status"] == "ONLINE" and datetime.fromisoformat(w["last_heartbeat_time"].replace("Z", "+00:00")) > moment
            for w in workers
        )

    def cli(
        self, *args: str, cwd: Path = ROOT, timeout: float = 300, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "prefect", *args],
            cwd=cwd,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, f"prefect {' '.join(args)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """The API's answer, a 503 asked again as Prefect's own client does: a SQLite-backed server answers
        503 when a write meets another writer (its transaction rolled back, so asking again pays nothing
        twice); CI met one creating a deployment's run."""
        for delay in (0.5, 1, 2, 4, 8, None):
            response = httpx.request(method, f"{self.api_url}{path}", json=body, timeout=30)
            if response.status_code != 503 or delay is None:
                break
            time.sleep(delay)
        response.raise_for_status()
        return response.json()

    def post(self, path: str, body: dict[str, Any]) -> Any:
        return self.request("POST", path, body)

    def deployment(self, name: str) -> dict[str, Any]:
        return self.request("GET", f"/deployments/name/{name}")

    def flow_runs(self, deployment_id: str) -> list[dict[str, Any]]:
        return self.post(
            "/flow_runs/filter",
            {"deployments": {"id": {"any_": [deployment_id]}}, "sort": "EXPECTED_START_TIME_ASC", "limit": 50},
        )


def wait_for(what: str, check: Callable[[], Any], timeout: float, server: LiveServer) -> Any:
    """Poll `check` until it returns something truthy; on timeout fail with the server's errors."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{what}: nothing after {timeout} s; server errors:\n"
                + "\n".join(server.errors_in_log()[-20:])
                + "\n"
                + server.log()[-3000:]
            )
        time.sleep(2)


@contextlib.contextmanager
def started_server(tmp_path: Path) -> Iterator[LiveServer]:
    """A live server with the `process` work pool, stopped on leaving."""
    server = LiveServer(tmp_path / "prefect-home")
    server.home.mkdir()
    server.start()
    try:
        server.cli("work-pool", "create", POOL, "--type", "process", cwd=tmp_path)
        yield server
    finally:
        server.stop()


@pytest.fixture()
def live_server(tmp_path) -> Iterator[LiveServer]:
    with started_server(tmp_path) as server:
        yield server


def test_scheduler_creates_the_nightly_runs(live_server):
    """`prefect deploy --all` with the project's prefect.yaml; the server's scheduler then creates the
    upcoming 02:00 UTC runs of the nightly deployment by itself, with no error in its log."""
    live_server.cli("--no-prompt", "deploy", "--all")
    nightly = live_server.deployment("nightly-benchmarks/nightly")
    assert [s["schedule"]["cron"] for s in nightly["schedules"]] == ["0 2 * * *"]

    def scheduled() -> list[dict[str, Any]]:
        runs = [r for r in live_server.flow_runs(nightly["id"]) if r["state_type"] == "SCHEDULED"]
        return runs if len(runs) >= 3 else []

    runs = wait_for("scheduled nightly runs", scheduled, timeout=300, server=live_server)
    starts = [
        datetime.fromisoformat(r["expected_start_time"].replace("Z", "+00:00")).astimezone(timezone.utc) for r in runs
    ]
    assert all((s.hour, s.minute) == (2, 0) for s in starts), starts
    assert starts == sorted(starts) and len(set(starts)) == len(starts) and starts[0] > datetime.now(timezone.utc)
    assert all(
        r["work_queue_name"] == "nightly" and r["parameters"] == {"matrix_path": "deployments/nightly.yaml"}
        for r in runs
    )

    # the README's two checks that the schedule is live
    inspected = live_server.cli("deployment", "inspect", "nightly-benchmarks/nightly")
    assert "0 2 * * *" in inspected.stdout
    listed = live_server.cli("flow-run", "ls", "--flow-name", "nightly-benchmarks", "--state-type", "SCHEDULED")
    assert all(r["name"] in listed.stdout for r in runs), listed.stdout
    time.sleep(6)  # one more scheduler loop, which failed every time under SQLAlchemy 2.1
    assert not live_server.errors_in_log(), "\n".join(live_server.errors_in_log()) + "\n" + live_server.log()[-4000:]


def test_every_minute_schedule_runs_a_small_matrix_on_a_worker(live_server, judgebench_repo, gpt4o_pairs, tmp_path):
    """An every-minute copy of the nightly deployment: the scheduler creates its run, a `prefect worker`
    subprocess picks it up and the matrix (one model with its own endpoint and key variable, 3 pairs)
    completes end to end. OPENAI_API_KEY in the worker is wrong on purpose: the cell must use the key
    its matrix entry names."""
    url, sha = judgebench_repo
    out, db_url = tmp_path / "nightly", f"sqlite:///{tmp_path}/history.db"
    with FakeOpenAIServer(
        oracle_responder(gpt4o_pairs, VERDICTS["vanilla"]), api_key=CANARY_KEY, models={"judge-a"}
    ) as endpoint:
        matrix = {
            "judge_types": ["vanilla"],
            "models": [{"model": "judge-a", "base_url": endpoint.base_url, "api_key_env": "JUDGE_A_KEY"}],
            "data_files": [GPT4O_FILE],
            "repo_url": url,
            "ref": sha,
            "db_url": db_url,
            "output_root": str(out),
            "max_samples": 3,
            "concurrency": 4,
            "options": {"cache_dir": str(tmp_path / "cache"), "bootstrap_resamples": 100},
        }
        matrix_path = tmp_path / "matrix.yaml"
        matrix_path.write_text(yaml.safe_dump(matrix))
        deploy_script = (
            "import sys; from pathlib import Path; from prefect import deploy; from judgebench_flows.deployments.deploy import nightly_deployment\n"
            "d = nightly_deployment(Path(sys.argv[1]), matrix_path=sys.argv[2], cron='* * * * *', name='every-minute')\n"
            f"deploy(d, work_pool_name={POOL!r}, build=False, push=False, print_next_steps_message=False, ignore_warnings=True)\n"
        )
        deployed = subprocess.run(
            [sys.executable, "-c", deploy_script, str(ROOT), str(matrix_path)],
            cwd=ROOT,
            env=live_server.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert deployed.returncode == 0, deployed.stdout[-3000:] + deployed.stderr[-3000:]
        deployment = live_server.deployment("nightly-benchmarks/every-minute")
        assert [s["schedule"]["cron"] for s in deployment["schedules"]] == ["* * * * *"]

        worker_log = (tmp_path / "worker.log").open("wb")
        worker_env = {
            **live_server.env,
            "JUDGE_A_KEY": CANARY_KEY,
            "OPENAI_API_KEY": "sk-not-the-right-key-000",
            "JUDGEBENCH_CACHE_DIR": str(tmp_path / "cache"),
            "PREFECT_WORKER_QUERY_SECONDS": "2",
            "PREFECT_WORKER_HEARTBEAT_SECONDS": "5",
        }
        worker = subprocess.Popen(
            [sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL, "--work-queue", "nightly"],
            cwd=tmp_path,
            env=worker_env,
            stdout=worker_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            scheduled = wait_for(
                "runs created by the every-minute schedule",
                lambda: live_server.flow_runs(deployment["id"]),
                300,
                live_server,
            )
            assert all(r["auto_scheduled"] for r in scheduled)

            def first_finished() -> dict[str, Any] | None:
                runs = live_server.flow_runs(deployment["id"])
                assert worker.poll() is None, f"the worker exited:\n{(tmp_path / 'worker.log').read_text()[-4000:]}"
                return next(
                    (r for r in runs if r["state_type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")), None
                )

            # under load: a minute for the schedule, then the worker's subprocess imports and runs the flow
            finished = wait_for("a scheduled run finished by the worker", first_finished, 900, live_server)
            after_the_run = datetime.now(timezone.utc)
            wait_for(
                "a worker heartbeat stored after the run",
                lambda: live_server.worker_heartbeat_after(after_the_run),
                120,
                live_server,
            )
        finally:
            os.killpg(worker.pid, signal.SIGTERM)
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait(10)
        log = (tmp_path / "worker.log").read_text(errors="replace")
        assert finished["state_type"] == "COMPLETED", (
            f"{finished['state_name']}: {finished.get('state', {}).get('message')}\n{log[-5000:]}"
        )
        assert finished["auto_scheduled"] and finished["work_queue_name"] == "nightly"
        assert endpoint.snapshot()["distinct_answered"] == 6  # 3 pairs x 2 orders, with the key JUDGE_A_KEY names

    cell = out / "vanilla__judge-a__dataset=judgebench,response_model=gpt-4o-2024-05-13"
    results = json.loads((cell / "latest" / "results.json").read_text())
    assert results["overall_accuracy"]["accuracy"] == 1.0 and results["overall_accuracy"]["total_samples"] == 3
    assert results["run"]["flow_run_id"] != finished["id"]  # the cell ran as a subflow of the scheduled run
    assert CANARY_KEY not in log and CANARY_KEY not in (cell / "latest" / "results.json").read_text()
    errors = live_server.errors_in_log(refused_heartbeats_ok=True)  # the worker's heartbeats landed again above
    assert not errors, "\n".join(errors)


def test_only_a_refused_heartbeat_is_left_out_of_the_errors(tmp_path):
    """The log reader keeps every error record but SQLite's refusal of a heartbeat, and names each by its
    exception, so a CI failure says what failed."""
    server = LiveServer(tmp_path)
    refused = [
        "10:10:51.641 | ERROR   | prefect.server.utilities.worker_channel - "
        "Worker channel heartbeat persistence failed: work_pool=p worker_name=w",
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in f',
        "sqlite3.OperationalError: database is locked",
        "",
        "The above exception was the direct cause of the following exception:",
        "Traceback (most recent call last):",
        "sqlalchemy.exc.OperationalError: (sqlite3.OperationalError) database is locked",
    ]
    other = [
        "10:11:02.000 | ERROR   | prefect.server.services.scheduler - Unexpected error in: scheduler",
        "Traceback (most recent call last):",
        "sqlalchemy.exc.InvalidRequestError: no such thing",
    ]
    info = ["10:11:03.000 | INFO    | prefect.server - fine"]
    server.log_path.write_text("\n".join(refused + other + info) + "\n")
    assert server.errors_in_log(refused_heartbeats_ok=True) == [other[0] + "\n" + other[2]]
    assert len(server.errors_in_log()) == 2
    locked_elsewhere = [other[0], "sqlalchemy.exc.OperationalError: (sqlite3.OperationalError) database is locked"]
    server.log_path.write_text("\n".join(locked_elsewhere) + "\n")
    assert len(server.errors_in_log(refused_heartbeats_ok=True)) == 1

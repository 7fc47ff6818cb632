"""Prefect-native operations on a real `prefect server start` with real process workers: a regression
reaches a webhook through the automation `judgebench automations install` creates, and a worker killed
mid-run is recovered by the crash automations without a person, paying nothing twice.

Everything talks to the live server through subprocesses (CLI, workers, deploy script) and its REST API,
so the in-process Prefect settings of other tests are not touched (see tests/test_schedule.py).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest
import yaml

from judgebench_flows.judging.matrix import cell_name
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests.conftest import CANARY_KEY, GPT4O_FILE, VERDICTS, oracle_responder
from tests.test_schedule import POOL, ROOT, LiveServer, started_server, wait_for

pytestmark = pytest.mark.slow


class WebhookReceiver:
    """A tiny HTTP server that keeps every POSTed JSON body."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        received = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                length = int(self.headers.get("Content-Length") or 0)
                received.append(json.loads(self.rfile.read(length) or b"{}"))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def live_prefect(tmp_path) -> Iterator[LiveServer]:
    with started_server(tmp_path) as server:
        yield server


@pytest.fixture()
def receiver() -> Iterator[WebhookReceiver]:
    hook = WebhookReceiver()
    yield hook
    hook.close()


def _judgebench(server: LiveServer, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "judgebench_flows.cli.main", *args],
        cwd=cwd,
        env=server.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"judgebench {' '.join(args)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def _deploy(server: LiveServer) -> None:
    deployed = subprocess.run(
        [sys.executable, "deployments/deploy.py"], cwd=ROOT, env=server.env, capture_output=True, text=True, timeout=300
    )
    assert deployed.returncode == 0, deployed.stdout[-3000:] + deployed.stderr[-3000:]


def _start_worker(server: LiveServer, tmp_path: Path, name: str) -> subprocess.Popen[bytes]:
    env = {
        **server.env,
        "OPENAI_API_KEY": CANARY_KEY,
        "JUDGEBENCH_CACHE_DIR": str(tmp_path / "cache"),
        "PREFECT_WORKER_QUERY_SECONDS": "2",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL, "--name", name],
        cwd=tmp_path,
        env=env,
        stdout=(tmp_path / f"{name}.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: the flow runs it starts die with it
    )


def _stop(worker: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if worker.poll() is None:
        os.killpg(worker.pid, sig)
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(10)


def _run(server: LiveServer, deployment: str, parameters: dict[str, Any]) -> str:
    found = server.deployment(deployment)
    return server.post(f"/deployments/{found['id']}/create_flow_run", {"parameters": parameters})["id"]


def _flow_run(server: LiveServer, flow_run_id: str) -> dict[str, Any]:
    response = httpx.get(f"{server.api_url}/flow_runs/{flow_run_id}", timeout=30)
    response.raise_for_status()
    return response.json()


def _final(server: LiveServer, flow_run_id: str, timeout: float, logs: list[Path]) -> dict[str, Any]:
    def final() -> dict[str, Any] | None:
        run = _flow_run(server, flow_run_id)
        return run if run["state_type"] in ("COMPLETED", "FAILED", "CANCELLED") else None

    try:
        return wait_for(f"flow run {flow_run_id} final", final, timeout, server)
    except AssertionError as exc:
        tails = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in logs if p.exists())
        raise AssertionError(f"{exc}\n{tails}") from None


def _events(server: LiveServer, prefix: str) -> list[dict[str, Any]]:
    found = server.post("/events/filter", {"filter": {"event": {"prefix": [prefix]}}, "limit": 50})
    return found["events"]


def test_a_regression_reaches_the_webhook_and_fails_the_night_at_once(
    live_prefect, receiver, judgebench_repo, gpt4o_pairs, tmp_path
):
    """Two nights of one configuration through the nightly deployment, pointed at a local JudgeBench copy
    by its repo_url/ref parameters: all right, then all wrong. The second night regresses: its alert is
    POSTed to the receiver by the installed automation, naming the model, the event feed holds
    judgebench.run.regressed, and the night is Failed after one attempt."""
    url, sha = judgebench_repo
    _deploy(live_prefect)
    installed = _judgebench(live_prefect, "automations", "install", "--webhook-url", receiver.url, cwd=tmp_path)
    again = _judgebench(live_prefect, "automations", "install", "--webhook-url", receiver.url, cwd=tmp_path)
    assert installed.stdout.count("created:") == 3 and again.stdout.count("updated:") == 3, again.stdout
    matrix = {
        "judge_types": ["vanilla"],
        "models": ["judge-a"],
        "data_files": ["not-this-one.jsonl"],  # overridden by the run's data_files
        "db_url": f"sqlite:///{tmp_path}/history.db",
        "output_root": str(tmp_path / "nightly"),
        "max_samples": 6,
        # A 6-pair night's per-night test at the 1% it had before the sequential test took half the night's
        # budget (issue 60): the night's rate at 4%, half of it per night.
        "options": {"bootstrap_resamples": 200, "cache": "off", "alert_false_alarm_rate": 0.04},
    }
    (tmp_path / "matrix.yaml").write_text(yaml.safe_dump(matrix))
    with FakeOpenAIServer() as probe:  # one endpoint address both nights: the endpoint is part of a configuration
        port = probe.port
    worker = _start_worker(live_prefect, tmp_path, "nights")
    try:
        runs = []
        for wrong in (False, True):
            with FakeOpenAIServer(
                oracle_responder(gpt4o_pairs, VERDICTS["vanilla"], wrong=wrong), api_key=CANARY_KEY, port=port
            ) as endpoint:
                flow_run_id = _run(
                    live_prefect,
                    "nightly-benchmarks/nightly",
                    {
                        "matrix_path": str(tmp_path / "matrix.yaml"),
                        "repo_url": url,
                        "ref": sha,
                        "data_files": [GPT4O_FILE],
                        "base_url": endpoint.base_url,
                    },
                )
                runs.append(_final(live_prefect, flow_run_id, 300, [tmp_path / "nights.log"]))
                failed_at = time.monotonic()
    finally:
        _stop(worker)
    first, second = runs
    assert first["state_type"] == "COMPLETED", first["state"]
    assert second["state_type"] == "FAILED" and "(regressed: accuracy dropped" in second["state"]["message"], second[
        "state"
    ]
    assert second["run_count"] == 1  # a regression is a result: no second attempt

    alert = wait_for(
        "the alert POST", lambda: receiver.bodies, max(5, 60 - (time.monotonic() - failed_at)), live_prefect
    )
    assert "judge-a" in alert[0]["subject"] and "regressed" in alert[0]["subject"], alert
    assert "vanilla" in alert[0]["body"] and "accuracy: 0.00%" in alert[0]["body"], alert[0]["body"]
    assert "change against the baseline: -100.00 points" in alert[0]["body"], alert[0]["body"]

    # the server stores events in batches: the feed may show them a few seconds after the alert went out
    def stored() -> bool:
        nights, regressed = (
            _events(live_prefect, "judgebench.night."),
            _events(live_prefect, "judgebench.run.regressed"),
        )
        return len(nights) == 2 and len(regressed) == 1

    wait_for("events in the feed", stored, 60, live_prefect)
    [regressed] = _events(live_prefect, "judgebench.run.regressed")
    assert regressed["resource"]["judgebench.model"] == "judge-a" and regressed["payload"]["accuracy"] == 0.0
    assert [e["event"] for e in _events(live_prefect, "judgebench.night.")] in (
        ["judgebench.night.regressed", "judgebench.night.completed"],
        ["judgebench.night.completed", "judgebench.night.regressed"],
    )
    everything = json.dumps(_events(live_prefect, "judgebench.")) + json.dumps(receiver.bodies)
    assert CANARY_KEY not in everything

    removed = _judgebench(live_prefect, "automations", "remove", cwd=tmp_path)
    assert all(name in removed.stdout for name in ("judgebench-alert", "judgebench-reschedule-crashed"))
    assert live_prefect.post("/automations/filter", {}) == []


def test_a_worker_killed_mid_run_is_recovered_without_a_person(live_prefect, judgebench_repo, gpt4o_pairs, tmp_path):
    """SIGKILL the worker and the flow run it started (a machine lost: no final state, no word); start
    another worker. Heartbeats stop, the automation marks the run Crashed, the other reschedules it, the
    new worker runs it to Completed, and the calls answered before the kill are not paid again."""
    url, sha = judgebench_repo
    pairs, concurrency = 16, 2
    _deploy(live_prefect)
    _judgebench(live_prefect, "automations", "install", "--webhook-url", "http://127.0.0.1:9/unused", cwd=tmp_path)
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    with FakeOpenAIServer(
        oracle_responder(gpt4o_pairs, VERDICTS["vanilla"]), api_key=CANARY_KEY, latency=0.5
    ) as endpoint:
        flow_run_id = _run(
            live_prefect,
            "judgebench-adhoc/adhoc",
            {
                "model": "judge-x",
                "judge_type": "vanilla",
                "repo_url": url,
                "ref": sha,
                "max_samples": pairs,
                "concurrency": concurrency,
                "base_url": endpoint.base_url,
                "db_url": f"sqlite:///{tmp_path}/history.db",
                "output_dir": str(tmp_path / "adhoc"),
            },
        )
        first = _start_worker(live_prefect, tmp_path, "first")
        try:
            wait_for("calls answered before the kill", lambda: endpoint.answered >= 8, 300, live_prefect)
        finally:
            _stop(first, signal.SIGKILL)
        killed_at, answered_before_kill = time.monotonic(), endpoint.answered
        assert answered_before_kill < 2 * pairs, "killed too late to test anything"
        second = _start_worker(live_prefect, tmp_path, "second")
        try:
            finished = _final(live_prefect, flow_run_id, 300, logs)
        finally:
            _stop(second)
        paid = endpoint.answered_keys()

    assert finished["state_type"] == "COMPLETED", finished["state"]
    assert time.monotonic() - killed_at < 300
    assert finished["run_count"] >= 2  # the same flow run, run again by Prefect, not by a person
    states = httpx.get(f"{live_prefect.api_url}/flow_run_states/", params={"flow_run_id": flow_run_id}, timeout=30)
    assert "CRASHED" in [s["type"] for s in states.json()], states.json()
    results = json.loads((tmp_path / "adhoc" / "results.json").read_text())
    assert results["overall_accuracy"]["accuracy"] == 1.0 and results["overall_accuracy"]["total_samples"] == pairs
    assert len(paid) == 2 * pairs and max(paid.values()) <= 2
    twice = [key for key, count in paid.items() if count > 1]
    assert len(twice) <= concurrency, f"{len(twice)} calls paid twice; at most the {concurrency} in flight at the kill"


def test_an_unreachable_repository_fails_the_night_without_a_retry(prefect_server, tmp_path, monkeypatch):
    """A repository that does not exist (the nightly's repo_url parameter): the night's preflight finds it
    before the first cell, so the night is Failed at its first attempt with the one line naming the option,
    and no cell runs (nothing cloned, nothing called)."""
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    from judgebench_flows.flows.nightly import nightly_benchmarks

    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    matrix = {
        "judge_types": ["vanilla"],
        "models": ["judge-a"],
        "data_files": [GPT4O_FILE],
        "base_url": "http://127.0.0.1:9/v1",
        "db_url": f"sqlite:///{tmp_path}/history.db",
        "output_root": str(tmp_path / "nightly"),
        "options": {"cache_dir": str(tmp_path / "cache")},
    }
    (tmp_path / "matrix.yaml").write_text(yaml.safe_dump(matrix))
    started = time.monotonic()
    state = asyncio.run(
        nightly_benchmarks(str(tmp_path / "matrix.yaml"), repo_url=f"file://{tmp_path}/nowhere", return_state=True)
    )
    assert state.is_failed() and state.message.startswith("error: --repo-url: no repository at"), state
    assert time.monotonic() - started < 60  # no 60 s retry delay, no 5 s clone retries
    with get_client(sync_client=True) as client:
        night = client.read_flow_run(state.state_details.flow_run_id)
        assert night.run_count == 1
        cells = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[night.id]))
        )
        assert cells == []


def test_the_readme_vanilla_example_ends_completed(prefect_server, judgebench_repo, tmp_path):
    """The README's ad-hoc example against the bundled test server started as the README says: the vanilla
    judge reads a verdict from every answer, so the run is Completed (0%: a fixed verdict), not Failed."""
    from judgebench_flows.deployments.deploy import deploy_all

    url, sha = judgebench_repo
    deploy_all(ROOT, POOL)
    endpoint = subprocess.Popen(
        [sys.executable, "-m", "judgebench_flows.testing.fake_openai", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        base_url = (endpoint.stdout.readline() if endpoint.stdout else "").strip()
        env = {**os.environ, "OPENAI_API_KEY": CANARY_KEY, "OPENAI_BASE_URL": base_url}
        params = {"model": "gpt-4o-mini", "judge_type": "vanilla", "max_samples": "5", "repo_url": url, "ref": sha}
        params |= {"db_url": f"sqlite:///{tmp_path}/history.db", "output_dir": str(tmp_path / "adhoc")}
        started = subprocess.run(
            [sys.executable, "-m", "prefect", "deployment", "run", "judgebench-adhoc/adhoc"]
            + [arg for key, value in params.items() for arg in ("--param", f"{key}={value}")],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert started.returncode == 0, started.stdout[-2000:] + started.stderr[-2000:]
        worker = subprocess.run(
            [sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL, "--work-queue", "adhoc", "--run-once"],
            cwd=tmp_path,
            env={**env, "JUDGEBENCH_CACHE_DIR": str(tmp_path / "cache")},
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        endpoint.terminate()
        endpoint.wait(10)
    from prefect.client.orchestration import get_client

    [flow_run_id] = re.findall(r"UUID: ([0-9a-f-]{36})", started.stdout)
    with get_client(sync_client=True) as client:
        state = client.read_flow_run(UUID(flow_run_id)).state
    assert state and state.is_completed(), f"{state!r}\n{worker.stdout[-3000:]}\n{worker.stderr[-3000:]}"
    results = json.loads((tmp_path / "adhoc" / "results.json").read_text())
    assert results["overall_accuracy"]["accuracy"] == 0.0 and results["invalid"]["invalid_judgments"] == 0


def test_a_worker_killed_mid_night_reuses_every_finished_cell_and_answered_call(
    live_prefect, judgebench_repo, gpt4o_pairs, tmp_path
):
    """A night of three cells side by side on the nightly deployment: two fast endpoints' cells finish,
    the slow one's is judging when the worker is SIGKILLed. The rescheduled night completes on another
    worker, reusing both finished cells (their endpoints answer nothing more) and the slow cell's
    answered calls (paid twice: at most the calls in flight at the kill). The next night of the same
    matrix reuses none of it: every endpoint answers every call again (issue 41)."""
    url, sha = judgebench_repo
    pairs, concurrency = 12, 2
    _deploy(live_prefect)
    _judgebench(live_prefect, "automations", "install", "--webhook-url", "http://127.0.0.1:9/unused", cwd=tmp_path)
    oracle = oracle_responder(gpt4o_pairs, VERDICTS["vanilla"])
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    with (
        FakeOpenAIServer(oracle, api_key=CANARY_KEY) as fast_a,
        FakeOpenAIServer(oracle, api_key=CANARY_KEY) as fast_b,
        FakeOpenAIServer(oracle, api_key=CANARY_KEY, latency=1.5) as slow,
    ):
        matrix = {
            "judge_types": ["vanilla"],
            "models": [
                {"model": "fast-a", "base_url": fast_a.base_url},
                {"model": "fast-b", "base_url": fast_b.base_url},
                {"model": "slow", "base_url": slow.base_url},
            ],
            "data_files": [GPT4O_FILE],
            "repo_url": url,
            "ref": sha,
            "db_url": f"sqlite:///{tmp_path}/history.db",
            "output_root": str(tmp_path / "nightly"),
            "max_samples": pairs,
            "concurrency": concurrency,
            "options": {"bootstrap_resamples": 200, "cache_dir": str(tmp_path / "cache")},
        }
        (tmp_path / "matrix.yaml").write_text(yaml.safe_dump(matrix))
        flow_run_id = _run(live_prefect, "nightly-benchmarks/nightly", {"matrix_path": str(tmp_path / "matrix.yaml")})
        first = _start_worker(live_prefect, tmp_path, "first")
        done = [
            tmp_path / "nightly" / cell_name("vanilla", m, GPT4O_FILE) / "latest" / "results.json"
            for m in ("fast-a", "fast-b")
        ]
        try:
            wait_for(
                "both fast cells done and the slow one judging",
                lambda: all(p.exists() for p in done) and slow.answered >= 4,
                300,
                live_prefect,
            )
        finally:
            _stop(first, signal.SIGKILL)
        fast_answered = (fast_a.answered, fast_b.answered)
        assert fast_answered == (2 * pairs, 2 * pairs) and slow.answered < 2 * pairs, "killed too late"
        second = _start_worker(live_prefect, tmp_path, "second")
        try:
            finished = _final(live_prefect, flow_run_id, 400, logs)
            assert (fast_a.answered, fast_b.answered) == fast_answered  # the finished cells were reused
            paid = slow.answered_keys()
            first_night = _night_results(tmp_path)
            # The next night measures again: nothing of the first night is reused, every call is paid.
            for endpoint in (fast_a, fast_b, slow):
                endpoint.reset_counters()
            next_night = _run_when_answered(live_prefect, "nightly-benchmarks/nightly", str(tmp_path / "matrix.yaml"))
            next_finished = _final(live_prefect, next_night, 400, logs)
        finally:
            _stop(second)
        paid_next_night = [endpoint.answered_keys() for endpoint in (fast_a, fast_b, slow)]

    assert finished["state_type"] == "COMPLETED", finished["state"]
    assert finished["run_count"] >= 2
    assert len(paid) == 2 * pairs and max(paid.values()) <= 2
    assert sum(count > 1 for count in paid.values()) <= concurrency
    for results in first_night.values():
        assert results["overall_accuracy"]["accuracy"] == 1.0 and results["overall_accuracy"]["total_samples"] == pairs
    slow_cache = first_night["slow"]["run"]["cache"]
    assert slow_cache["reuse"] == "this flow run" and slow_cache["flow_run_id"] == flow_run_id
    # the rescheduled cell read what the killed attempt had paid: from this flow run only
    assert slow_cache["answers"] == sum(source["answers"] for source in slow_cache["sources"]) > 0, slow_cache
    assert all(source["same_flow_run"] for source in slow_cache["sources"]), slow_cache

    assert next_finished["state_type"] == "COMPLETED", next_finished["state"]
    assert [len(keys) for keys in paid_next_night] == [2 * pairs] * 3, "the next night pays for every call"
    assert all(set(keys.values()) == {1} for keys in paid_next_night)
    for results in _night_results(tmp_path).values():
        assert results["run"]["cache"]["answers"] == 0 and results["run"]["cache"]["flow_run_id"] == next_night
        assert results["overall_accuracy"]["accuracy"] == 1.0


def _run_when_answered(server: LiveServer, deployment: str, matrix_path: str) -> str:
    """A flow run of `deployment`, asked again while the busy server answers 503 (a worker writing)."""
    for _ in range(10):
        try:
            return _run(server, deployment, {"matrix_path": matrix_path})
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code != 503:
                raise
            time.sleep(3)
    return _run(server, deployment, {"matrix_path": matrix_path})


def _night_results(tmp_path: Path) -> dict[str, dict[str, Any]]:
    """Each cell's latest results.json of the night in `tmp_path`, by model."""
    return {
        model: json.loads(
            (tmp_path / "nightly" / cell_name("vanilla", model, GPT4O_FILE) / "latest" / "results.json").read_text()
        )
        for model in ("fast-a", "fast-b", "slow")
    }

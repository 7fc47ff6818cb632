"""A night bigger than one worker: with `cells: pool` every cell is its own run of the ad-hoc deployment,
picked up by a real `prefect worker` (process pool) that runs several flow runs at once, and the endpoint's
`concurrency` holds across those runs through a Prefect global concurrency limit per endpoint.

The endpoint is the bundled OpenAI-compatible server answering the labelled verdict (accuracy exactly
100%) with a latency, so cells running side by side without a shared limit would exceed it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from judgebench_flows.core.errors import UserError
from judgebench_flows.core.run_names import run_name
from judgebench_flows.judging.matrix import cell_name, parse_matrix
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests.conftest import CANARY_KEY, GPT4O_FILE, VERDICTS, oracle_responder

ROOT = Path(__file__).resolve().parents[1]
POOL = "judgebench-pool"
MODELS = ["judge-a", "judge-b", "judge-c"]


def test_cells_key_is_checked():
    base = {"judge_types": ["vanilla"], "models": ["m"], "data_files": [GPT4O_FILE]}
    assert parse_matrix(base).cells == "process"
    assert parse_matrix({**base, "cells": "pool"}).cells == "pool"
    with pytest.raises(UserError, match=r"^matrix: cells: Input should be 'process' or 'pool'$"):
        parse_matrix({**base, "cells": "cluster"})


def test_endpoint_limit_names_are_per_endpoint_without_model_or_secret():
    from judgebench_flows.calls.global_limits import endpoint_limit_names
    from judgebench_flows.calls.limits import endpoint_label

    one = endpoint_label("openai", "http://user:sk-secret@127.0.0.1:9000/v1/")
    assert one == endpoint_label("openai", "http://127.0.0.1:9000/v1")
    names = endpoint_limit_names(one)
    assert names == endpoint_limit_names(endpoint_label("openai", "http://127.0.0.1:9000/v1"))
    assert names != endpoint_limit_names(endpoint_label("anthropic", "http://127.0.0.1:9000/v1"))
    assert "secret" not in "".join(names) and names[1] == f"{names[0]}-rpm"


def _pool_night(prefect_server, judgebench_repo, gpt4o_pairs, tmp_path, models: list[str], known: set[str], night=None):
    """A `cells: pool` night of `models` on one endpoint (concurrency 2) that knows `known`, run with one
    real worker that runs up to 3 flow runs at once: (night's state, endpoint's counters, worker's log).
    `night`: a flow of the matrix path run instead of the nightly flow."""
    from judgebench_flows.deployments.deploy import deploy_all
    from judgebench_flows.flows.nightly import nightly_benchmarks

    deploy_all(ROOT, POOL)
    url, sha = judgebench_repo
    worker_log = tmp_path / "worker.log"
    with FakeOpenAIServer(
        oracle_responder(gpt4o_pairs, VERDICTS["arena_hard"]), api_key=CANARY_KEY, models=known, latency=0.2
    ) as server:
        matrix = {
            "judge_types": ["arena_hard"],
            "models": models,
            "data_files": [GPT4O_FILE],
            "repo_url": url,
            "ref": sha,
            "base_url": server.base_url,
            "db_url": f"sqlite:///{tmp_path}/history.db",
            "output_root": str(tmp_path / "nightly"),
            "max_samples": 6,
            "concurrency": 2,
            "cells": "pool",
            "options": {"cache_dir": str(tmp_path / "cache"), "bootstrap_resamples": 200},
        }
        path = tmp_path / "matrix.yaml"
        path.write_text(yaml.safe_dump(matrix))
        worker = subprocess.Popen(  # one worker that runs up to 3 flow runs at once
            [sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL, "--work-queue", "adhoc"]
            + ["--limit", "3"],
            cwd=tmp_path,
            env={
                **os.environ,
                "PREFECT_API_URL": prefect_server,
                "OPENAI_API_KEY": CANARY_KEY,
                "PREFECT_WORKER_QUERY_SECONDS": "2",
            },
            stdout=worker_log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            night = night or (lambda path: nightly_benchmarks(path, retry_delay_seconds=0, return_state=True))
            state = asyncio.run(night(str(path)))
        finally:
            os.killpg(worker.pid, signal.SIGTERM)
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait(10)
        snapshot = server.snapshot()
    return state, snapshot, worker_log.read_text(errors="replace")


def _night_summary(state) -> str:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey

    from judgebench_flows.flows.nightly import NIGHTLY_ARTIFACT_KEY

    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=[NIGHTLY_ARTIFACT_KEY]),
                flow_run_id=ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id]),
            )
        )
    return artifacts[-1].data


@pytest.mark.slow
def test_pool_cells_each_run_on_the_worker_under_one_endpoint_limit(
    prefect_server, judgebench_repo, gpt4o_pairs, tmp_path, monkeypatch
):
    from prefect.client.orchestration import get_client

    from judgebench_flows.calls.global_limits import endpoint_limit_names

    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    state, snapshot, log = _pool_night(prefect_server, judgebench_repo, gpt4o_pairs, tmp_path, MODELS, set(MODELS))
    assert state.is_completed(), f"{state!r}\n{log[-5000:]}"
    outcomes = asyncio.run(state.aresult())
    names = [cell_name("arena_hard", model, GPT4O_FILE) for model in MODELS]
    assert [o["name"] for o in outcomes] == names
    for outcome in outcomes:  # each cell's numbers, read back from its run
        assert (outcome["status"], outcome["accuracy"], outcome["n_pairs"], outcome["judgments"]) == (
            "completed",
            1.0,
            6,
            12,
        ), outcome
    assert snapshot["distinct_answered"] == 3 * 12  # 6 pairs x 2 orders per cell, each asked once
    # the endpoint's concurrency, across the cell runs (without the endpoint's global limit: 4)
    assert 1 <= snapshot["max_in_flight"] <= 2, f"most in flight: {snapshot['max_in_flight']}"

    with get_client(sync_client=True) as client:
        adhoc = client.read_deployment_by_name("judgebench-adhoc/adhoc")
        runs = [client.read_flow_run(o["flow_run_id"]) for o in outcomes]
        limit = client.read_global_concurrency_limit_by_name(endpoint_limit_names(outcomes[0]["endpoint"])[0])
    assert len({r.id for r in runs}) == 3 and all(r.deployment_id == adhoc.id for r in runs)  # a run per cell
    assert all(r.state.is_completed() and r.parameters["cell"]["name"] == n for r, n in zip(runs, names, strict=True))
    assert (limit.limit, limit.active_slots) == (2, 0)  # the matrix's value, every slot given back
    # the worker ran the cell runs side by side (each waiting its turn for the endpoint's slots)
    spans = sorted((r.start_time, r.end_time) for r in runs)
    assert any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:], strict=False)), spans
    summary = _night_summary(state)
    titles = [run_name("arena_hard", model, GPT4O_FILE) for model in MODELS]  # the cells as the night shows them
    assert all(f"| {t} | completed | 100.00%" in summary for t in titles), summary
    parameters = json.dumps([r.parameters for r in runs])
    assert CANARY_KEY not in parameters and CANARY_KEY not in log


@pytest.mark.slow
def test_a_failed_pool_cell_fails_the_night_with_its_reason(
    prefect_server, judgebench_repo, gpt4o_pairs, tmp_path, monkeypatch
):
    """A cell run that fails (a model the endpoint does not know) is a failed cell in the night's summary,
    with its run's one line; the other cell's numbers are there, and the night ends Failed."""
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    models = ["judge-a", "judge-missing"]
    state, snapshot, log = _pool_night(prefect_server, judgebench_repo, gpt4o_pairs, tmp_path, models, {"judge-a"})

    good, bad = (run_name("arena_hard", model, GPT4O_FILE) for model in models)  # as the night shows them
    assert state.is_failed() and f"{bad} (failed" in state.message and good not in state.message, f"{state!r}"
    assert snapshot["distinct_answered"] == 12 and snapshot["max_in_flight"] <= 2, snapshot
    summary = _night_summary(state)
    assert f"| {good} | completed | 100.00%" in summary and f"| {bad} | **FAILED** |" in summary, summary
    assert "model 'judge-missing'" in summary, summary


@pytest.mark.slow
def test_a_night_run_again_reuses_its_cell_runs(prefect_server, judgebench_repo, gpt4o_pairs, tmp_path, monkeypatch):
    """A night that runs its cells again in the same flow run (rescheduled after its process died, or
    retried) waits for the cell runs it already started, finished or not, instead of judging again."""
    from prefect import flow

    from judgebench_flows.flows.pool_cells import judge_cells_on_pool
    from judgebench_flows.judging.matrix import load_matrix

    @flow
    async def twice(path: str):
        entries = load_matrix(path).entries()
        first = await judge_cells_on_pool(entries, None)
        again = await judge_cells_on_pool(entries, None)
        return [run.id for run, _ in first], [
            (run.id, results["overall_accuracy"]["accuracy"]) for run, results in again
        ]

    def night(path: str):
        return twice(path, return_state=True)

    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    models = MODELS[:2]
    state, snapshot, log = _pool_night(
        prefect_server, judgebench_repo, gpt4o_pairs, tmp_path, models, set(models), night
    )
    assert state.is_completed(), f"{state!r}\n{log[-5000:]}"
    first, again = asyncio.run(state.aresult())
    assert [run_id for run_id, _ in again] == first and len(set(first)) == 2
    assert [accuracy for _, accuracy in again] == [1.0, 1.0]
    assert snapshot["distinct_answered"] == snapshot["requests"] == 2 * 12  # each cell judged once

"""A night bigger than one worker: with `cells: pool` every cell is its own run of the ad-hoc deployment,
picked up by a real `prefect worker` (process pool) that runs several flow runs at once, and the endpoint's
`concurrency` holds across those runs through a Prefect global concurrency limit per endpoint.

The endpoint is the bundled OpenAI-compatible server answering the labelled verdict (accuracy exactly
100%) with a latency, so cells running side by side without a shared limit would exceed it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
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


def _pool_night(
    prefect_server,
    judgebench_repo,
    gpt4o_pairs,
    tmp_path,
    models: list[str],
    known: set[str],
    night=None,
    worker_limit: int = 3,
    latency: float = 0.2,
    extra: dict | None = None,
    meanwhile=None,
    worker_env: dict[str, str] | None = None,
):
    """A `cells: pool` night of `models` on one endpoint (concurrency 2) that knows `known`, run with one
    real worker that runs up to `worker_limit` flow runs at once: (night's state, endpoint's counters,
    worker's log). `night`: a flow of the matrix path run instead of the nightly flow; `extra`: more
    matrix keys; `meanwhile`: called with the worker's process and the endpoint in a thread of its own
    while the night runs; `worker_env`: more of the worker's environment."""
    from judgebench_flows.deployments.deploy import deploy_all
    from judgebench_flows.flows.nightly import nightly_benchmarks

    deploy_all(ROOT, POOL)
    url, sha = judgebench_repo
    worker_log = tmp_path / "worker.log"
    with FakeOpenAIServer(
        oracle_responder(gpt4o_pairs, VERDICTS["arena_hard"]), api_key=CANARY_KEY, models=known, latency=latency
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
        for key, value in (extra or {}).items():
            matrix[key] = {**matrix[key], **value} if key == "options" else value
        path = tmp_path / "matrix.yaml"
        path.write_text(yaml.safe_dump(matrix))
        worker = subprocess.Popen(  # one worker that runs up to 3 flow runs at once
            [sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL, "--work-queue", "adhoc"]
            + ["--limit", str(worker_limit)],
            cwd=tmp_path,
            env={
                **os.environ,
                "PREFECT_API_URL": prefect_server,
                "OPENAI_API_KEY": CANARY_KEY,
                "PREFECT_WORKER_QUERY_SECONDS": "2",
                **(worker_env or {}),
            },
            stdout=worker_log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        if meanwhile is not None:
            threading.Thread(target=meanwhile, args=(worker, server), daemon=True).start()
        try:
            night = night or (lambda path: nightly_benchmarks(path, retry_delay_seconds=0, return_state=True))
            state = asyncio.run(night(str(path)))
        finally:
            with contextlib.suppress(ProcessLookupError):  # a worker killed by the test is gone already
                os.killpg(worker.pid, signal.SIGCONT)  # a worker stopped by the test, to be ended
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
    assert "Night budget" not in summary, summary  # no max_cost: no budget line
    parameters = json.dumps([r.parameters for r in runs])
    assert CANARY_KEY not in parameters and CANARY_KEY not in log
    _assert_readable_run_names(state.state_details.flow_run_id, len(MODELS))
    # the endpoint's busy time: the union of its cell runs' busy periods (never above the night's wall time)
    endpoint = outcomes[0]["endpoint"]
    assert re.search(rf"\| {re.escape(endpoint)} \| 2 \| 36 \| [\d.]+ s \| (\d|[1-9]\d|100)% \| [12] \|", summary), (
        summary
    )


def _assert_readable_run_names(night_id, cells: int) -> None:
    """Every flow run of the night (the night, its cell runs, their judging subflows) has a name that
    says what it runs (run_names.run_name), never Prefect's random one, within MAX_RUN_NAME characters."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, FlowRunFilterParentFlowRunId

    from judgebench_flows.core.run_names import MAX_RUN_NAME

    with get_client(sync_client=True) as client:
        night = client.read_flow_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[night_id])))
        cell_runs = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[night_id]))
        )
        judging = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[r.id for r in cell_runs])
            )
        )
    assert len(night) == 1 and len(cell_runs) == cells and len(judging) >= cells, (night, cell_runs, judging)
    assert re.fullmatch(r"nightly \d{4}-\d{2}-\d{2}", night[0].name), night[0].name
    for run in [*cell_runs, *judging]:
        assert len(run.name) <= MAX_RUN_NAME and re.fullmatch(
            r"\d{4}-\d{2}-\d{2} arena_hard · judge-[a-z]+ · gpt-4o", run.name
        ), run.name


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
            (run.id, results.overall_accuracy.accuracy if results else None) for run, results in again
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


@pytest.mark.slow
def test_a_pool_nights_budget_counts_what_its_cells_spent(
    prefect_server, judgebench_repo, gpt4o_pairs, tmp_path, monkeypatch
):
    """A pool night's `max_cost` holds across its cell runs through the results database they share:
    each cell reserves its worst case before its first call and gives back what it did not spend. With a
    budget of 1.5 worst cases, an up-front split runs one cell of three; here the cells, one after the
    other on the worker, run on what the earlier ones left, and the night spends no more than its budget."""
    from judgebench_flows.core.pricing import format_usd
    from judgebench_flows.data.night_budget import NightBudget
    from judgebench_flows.judging.estimate import estimate_run

    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    url, sha = judgebench_repo
    prices = tmp_path / "prices.yaml"
    prices.write_text("models:\n" + "".join(f"  {m}: {{input_per_mtok: 1.0, output_per_mtok: 4.0}}\n" for m in MODELS))
    options = {"prices": str(prices)}
    probe = {"judge_types": ["arena_hard"], "models": MODELS[:1], "data_files": [GPT4O_FILE], "repo_url": url}
    probe |= {"ref": sha, "base_url": "http://127.0.0.1:9/v1", "max_samples": 6, "options": options}
    probe |= {"db_url": f"sqlite:///{tmp_path}/empty.db"}
    worst = estimate_run(parse_matrix(probe).entries()[0].config).worst_usd
    assert worst is not None and worst > 0
    budget = round(1.5 * worst, 6)
    state, snapshot, log = _pool_night(
        prefect_server,
        judgebench_repo,
        gpt4o_pairs,
        tmp_path,
        MODELS,
        set(MODELS),
        worker_limit=1,  # one cell run at a time: each starts once the one before it has settled
        extra={"max_cost": budget, "options": options},
    )
    assert state.is_completed(), f"{state!r}\n{log[-5000:]}"
    outcomes = asyncio.run(state.aresult())
    spent = [o["cost_usd"] for o in outcomes]
    assert all(o["status"] == "completed" for o in outcomes) and all(0 < s < worst / 4 for s in spent), outcomes
    assert snapshot["distinct_answered"] == 3 * 12  # three cells judged: the budget of 1.5 worst cases used
    totals = NightBudget(f"sqlite:///{tmp_path}/history.db", str(state.state_details.flow_run_id)).totals()
    assert totals is not None and totals.held == 0 and totals.max_cost == budget
    assert totals.spent == pytest.approx(sum(spent), abs=1e-6) and totals.spent <= budget
    line = f"Night budget (max_cost): {format_usd(budget)}; spent {format_usd(totals.spent)}; still held $0.00\n"
    assert line in _night_summary(state), _night_summary(state)


@pytest.mark.slow
def test_a_pool_night_ends_its_cell_runs_at_its_deadline(
    prefect_server, judgebench_repo, gpt4o_pairs, tmp_path, monkeypatch
):
    """At the night's deadline (`after_deadline_minutes: 0`) the cell runs no worker started are
    cancelled and the running one is stopped by its worker: the night ends Failed naming each cell's
    reason, and no cell run is left running."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import StateType

    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    state, snapshot, log = _pool_night(
        prefect_server,
        judgebench_repo,
        gpt4o_pairs,
        tmp_path,
        MODELS,
        set(MODELS),
        worker_limit=1,
        latency=20.0,  # a cell takes minutes: none can finish by the deadline
        extra={"deadline_minutes": 1.0, "after_deadline_minutes": 0},
    )
    assert state.is_failed() and "3 of 3 configurations need a look" in state.message, f"{state!r}\n{log[-3000:]}"
    assert state.message.count("deadline") >= 3, state.message
    summary = _night_summary(state)
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[state.state_details.flow_run_id])
            )
        )
    assert len(runs) == 3 and all(r.state.type == StateType.CANCELLED for r in runs), [(r.name, r.state) for r in runs]
    unstarted = [r for r in runs if "not started by the night's deadline" in (r.state.message or "")]
    assert unstarted, [(r.name, r.state.message) for r in runs]  # the worker ran one at a time: 2 or 3 waited
    assert snapshot["answered"] < 12  # nothing finished: no cell got through its 12 calls
    assert summary.count("**FAILED**") == 3, summary


# On the worker's PYTHONPATH: the first flow run process to import the cell's flow sleeps in that import
# (its run Pending, as while a slow worker downloads or imports the flow) and writes its pid to the mark.
PENDING_IMPORT = """
import os, sys, time
class HeldImport:
    def find_spec(self, name, path=None, target=None):
        if name == "judgebench_flows.flows.pool_cells" and os.environ.get("PREFECT__FLOW_RUN_ID"):
            sys.meta_path.remove(self)
            try:
                mark = os.open(os.environ["PENDING_IMPORT_MARK"], os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return None
            os.write(mark, str(os.getpid()).encode())
            os.close(mark)
            time.sleep(3600)
        return None
sys.meta_path.insert(0, HeldImport())
"""


def _stop_worker(worker: subprocess.Popen[bytes], grace: float = 30.0) -> None:
    """A worker asked to stop (SIGTERM to its session), killed with its tree when it has not stopped within
    `grace` seconds: a Prefect worker shutting down on a loaded machine may wait on its server, and one
    left running would outlive the test."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(worker.pid, signal.SIGTERM)
    try:
        worker.wait(grace)
    except subprocess.TimeoutExpired:
        _kill_tree(worker.pid)
        worker.wait(30)


def _kill_tree(root: int) -> None:
    """SIGKILL a worker and every process below it (its flow runs start sessions of their own), frozen
    first so that none starts another meanwhile: a machine going away."""
    from tests.test_pool_team import _descendants, _signal

    _signal(root, signal.SIGSTOP)
    doomed: set[int] = set()
    while found := _descendants(root) - doomed:
        for pid in found:
            _signal(pid, signal.SIGSTOP)
        doomed |= found
    for pid in {root, *doomed}:
        _signal(pid, signal.SIGKILL)


@pytest.mark.slow
def test_a_cell_run_whose_worker_dies_while_it_is_pending_is_run_again(
    prefect_server, judgebench_repo, gpt4o_pairs, tmp_path, monkeypatch
):
    """The worker is killed while its one cell run is Pending (its process importing the flow): no heartbeat
    was ever sent, so only the night's `pending_timeout_minutes` finds it. The night schedules it again,
    a new worker runs both cells, and the night completes in minutes, not at its 24 h bound."""
    import time

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    (probe := tmp_path / "probe").mkdir()
    (probe / "sitecustomize.py").write_text(PENDING_IMPORT)
    mark = tmp_path / "held-import"
    env = {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(probe), os.environ.get("PYTHONPATH")])),
        "PENDING_IMPORT_MARK": str(mark),
    }
    replacement: list[subprocess.Popen[bytes]] = []
    held: list[int] = []

    def kill_while_pending(worker: subprocess.Popen[bytes], server: FakeOpenAIServer) -> None:
        deadline = time.monotonic() + 300
        while not (mark.exists() and mark.read_text()):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        held.append(int(mark.read_text()))
        _kill_tree(worker.pid)  # the worker and its Pending run's process, before any call
        replacement.append(
            subprocess.Popen(
                [sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL, "--work-queue", "adhoc"],
                cwd=tmp_path,
                env={
                    **os.environ,
                    **env,
                    "PREFECT_API_URL": prefect_server,
                    "OPENAI_API_KEY": CANARY_KEY,
                    "PREFECT_WORKER_QUERY_SECONDS": "2",
                },
                stdout=(tmp_path / "worker-2.log").open("wb"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    models = MODELS[:2]
    started = time.monotonic()
    try:
        state, snapshot, log = _pool_night(
            prefect_server,
            judgebench_repo,
            gpt4o_pairs,
            tmp_path,
            models,
            set(models),
            worker_limit=1,  # the killed worker holds one cell run, Pending
            extra={"pending_timeout_minutes": 0.75},
            meanwhile=kill_while_pending,
            worker_env=env,
        )
    finally:
        for worker in replacement:
            _stop_worker(worker)
    took = time.monotonic() - started
    log += (tmp_path / "worker-2.log").read_text(errors="replace") if replacement else ""
    assert held and replacement, "no cell run was held Pending"
    assert state.is_completed(), f"{state!r}\n{log[-5000:]}"
    assert snapshot["distinct_answered"] == snapshot["answered"] == 2 * 12, snapshot  # nothing paid twice
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[state.state_details.flow_run_id])
            )
        )
        histories = {r.id: client.read_flow_run_states(r.id) for r in runs}
    assert len(runs) == 2 and all(r.state.is_completed() for r in runs), [(r.name, r.state) for r in runs]
    retried = [
        s.message
        for states in histories.values()
        for s in states
        if s.name == "AwaitingRetry" and (s.message or "").startswith("taken as crashed: Pending for 45 s")
    ]
    assert len(retried) == 1, {r.name: [(s.name, s.message) for s in histories[r.id]] for r in runs}
    print(f"night took {took:.0f} s; {retried[0]}")

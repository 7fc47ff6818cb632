"""`--task-runner dask` on a real Dask cluster: same results as in-process, shards on the workers, one
concurrency limit across all workers, and a call cache shared through the results database.

Real parts only: a `distributed.LocalCluster` of two worker processes, the session's Prefect server
(workers record their task runs there and take slots of the global concurrency limit from it), shared
Prefect result storage under tmp, and the OpenAI-compatible test server, which requires the API key:
the workers get it from their environment, never from the flow.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from judgebench_flows.calls.global_limits import limit_names
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._helpers import run_command
from tests.conftest import CANARY_KEY, VERDICTS, load_jsonl, shown_pair

pytestmark = pytest.mark.slow

MODEL = "o1-mini-2024-09-12"
SAMPLES, CONCURRENCY = 60, 4


def _bucket(pair_id: str, buckets: int) -> int:
    return int(hashlib.sha256(pair_id.encode()).hexdigest(), 16) % buckets


def wrong(pair_id: str) -> bool:
    """A deterministic quarter of the pairs that the judge gets wrong."""
    return _bucket(pair_id, 4) == 0


def unparseable(pair_id: str) -> bool:
    """A deterministic sixth of the pairs answered without a verdict (in the incomplete-shard run)."""
    return _bucket(pair_id, 6) == 1


def responder(pairs: list[dict], unparseable_subset: bool = False) -> Callable[[dict], str]:
    """The labelled verdict in arena_hard's format, inverted for `wrong` pairs."""
    verdict = VERDICTS["arena_hard"]

    def respond(body: dict) -> str:
        shown = shown_pair(body, pairs)
        if shown is None:
            return "I cannot tell."
        pair, first_is_better = shown
        if unparseable_subset and unparseable(pair["pair_id"]):
            return "Both answers have merit; I cannot decide."
        return verdict(first_is_better != wrong(pair["pair_id"]))

    return respond


@pytest.fixture(scope="module")
def cluster(prefect_server, tmp_path_factory) -> Iterator:
    """Two worker processes that see what a real deployment's workers must see: the Prefect API, the
    shared result storage and the endpoint's key, all from the environment they start with."""
    from distributed import LocalCluster

    storage = tmp_path_factory.mktemp("prefect-results")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PREFECT_API_URL", prefect_server)
        env.setenv("PREFECT_LOCAL_STORAGE_PATH", str(storage))
        env.setenv("OPENAI_API_KEY", CANARY_KEY)
        # Worker processes are spawned by nannies in this process and copy os.environ as it is now.
        with LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None) as local:
            yield local


@pytest.fixture(scope="module")
def server(gpt4o_pairs) -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(responder(gpt4o_pairs), latency=0.05, api_key=CANARY_KEY) as fake:
        yield fake


def run_args(
    repo: tuple[str, str],
    server: FakeOpenAIServer,
    out: str,
    db: Path,
    shard_size: int,
    *extra: str,
    model: str = MODEL,
    report: bool = False,
) -> list[str]:
    return run_command(
        repo,
        server,
        db.parent,
        *([] if report else ["--no-report"]),
        *extra,
        model=model,
        concurrency=CONCURRENCY,
        shard_size=shard_size,
        max_samples=SAMPLES,
        result_path=f"{out}.json",
        output_dir=out,
        db_name=db.name,
    )


def outputs(tmp_path: Path, out: str) -> tuple[dict, dict[str, list]]:
    """The results JSON and, per pair, the (status, decision) of each order from the JSONL."""
    results = json.loads((tmp_path / f"{out}.json").read_text())
    rows = load_jsonl(next((tmp_path / out).glob("*.jsonl")))
    return results, {r["pair_id"]: [(j["status"], j["decision"]) for j in r["judgments"]] for r in rows}


def shard_runs_on_workers(cluster) -> Callable[[], list[dict]]:
    """Start recording the scheduler's task stream; the returned function gives what ran since, and where."""
    from distributed import Client

    client = Client(cluster)
    client.get_task_stream()  # installs the scheduler's task-stream plugin
    since = time.time()

    def ran() -> list[dict]:
        try:
            return [
                t for t in client.get_task_stream(start=since) if any(s["action"] == "compute" for s in t["startstops"])
            ]
        finally:
            client.close()

    return ran


async def shard_task_runs(flow_run_id: str) -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    async with get_client() as client:
        runs = await client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    return [r for r in runs if r.name.startswith("judge-shard-")]


def overlapping_on_different_workers(tasks: list[dict]) -> bool:
    spans = [(t["worker"], s["start"], s["stop"]) for t in tasks for s in t["startstops"] if s["action"] == "compute"]
    return any(w1 != w2 and s1 < e2 and s2 < e1 for w1, s1, e1 in spans for w2, s2, e2 in spans)


def test_dask_matches_in_process_holds_the_limit_across_workers_and_shares_the_call_cache(
    run_cli, judgebench_repo, server, cluster, tmp_path
):
    # In-process: the reference.
    server.reset_counters()
    local = run_cli(*run_args(judgebench_repo, server, "local", tmp_path / "local.db", 10))
    assert local.returncode == 0, local.stderr[-3000:]
    local_results, local_decisions = outputs(tmp_path, "local")
    assert server.answered == 2 * SAMPLES
    expected_accuracy = sum(not wrong(pair_id) for pair_id in local_decisions) / SAMPLES
    assert local_results["overall_accuracy"]["accuracy"] == pytest.approx(expected_accuracy)

    # On Dask: its own database (so every call really goes to the endpoint from the workers) and another
    # shard size (so Prefect's shard cache, shared by all, does not answer for it).
    ran = shard_runs_on_workers(cluster)
    server.reset_counters()
    on_dask = run_cli(
        *run_args(
            judgebench_repo,
            server,
            "dask",
            tmp_path / "dask.db",
            15,
            "--task-runner",
            "dask",
            "--dask-address",
            cluster.scheduler_address,
        )
    )
    assert on_dask.returncode == 0, on_dask.stderr[-3000:]
    dask_results, dask_decisions = outputs(tmp_path, "dask")

    assert dask_decisions == local_decisions
    for key in ("overall_accuracy", "category_accuracy", "consistency", "invalid"):
        assert dask_results[key] == local_results[key], key
    assert server.answered == 2 * SAMPLES and server.requests == 2 * SAMPLES  # nothing asked twice
    # what the endpoint said to the workers' calls comes back with their shards, as in-process
    assert dask_results["provenance"]["served"] == local_results["provenance"]["served"]
    assert dask_results["provenance"]["served"]["models"] == {MODEL: 2 * SAMPLES}

    # The shards ran as task runs of this flow run, on both worker processes, at the same time.
    tasks = ran()
    assert len(tasks) == 4  # 60 pairs in shards of 15
    assert {t["worker"] for t in tasks} == set(cluster.scheduler_info["workers"])
    assert overlapping_on_different_workers(tasks)
    task_runs = asyncio.run(shard_task_runs(dask_results["run"]["flow_run_id"]))
    assert sorted(r.name for r in task_runs) == [f"judge-shard-{i}" for i in range(4)]
    assert all(r.state.is_completed() for r in task_runs)

    # Two workers, each with its own --concurrency 4 in process, but never more than 4 calls in flight.
    assert 2 <= server.max_in_flight <= CONCURRENCY
    concurrency_limit, _ = limit_names(server.base_url, MODEL)
    assert asyncio.run(read_limit(concurrency_limit)) == CONCURRENCY

    # Again on Dask with the same database but new shards: every answer comes from the shared call cache.
    server.reset_counters()
    again = run_cli(
        *run_args(
            judgebench_repo,
            server,
            "again",
            tmp_path / "dask.db",
            7,
            "--task-runner",
            "dask",
            "--dask-address",
            cluster.scheduler_address,
        )
    )
    assert again.returncode == 0, again.stderr[-3000:]
    again_results, again_decisions = outputs(tmp_path, "again")
    assert server.requests == 0
    assert again_decisions == local_decisions
    assert again_results["overall_accuracy"] == local_results["overall_accuracy"]
    assert again_results["usage"]["cached_calls"] == 2 * SAMPLES
    assert again_results["provenance"]["served"]["answers"] == 0  # the cache says nothing of the model
    # which run paid the answers the workers read from the call cache, and when, as in-process
    cache, paid_by = again_results["run"]["cache"], dask_results["run"]
    assert cache["answers"] == cache["calls"] == 2 * SAMPLES
    assert [(s["run_id"], s["answers"]) for s in cache["sources"]] == [(paid_by["run_id"], 2 * SAMPLES)]
    assert cache["sources"][0]["started"][:10] == paid_by["started"][:10]
    line = " ".join(again.stdout.split())
    assert f"none measured now: {2 * SAMPLES} from run {paid_by['run_id'][:8]}" in line, line


def test_incomplete_shards_on_dask_still_give_back_their_records(
    run_cli, judgebench_repo, gpt4o_pairs, server, cluster, tmp_path
):
    """Unparseable verdicts make shards raise ShardIncomplete on the workers; the exception, with its
    records, crosses Dask and Prefect back to the flow, which reports them instead of losing them."""
    server.set_responder(responder(gpt4o_pairs, unparseable_subset=True))
    try:
        result = run_cli(
            *run_args(
                judgebench_repo,
                server,
                "partial",
                tmp_path / "partial.db",
                10,
                "--no-cache",
                "--task-runner",
                "dask",
                "--dask-address",
                cluster.scheduler_address,
                "--max-failed-fraction",
                "1",
            )
        )
    finally:
        server.set_responder(responder(gpt4o_pairs))
    assert result.returncode == 0, result.stderr[-3000:]
    results, decisions = outputs(tmp_path, "partial")
    hit = [pair_id for pair_id in decisions if unparseable(pair_id)]
    assert len(decisions) == SAMPLES and hit
    assert all(decisions[pair_id] == [("invalid", None), ("invalid", None)] for pair_id in hit)
    assert all(status == "ok" for pair_id, judged in decisions.items() if pair_id not in hit for status, _ in judged)
    assert results["invalid"]["invalid_judgments"] == 2 * len(hit)


def test_request_adjustments_learned_on_workers_reach_results_json_and_later_shards(
    run_cli, judgebench_repo, server, cluster, tmp_path
):
    """A model the rule table does not know, at an endpoint that rejects `temperature`: each worker learns
    to drop it from a 400 in its own process. Each shard's result carries what its worker learned, so the
    flow's results.json shows the adjustment (as in-process), and shards sent after it is known start
    without it. A request is rejected at most once, and only by a worker's first shard: every call of that
    shard is shaped before it waits for a slot, so at most one shard's calls per worker thread."""
    from distributed import Client

    model = f"acme-judge-{time.time_ns()}"  # a name no worker process has met: nothing learned before this run
    shard_size = 5
    worker_threads = sum(w["nthreads"] for w in cluster.scheduler_info["workers"].values())
    server.reset_counters()
    server.configure(rejected_params={"temperature"})
    try:
        result = run_cli(
            *run_args(
                judgebench_repo,
                server,
                "adjusted",
                tmp_path / "adjusted.db",
                shard_size,
                "--task-runner",
                "dask",
                "--dask-address",
                cluster.scheduler_address,
                model=model,
                report=True,
            )
        )
        counts = server.status_counts
    finally:
        server.configure(rejected_params=())
    assert result.returncode == 0, result.stderr[-3000:]
    results, decisions = outputs(tmp_path, "adjusted")
    assert len(decisions) == SAMPLES and results["invalid"]["failed_judgments"] == 0
    [change] = results["run"]["requests"]["adjustments"]
    assert change["param"] == "temperature" and change["action"] == "dropped"
    assert "not supported" in change["endpoint_said"] and CANARY_KEY not in json.dumps(results)
    assert "request adjusted" in result.stdout and "temperature" in result.stdout
    report = (tmp_path / "adjusted" / "report.html").read_text()
    assert 'id="request-adjustments"' in report and "temperature" in report
    # Every judgment answered once; only requests sent before their worker learned were rejected.
    assert counts.get(200) == 2 * SAMPLES, counts
    assert 1 <= counts.get(400, 0) <= worker_threads * 2 * shard_size < 2 * SAMPLES, counts
    assert set(counts) == {200, 400}, counts

    # What the workers learned was the run's: its context on them is gone with it (a new run starts clean).
    with Client(cluster) as client:
        left = client.run(_run_contexts_on_worker)
    assert all(found == [] for found in left.values()), left


def _run_contexts_on_worker(dask_worker) -> list[str]:
    return [name for name in dask_worker.plugins if name.startswith("judgebench-run-")]


async def read_limit(name: str) -> int:
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        return (await client.read_global_concurrency_limit_by_name(name)).limit


def test_no_scheduler_at_the_address_is_one_line(run_cli, judgebench_repo, server, tmp_path):
    import socket

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = run_cli(
        *run_args(
            judgebench_repo,
            server,
            "nowhere",
            tmp_path / "nowhere.db",
            10,
            "--task-runner",
            "dask",
            "--dask-address",
            f"tcp://127.0.0.1:{port}",
        )
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert f"--dask-address tcp://127.0.0.1:{port}: no Dask scheduler answers there" in result.stderr
    assert "Traceback" not in result.stderr

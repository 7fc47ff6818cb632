"""A Dask worker killed mid-run: its shards run on the other worker, the run ends by itself with every
judgment, takes at most 1.5x a clean run, and counts as paid the answers the killed attempt paid for.

Real parts: a `dask scheduler` and two `dask worker --no-nanny` processes (a nanny would restart the
killed worker), the session's Prefect server, `judgebench run --task-runner dask` as a subprocess and the
bundled OpenAI-compatible endpoint. Before this, a dead worker's slots of the global limit stayed taken
until their leases expired (the run 6x slower), and the answers its lost attempt paid for were reported
as cached.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._runs import GPT4O_PATH, free_port, run_argv
from tests.conftest import CANARY_KEY, requires_shared

pytestmark = pytest.mark.slow

VERDICT = "My final verdict is [[A>B]]"
PAIRS, SHARD, CONCURRENCY, LATENCY = 40, 5, 4, 0.4  # 80 calls, about 8 s of judging on 4 slots


@pytest.fixture()
def dask_cluster(tmp_path, prefect_server) -> Iterator[tuple[str, list[subprocess.Popen]]]:
    """A scheduler and two single-thread workers, as an operator starts them, with the environment a
    worker needs (the Prefect API, shared result storage, the endpoint's key)."""
    port = free_port()
    env = {
        **os.environ,
        "PREFECT_API_URL": prefect_server,
        "PREFECT_LOCAL_STORAGE_PATH": str(tmp_path / "prefect-results"),
        "OPENAI_API_KEY": CANARY_KEY,
    }
    dask = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    log = open(tmp_path / "dask.log", "a")  # noqa: SIM115 - the cluster's output for the test's length
    started = [
        subprocess.Popen(
            [*dask, "--host", "127.0.0.1", "--port", str(port), "--dashboard-address", ":0"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    ]
    address = f"tcp://127.0.0.1:{port}"
    for _ in range(2):
        started.append(
            subprocess.Popen(
                [sys.executable, "-m", "distributed.cli.dask_worker", address, "--no-nanny", "--nthreads", "1"]
                + ["--host", "127.0.0.1", "--dashboard-address", ":0"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
    from distributed import Client

    with Client(address, timeout=120) as client:
        client.wait_for_workers(2, timeout=120)
    try:
        yield address, started[1:]
    finally:
        for process in reversed(started):
            if process.poll() is None:
                process.kill()
                process.wait()
        log.close()


def run_on(tmp_path: Path, address: str, endpoint: FakeOpenAIServer, name: str) -> list[str]:
    data = tmp_path / "pairs.jsonl"
    if not data.exists():
        data.write_text("".join(GPT4O_PATH.read_text().splitlines(keepends=True)[:PAIRS]))
    # Each run its own endpoint (port), so neither Prefect's shard cache nor the call cache answers for it.
    return run_argv(
        endpoint.base_url,
        tmp_path / name,
        None,
        "--concurrency",
        str(CONCURRENCY),
        "--shard-size",
        str(SHARD),
        "--task-runner",
        "dask",
        "--dask-address",
        address,
        data_path=data,
        db_url=f"sqlite:///{tmp_path / name}.db",
    )


@requires_shared
def test_a_killed_worker_costs_at_most_half_a_clean_run_and_its_paid_calls_count(tmp_path, dask_cluster):
    address, workers = dask_cluster
    env = {**os.environ, "OPENAI_API_KEY": CANARY_KEY, "JUDGEBENCH_CACHE_DIR": str(tmp_path / "cache")}
    env["PREFECT_LOCAL_STORAGE_PATH"] = str(tmp_path / "prefect-results")

    with FakeOpenAIServer(VERDICT, api_key=CANARY_KEY) as warm_endpoint:  # workers import and connect once
        warm = subprocess.run(
            run_on(tmp_path, address, warm_endpoint, "warm"), env=env, cwd=tmp_path, capture_output=True, text=True
        )
        assert warm.returncode == 0, warm.stderr[-3000:]

    with FakeOpenAIServer(VERDICT, latency=LATENCY, api_key=CANARY_KEY) as clean_endpoint:
        started = time.monotonic()
        clean = subprocess.run(
            run_on(tmp_path, address, clean_endpoint, "clean"), env=env, cwd=tmp_path, capture_output=True, text=True
        )
        clean_seconds = time.monotonic() - started
        assert clean.returncode == 0, clean.stderr[-3000:]

    with FakeOpenAIServer(VERDICT, latency=LATENCY, api_key=CANARY_KEY) as endpoint:
        started = time.monotonic()
        run = subprocess.Popen(
            run_on(tmp_path, address, endpoint, "killed"),
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            while endpoint.answered < PAIRS:  # half of the calls
                assert run.poll() is None, run.communicate()[1][-3000:]
                assert time.monotonic() - started < 300, "the run never got half way"
                time.sleep(0.05)
            workers[0].send_signal(signal.SIGKILL)
            _, stderr = run.communicate(timeout=300)
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
        killed_seconds = time.monotonic() - started
        answered = endpoint.answered
    assert run.returncode == 0, stderr[-3000:]
    results = json.loads((tmp_path / "killed.json").read_text())
    clean_results = json.loads((tmp_path / "clean.json").read_text())
    assert results["overall_accuracy"] == clean_results["overall_accuracy"]
    assert results["usage"]["judgments"] == 2 * PAIRS and results["invalid"]["failed_judgments"] == 0
    paid = results["usage"]["paid_calls"]
    # Every answer the endpoint gave counts as paid, except those to the killed worker that never reached
    # the call cache (at most its calls in flight).
    assert 2 * PAIRS <= paid <= answered <= paid + CONCURRENCY, (paid, answered)
    assert results["usage"]["cached_calls"] == 0
    print(f"clean {clean_seconds:.1f}s, a worker killed half way {killed_seconds:.1f}s; paid {paid} of {answered}")
    assert killed_seconds <= 1.5 * clean_seconds, (killed_seconds, clean_seconds)

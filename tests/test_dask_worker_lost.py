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
RUN_SECONDS = 300  # a run that has not ended by then hangs (a clean one takes about 30 s on a loaded machine)


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
        "PYTHONFAULTHANDLER": "1",  # SIGABRT (`_run_bounded` on a hang) writes every thread's stack to dask.log
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


def _run_bounded(
    argv: list[str], env: dict[str, str], tmp_path: Path, endpoint: FakeOpenAIServer, workers: list[subprocess.Popen]
) -> subprocess.CompletedProcess[str]:
    """The run to its end within RUN_SECONDS; a run still going then fails the test with what it was doing:
    every thread's stack of the run and of the workers (SIGABRT under PYTHONFAULTHANDLER), the answers the
    endpoint gave and the cluster's log."""
    process = subprocess.Popen(argv, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = process.communicate(timeout=RUN_SECONDS)
    except subprocess.TimeoutExpired:
        for one in [process, *workers]:
            if one.poll() is None:
                one.send_signal(signal.SIGABRT)
        stdout, stderr = process.communicate(timeout=60)
        time.sleep(2)  # the workers' dumps reach dask.log
        log = (tmp_path / "dask.log").read_text(errors="replace")
        pytest.fail(
            f"the run did not end in {RUN_SECONDS} s; the endpoint answered {endpoint.answered} calls.\n"
            f"run's stderr:\n{stderr[-12000:]}\ndask.log:\n{log[-12000:]}"
        )
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


@requires_shared
def test_a_killed_worker_costs_at_most_half_a_clean_run_and_its_paid_calls_count(tmp_path, dask_cluster):
    address, workers = dask_cluster
    env = {**os.environ, "OPENAI_API_KEY": CANARY_KEY, "JUDGEBENCH_CACHE_DIR": str(tmp_path / "cache")}
    env["PREFECT_LOCAL_STORAGE_PATH"] = str(tmp_path / "prefect-results")
    env["PYTHONFAULTHANDLER"] = "1"

    with FakeOpenAIServer(VERDICT, api_key=CANARY_KEY) as warm_endpoint:  # workers import and connect once
        warm = _run_bounded(run_on(tmp_path, address, warm_endpoint, "warm"), env, tmp_path, warm_endpoint, workers)
        assert warm.returncode == 0, warm.stderr[-3000:]

    with FakeOpenAIServer(VERDICT, latency=LATENCY, api_key=CANARY_KEY) as clean_endpoint:
        started = time.monotonic()
        clean = _run_bounded(run_on(tmp_path, address, clean_endpoint, "clean"), env, tmp_path, clean_endpoint, workers)
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
            _, stderr = run.communicate(timeout=RUN_SECONDS)
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


@requires_shared
def test_sigterm_to_a_dask_run_stops_its_shards_and_gives_its_slots_back(tmp_path, dask_cluster, prefect_server):
    """The run's process holds the slots of the shards it sent: stopped by SIGTERM, it ends within seconds
    (exit 143), not after judging on through the thread that sends shards, and its slots are back."""
    import asyncio
    import sqlite3

    from judgebench_flows.calls.global_limits import limit_names

    address, _ = dask_cluster
    env = {**os.environ, "OPENAI_API_KEY": CANARY_KEY, "JUDGEBENCH_CACHE_DIR": str(tmp_path / "cache")}
    env["PREFECT_LOCAL_STORAGE_PATH"] = str(tmp_path / "prefect-results")
    with FakeOpenAIServer(VERDICT, latency=1.0, api_key=CANARY_KEY) as endpoint:
        run = subprocess.Popen(
            run_on(tmp_path, address, endpoint, "stopped"),
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 300
            while endpoint.answered < 4:
                assert run.poll() is None, run.communicate()[1][-3000:]
                assert time.monotonic() < deadline, "the run never started judging"
                time.sleep(0.05)
            run.send_signal(signal.SIGTERM)
            stopped = time.monotonic()
            _, stderr = run.communicate(timeout=60)
            ended_after = time.monotonic() - stopped
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
        name, _ = limit_names(endpoint.base_url, "judge")
    assert run.returncode == 143, stderr[-3000:]
    assert ended_after < 30, ended_after
    with sqlite3.connect(tmp_path / "stopped.db") as connection:
        assert connection.execute("select status from runs").fetchall() == [("interrupted",)]

    async def active() -> int:
        from prefect.client.orchestration import get_client

        async with get_client() as client:
            return (await client.read_global_concurrency_limit_by_name(name)).active_slots

    assert asyncio.run(active()) == 0


@requires_shared
def test_a_dask_run_waiting_for_slots_others_hold_says_so_and_judges_once_they_are_back(tmp_path, dask_cluster):
    """Another holder keeps every slot of the endpoint's global limit: the run sends no call, says in its
    log within QUIET_NOTICE_SECONDS (60 s) which limit it waits for, and judges every pair once the slots
    are given back."""
    import asyncio
    import threading

    from judgebench_flows.calls.global_limits import SlotLeases, ensure_limit, limit_names

    address, _ = dask_cluster
    env = {**os.environ, "OPENAI_API_KEY": CANARY_KEY, "JUDGEBENCH_CACHE_DIR": str(tmp_path / "cache")}
    env["PREFECT_LOCAL_STORAGE_PATH"] = str(tmp_path / "prefect-results")
    with FakeOpenAIServer(VERDICT, api_key=CANARY_KEY) as endpoint:
        name, _ = limit_names(endpoint.base_url, "judge")
        asyncio.run(ensure_limit(name, CONCURRENCY))
        other = SlotLeases(name)
        held = other.try_take(CONCURRENCY)
        assert held is not None
        run = subprocess.Popen(
            run_on(tmp_path, address, endpoint, "waiting"), env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True
        )
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(run.stderr or ()), daemon=True)
        reader.start()
        try:
            deadline = time.monotonic() + 240
            while not any("no shard finished for" in line for line in lines):
                assert run.poll() is None, "".join(lines)[-3000:]
                assert time.monotonic() < deadline, "".join(lines)[-3000:]
                time.sleep(0.5)
            assert endpoint.answered == 0
            other.give_back(held)
            run.wait(timeout=RUN_SECONDS)
        finally:
            other.close()
            if run.poll() is None:
                run.kill()
                run.wait()
        reader.join(timeout=10)
        answered = endpoint.answered
    said = "".join(lines)
    assert run.returncode == 0, said[-3000:]
    notice = next(line for line in lines if "no shard finished for" in line)
    assert f"no free slots of the global concurrency limit '{name}' (other runs hold them)" in notice, notice
    assert "0 shards in flight on the Dask workers, 8 waiting" in notice, notice
    assert answered == 2 * PAIRS

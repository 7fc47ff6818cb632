"""How much a run loses when its infrastructure fails under it: a Dask worker killed, the Prefect server
restarted.

Starts real processes: a `prefect server start` on its own PREFECT_HOME (SQLite), a `dask scheduler`
with two `dask worker --no-nanny --nthreads 1`, and the bundled OpenAI-compatible endpoint (each run its
own, so no cache answers for it). Then, with `judgebench run` as a subprocess on the first PAIRS pairs
of the GPT-4o file:

1. on Dask, a clean run, then a run whose first worker is SIGKILLed when half the calls are answered:
   wall times, and paid calls against the endpoint's answers;
2. in-process with `--global-limit`, a clean run, then a run whose Prefect server is SIGKILLed when half
   the calls are answered and restarted on the same database after `--down` seconds; then a clean run
   after the restart (is the endpoint's limit whole again?).

    python benchmarks/bench_recovery.py [--pairs 100 --latency 0.3 --concurrency 8 --down 5]

Run by hand; this is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from judgebench_flows.runtime.server_watch import answers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_judging import add_data_option, benchmark_data  # noqa: E402

from judgebench_flows.testing.fake_openai import FakeOpenAIServer

GPT4O = "dataset=judgebench,response_model=gpt-4o-2024-05-13.jsonl"
KEY = "sk-bench"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_prefect(home: Path, port: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    process = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while not answers(f"http://127.0.0.1:{port}/api", timeout=2.0):
        time.sleep(0.3)
    return process


def start_dask(env: dict[str, str]) -> tuple[str, list[subprocess.Popen]]:
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    quiet = {"env": env, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", str(port)]
            + ["--dashboard-address", ":0"],
            **quiet,
        )
    ]
    for _ in range(2):
        processes.append(
            subprocess.Popen(
                [sys.executable, "-m", "distributed.cli.dask_worker", address, "--no-nanny", "--nthreads", "1"]
                + ["--host", "127.0.0.1", "--dashboard-address", ":0"],
                **quiet,
            )
        )
    from distributed import Client

    with Client(address, timeout=120) as client:
        client.wait_for_workers(2, timeout=120)
    return address, processes


def command(work: Path, data: Path, endpoint: FakeOpenAIServer, name: str, concurrency: int, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "judgebench_flows.cli.main",
        "run",
        "--data-path",
        str(data),
        "--model",
        "judge",
        "--base-url",
        endpoint.base_url,
        "--concurrency",
        str(concurrency),
        "--shard-size",
        "10",
        "--no-progress",
        "--no-report",
        "--db-url",
        f"sqlite:///{work / name}.db",
        "--result-path",
        str(work / f"{name}.json"),
        "--output-dir",
        str(work / name),
        *extra,
    ]


def timed(argv: list[str], env: dict[str, str], endpoint: FakeOpenAIServer, half: int, fault=None) -> float:
    """Wall seconds of the run; `fault()` is called once half the calls are answered."""
    started = time.monotonic()
    run = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if fault is not None:
        while endpoint.answered < half and run.poll() is None:
            time.sleep(0.05)
        fault()
    _, stderr = run.communicate()
    if run.returncode != 0:
        raise SystemExit(f"run failed ({run.returncode}): {stderr[-2000:]}")
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=100)
    parser.add_argument("--latency", type=float, default=0.3)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--down", type=float, default=5.0, help="seconds the Prefect server stays down")
    add_data_option(parser)
    args = parser.parse_args()
    checkout = benchmark_data(args.data)  # before anything starts: no data, one line and exit 2

    work = Path(tempfile.mkdtemp(prefix="bench-recovery-"))
    data = work / "pairs.jsonl"
    data.write_text("".join((checkout / "data" / GPT4O).read_text().splitlines(keepends=True)[: args.pairs]))
    home, port = work / "prefect-home", free_port()
    home.mkdir()
    server = start_prefect(home, port)
    env = {
        **os.environ,
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
        "PREFECT_HOME": str(home),
        "PREFECT_LOCAL_STORAGE_PATH": str(work / "results-storage"),
        "OPENAI_API_KEY": KEY,
        "JUDGEBENCH_CACHE_DIR": str(work / "cache"),
    }
    calls, half = 2 * args.pairs, args.pairs
    address, cluster = start_dask(env)
    try:
        dask = ("--task-runner", "dask", "--dask-address", address)
        with FakeOpenAIServer("[[A>B]]") as endpoint:  # not timed: workers import and connect once
            timed(command(work, data, endpoint, "dask-warm", args.concurrency, *dask), env, endpoint, half)
        with FakeOpenAIServer("[[A>B]]", latency=args.latency) as endpoint:
            clean = timed(command(work, data, endpoint, "dask-clean", args.concurrency, *dask), env, endpoint, half)
        with FakeOpenAIServer("[[A>B]]", latency=args.latency) as endpoint:
            killed = timed(
                command(work, data, endpoint, "dask-killed", args.concurrency, *dask),
                env,
                endpoint,
                half,
                lambda: cluster[1].send_signal(signal.SIGKILL),
            )
            answered = endpoint.answered
        usage = json.loads((work / "dask-killed.json").read_text())["usage"]
        print(
            f"Dask, {calls} calls, latency {args.latency}s, --concurrency {args.concurrency}, 2 workers: clean "
            f"{clean:.1f}s; a worker SIGKILLed half way {killed:.1f}s ({killed / clean:.2f}x); paid "
            f"{usage['paid_calls']} of {answered} answered, {usage['cached_calls']} from cache"
        )
    finally:
        for process in reversed(cluster):
            process.kill()

    state = {"server": server}

    def restart() -> None:
        state["server"].send_signal(signal.SIGKILL)
        state["server"].wait()
        time.sleep(args.down)
        state["server"] = start_prefect(home, port)

    try:
        limit = ("--global-limit",)
        with FakeOpenAIServer("[[A>B]]") as endpoint:  # not timed: the server's first flow run
            timed(command(work, data, endpoint, "local-warm", args.concurrency, *limit), env, endpoint, half)
        with FakeOpenAIServer("[[A>B]]", latency=args.latency) as endpoint:
            clean = timed(command(work, data, endpoint, "local-clean", args.concurrency, *limit), env, endpoint, half)
        with FakeOpenAIServer("[[A>B]]", latency=args.latency) as endpoint:
            restarted = timed(
                command(work, data, endpoint, "local-restart", args.concurrency, *limit), env, endpoint, half, restart
            )
            port_of_endpoint = endpoint.port
        with FakeOpenAIServer("[[A>B]]", latency=args.latency, port=port_of_endpoint) as endpoint:  # same limit
            after = timed(command(work, data, endpoint, "local-after", args.concurrency, *limit), env, endpoint, half)
        print(
            f"in-process --global-limit, {calls} calls: clean {clean:.1f}s; Prefect server SIGKILLed half way and "
            f"restarted {args.down:g}s later {restarted:.1f}s; the next run on the same endpoint {after:.1f}s "
            f"({after / clean:.2f}x clean)"
        )
    finally:
        state["server"].kill()


if __name__ == "__main__":
    main()

"""A night's wall time against its bound: the nightly matrix with cells side by side.

The matrix of issue 31, against bundled servers on loopback in this process: 3 synchronous endpoints
(`FakeOpenAIServer`, `--latency` seconds a call), 2 models on each (6 synchronous cells), and 2 batch
cells on a `FakeBatchServer` whose batches are answered `--turnaround` seconds after submission; one
judge (vanilla, one call per judgment), `--pairs` pairs of the GPT-4o file in both orders, `--concurrency`
calls in flight per endpoint. A Prefect server is started for the night (its own PREFECT_HOME).

The bound is what no schedule can beat: max(busiest endpoint's calls x latency / concurrency, slowest
batch turnaround). Printed: the night's wall time (the flow, from start to its summary), the bound and
their ratio; per endpoint the calls the server answered and the most it ever had in flight (never above
`--concurrency`); the synchronous calls the batch cells made (0).

    python benchmarks/bench_nightly.py [--latency 0.5 --turnaround 25 --pairs 64 --concurrency 8]

Run by hand; this is a measurement, not a test. Figures: docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_end_to_end import start_prefect_server  # noqa: E402
from bench_judging import GPT4O_FILE, add_data_option, benchmark_data, make_repo  # noqa: E402

ANSWER = "Output (a)"  # a vanilla verdict


def matrix(urls: list[str], batch_url: str, work: Path, repo: tuple[str, str], args: argparse.Namespace) -> dict:
    sync = [{"model": f"judge-{e}{m}", "base_url": url} for e, url in enumerate(urls) for m in "ab"]
    batch = [{"model": f"batch-judge-{m}", "base_url": batch_url, "batch": True} for m in "ab"]
    return {
        "judge_types": ["vanilla"],
        "models": sync + batch,
        "data_files": [GPT4O_FILE],
        "repo_url": repo[0],
        "ref": repo[1],
        "concurrency": args.concurrency,
        "db_url": f"sqlite:///{work}/night.db",
        "output_root": str(work / "nightly"),
        "max_samples": args.pairs,
        "options": {"cache_dir": str(work / "cache"), "bootstrap_resamples": 100, "batch_poll_seconds": 1.0},
    }


def night_seconds(state) -> float:
    """The night's flow run from its start to its end, as the Prefect server recorded them."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        run = client.read_flow_run(state.state_details.flow_run_id)
    return (run.end_time - run.start_time).total_seconds()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.5)
    parser.add_argument("--turnaround", type=float, default=25.0)
    parser.add_argument("--pairs", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=8)
    add_data_option(parser)
    args = parser.parse_args()
    data = benchmark_data(args.data)  # before anything starts: no data, one line and exit 2

    work = Path(tempfile.mkdtemp(prefix="bench-nightly-"))
    env = {**os.environ, "PREFECT_HOME": str(work / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    prefect, api_url = start_prefect_server(env)
    os.environ.update(
        PREFECT_HOME=env["PREFECT_HOME"],
        PREFECT_API_URL=api_url,
        PREFECT_LOCAL_STORAGE_PATH=str(work / "storage"),
        OPENAI_API_KEY="sk-bench",
    )
    import yaml

    from judgebench_flows.flows.nightly import nightly_benchmarks
    from judgebench_flows.testing.fake_batches import FakeBatchServer
    from judgebench_flows.testing.fake_openai import FakeOpenAIServer

    repo = make_repo(work, data)
    servers = [FakeOpenAIServer(ANSWER, latency=args.latency) for _ in range(3)]
    batches = FakeBatchServer(ANSWER, turnaround=args.turnaround)
    try:
        for server in [*servers, batches]:
            server.start()
        path = work / "night.yaml"
        path.write_text(yaml.safe_dump(matrix([s.base_url for s in servers], batches.base_url, work, repo, args)))
        started = time.perf_counter()
        state = asyncio.run(nightly_benchmarks(str(path), retry_delay_seconds=0, return_state=True))
        wall = time.perf_counter() - started
        if not state.is_completed():
            raise SystemExit(f"the night did not complete: {state.message}")
        busiest = max(s.answered for s in servers)
        bound = max(busiest * args.latency / args.concurrency, args.turnaround)
        night = night_seconds(state)
        print(f"night: {night:.1f} s wall time (the flow run); bound {bound:.1f} s; {night / bound:.2f}x")
        print(f"with the process's start of the flow run: {wall:.1f} s; {wall / bound:.2f}x")
        for number, server in enumerate(servers):
            print(f"endpoint {number}: {server.answered} calls, at most {server.max_in_flight} in flight")
        lines = sum(batches.submitted_lines.values())
        print(f"batch cells: {batches.batches_created} batches, {lines} lines, {batches.requests} synchronous calls")
    finally:
        for server in [*servers, batches]:
            server.stop()
        prefect.terminate()
        try:
            prefect.wait(timeout=30)
        except subprocess.TimeoutExpired:  # a server that outlives SIGTERM is not left behind
            prefect.kill()
            prefect.wait()


if __name__ == "__main__":
    main()

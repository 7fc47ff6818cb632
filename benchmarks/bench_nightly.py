"""A night's wall time against its bound: the nightly matrix with cells side by side.

Bundled servers on loopback in this process (`FakeOpenAIServer`, `--latency` seconds a call; a
`FakeBatchServer` answering each batch `--turnaround` seconds after submission); the night runs in a
process of its own (as a worker runs a deployment's flow run) against a Prefect server started for the
benchmark (its own PREFECT_HOME). One judge (vanilla, one call per judgment), `--pairs` pairs of the
GPT-4o file in both orders, `--concurrency` calls in flight per endpoint, `cells_in_flight` left at its
default. Scenarios (`--scenario`):

- `issue31` (default): 3 synchronous endpoints with 2 models each (6 cells) and 2 batch cells;
- `team`: 4 endpoints x 6 models listed endpoint by endpoint, as a team lists its judges (issue 43:
  `--pairs 48`);
- `small`: the same 4 endpoints with 12 models each, 48 cells of `--pairs 16` (a smoke matrix).

The Prefect server is the package's default: the background server of the benchmark's own PREFECT_HOME
that a first run starts (`python -m judgebench_flows.cli.prefect_server`, so started with the settings
runtime/prefect_server.py gives it; its log in PREFECT_HOME/prefect-server.log), on SQLite, and the results
database a SQLite file (one person's machine). `--server-env NAME=VALUE` (repeatable) adds a setting to
that server's environment: Prefect's default of a setting the package changes, for an A/B. With
`--postgres postgresql://USER@HOST:PORT` both are databases of their own on that PostgreSQL server, created
for the run and dropped after it: a team's setup (docs/operations-deployments.md runs its Prefect server on
PostgreSQL in production).

The bound is what no schedule can beat: max(busiest endpoint's calls x latency / concurrency, slowest
batch turnaround). Printed: the night's flow run (start to end, as the Prefect server recorded it), the
process from its spawn to the night's summary (the flow run's end) and to its exit, each against the
bound; per endpoint the calls its server answered and the most it ever had in flight, which the script
asserts is never above `--concurrency`; the batch cells' batches and synchronous calls.

    python benchmarks/bench_nightly.py [--scenario issue31 --latency 0.5 --turnaround 25 --pairs 64 --concurrency 8]
    python benchmarks/bench_nightly.py --scenario team --pairs 48
    python benchmarks/bench_nightly.py --scenario small --pairs 16 [--postgres postgresql://postgres@127.0.0.1:5432]

Run by hand; this is a measurement, not a test. Figures: docs/performance.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_judging import GPT4O_FILE, add_data_option, benchmark_data, make_repo  # noqa: E402

ANSWER = "Output (a)"  # a vanilla verdict
# endpoints, synchronous models on each, batch cells
SCENARIOS = {"issue31": (3, 2, 2), "team": (4, 6, 0), "small": (4, 12, 0)}
NIGHT = """
import time
began = time.time()
import asyncio, json, sys
from judgebench_flows.flows.nightly import nightly_benchmarks
imported = time.time()
state = asyncio.run(nightly_benchmarks(sys.argv[1], retry_delay_seconds=0, return_state=True))
returned = time.time()
cells = [{k: o[k] for k in ("endpoint", "wait_s", "duration_s")} for o in state.result()] if state.is_completed() else []
print(json.dumps({"flow_run_id": str(state.state_details.flow_run_id), "completed": state.is_completed(),
                  "message": state.message, "cells": cells, "began": began, "imported": imported, "returned": returned}))
"""


def matrix(
    urls: list[str], batch_url: str, work: Path, repo: tuple[str, str], args: argparse.Namespace, db_url: str
) -> dict:
    _, per_endpoint, batch_cells = SCENARIOS[args.scenario]
    # endpoint by endpoint, as a team lists its models
    sync = [{"model": f"judge-{e}-{m}", "base_url": url} for e, url in enumerate(urls) for m in range(per_endpoint)]
    batch = [{"model": f"batch-judge-{m}", "base_url": batch_url, "batch": True} for m in range(batch_cells)]
    return {
        "judge_types": ["vanilla"],
        "models": sync + batch,
        "data_files": [GPT4O_FILE],
        "repo_url": repo[0],
        "ref": repo[1],
        "concurrency": args.concurrency,
        "db_url": db_url,
        "output_root": str(work / "nightly"),
        "max_samples": args.pairs,
        "options": {"cache_dir": str(work / "cache"), "bootstrap_resamples": 100, "batch_poll_seconds": 1.0},
    }


def endpoint_lines(flow_run_id: str) -> list[str]:
    """The night's summary artifact's endpoint table: calls, busy time, busy share, most in flight."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    text = "\n".join(a.data for a in artifacts if isinstance(a.data, str) and "busy share" in a.data)
    return [line for line in text.splitlines() if line.startswith("| openai ")]


def flow_run_times(flow_run_id: str) -> tuple[datetime, datetime]:
    """The night's flow run's start and end, as the Prefect server recorded them."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        run = client.read_flow_run(flow_run_id)
    return run.start_time, run.end_time


def start_background_server(env: dict[str, str]) -> str:
    """The package's background server of `env`'s PREFECT_HOME, started as a first run starts it (on a
    free port of the benchmark's choosing, so no other user's server is met); its API URL."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**env, "PREFECT_SERVER_API_HOST": "127.0.0.1", "PREFECT_SERVER_API_PORT": str(port)}
    env.pop("PREFECT_API_URL", None)
    done = subprocess.run(
        [sys.executable, "-m", "judgebench_flows.cli.prefect_server"], env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"the background Prefect server did not start: {done.stderr.strip()[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


def retryable_errors(log: Path) -> list[str]:
    """The database errors the server answered 503 for (its log, PREFECT_SERVER_LOG_RETRYABLE_ERRORS): per
    error, the error line and the statement's first words."""
    found, error = [], None
    for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
        if "Encountered retryable exception in request" in line:
            error = ""
        elif error == "" and "OperationalError)" in line:
            error = line.split("OperationalError)", 1)[1].strip()
        elif error is not None and line.startswith("[SQL: "):
            found.append(f"{error}: {' '.join(line[6:].split()[:4])}")
            error = None
    return found


def stop_background_server(env: dict[str, str]) -> None:
    """Prefect's `prefect server stop` of `env`'s PREFECT_HOME (the pid file the start wrote)."""
    subprocess.run(
        [sys.executable, "-m", "prefect", "server", "stop"], env=env, capture_output=True, text=True, timeout=120
    )


@contextlib.contextmanager
def databases(server: str | None, work: Path) -> Iterator[tuple[str | None, str]]:
    """(the Prefect server's database URL or None for its SQLite default, the results database's URL):
    with `server`, two PostgreSQL databases created for this run and dropped after it."""
    if server is None:
        yield None, f"sqlite:///{work}/night.db"
        return
    import sqlalchemy as sa

    base = server.split("://", 1)[1].rstrip("/")
    admin = sa.create_engine(f"postgresql+psycopg://{base}/postgres", isolation_level="AUTOCOMMIT")
    names = [f"bench_nightly_{os.getpid()}_{part}" for part in ("prefect", "results")]
    with admin.connect() as connection:
        for name in names:
            connection.exec_driver_sql(f"CREATE DATABASE {name}")
    try:
        yield f"postgresql+asyncpg://{base}/{names[0]}", f"postgresql+psycopg://{base}/{names[1]}"
    finally:
        with admin.connect() as connection:
            for name in names:
                connection.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.dispose()


class InFlight:
    """Each endpoint's calls in flight, sampled every 20 ms while the night runs: where its time went
    unused (before its first call, below its limit, after its last call)."""

    def __init__(self, servers: list) -> None:
        self.servers, self.samples, self._stop = servers, [], threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> InFlight:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.samples.append((time.time(), [s.in_flight for s in self.servers]))

    def idle_line(self, start: float, end: float, limit: int) -> str:
        """Seconds from the flow run's start to each endpoint's first call, under its limit between its
        first and last call, and from its last call to the flow run's end; medians over the endpoints."""
        before, under, after = [], [], []
        for k in range(len(self.servers)):
            busy = [(t, n[k]) for t, n in self.samples if start <= t <= end]
            calling = [t for t, n in busy if n > 0]
            if not calling:
                continue
            first, last = calling[0], calling[-1]
            before.append(first - start)
            after.append(end - last)
            between = [(t1 - t0, n) for (t0, n), (t1, _) in zip(busy, busy[1:], strict=False) if first <= t0 < last]
            under.append(sum(dt * (limit - n) / limit for dt, n in between))
        median = statistics.median
        return (
            f"endpoints' unused time (median): {median(before):.1f} s before the first call, "
            f"{median(under):.1f} s of calls under the limit between, {median(after):.1f} s after the last call"
        )


def run_night(path: Path, env: dict[str, str], profile: str | None, log: str | None) -> tuple[dict, float, float]:
    """The night in a process of its own: what it printed, its spawn time (epoch) and its exit time.
    `profile`: py-spy samples the process (CPU only, every thread) into that file, as collapsed stacks."""
    command = [sys.executable, "-c", NIGHT, str(path)]
    if profile:
        command = ["py-spy", "record", "--format", "raw", "-r", "50", "-t", "-o", profile, "--", *command]
    spawned = time.time()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    exited = time.time()
    if log:
        Path(log).write_text(done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"the night's process failed ({done.returncode}): {done.stderr[-2000:]}")
    last = next(line for line in reversed(done.stdout.splitlines()) if line.startswith("{"))
    return json.loads(last), spawned, exited


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="issue31")
    parser.add_argument("--latency", type=float, default=0.5)
    parser.add_argument("--turnaround", type=float, default=25.0)
    parser.add_argument("--pairs", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--profile", metavar="FILE", help="sample the night's process with py-spy into FILE")
    parser.add_argument("--log", metavar="FILE", help="the night's log lines (Prefect's, at INFO) into FILE")
    parser.add_argument(
        "--postgres", metavar="URL", help="the Prefect server's and the results' databases on this PostgreSQL server"
    )
    parser.add_argument(
        "--server-env",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        help="a setting in the background Prefect server's environment (repeatable)",
    )
    add_data_option(parser)
    args = parser.parse_args()
    data = benchmark_data(args.data)  # before anything starts: no data, one line and exit 2

    work = Path(tempfile.mkdtemp(prefix="bench-nightly-"))
    with databases(args.postgres, work) as (prefect_db, results_db):
        measure(args, data, work, prefect_db, results_db)


def measure(args: argparse.Namespace, data: Path, work: Path, prefect_db: str | None, results_db: str) -> None:
    """Start the Prefect server and the endpoints, run the night, print its figures."""
    env = {**os.environ, "PREFECT_HOME": str(work / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    if prefect_db:
        env["PREFECT_API_DATABASE_CONNECTION_URL"] = prefect_db
    # each 503 the server answers (a retryable database error) logged with its statement, counted below
    server_env = {**env, "PREFECT_SERVER_LOG_RETRYABLE_ERRORS": "true"}
    for setting in args.server_env:
        name, _, value = setting.partition("=")
        server_env[name] = value
    api_url = start_background_server(server_env)
    env.update(
        PREFECT_API_URL=api_url,
        PREFECT_LOCAL_STORAGE_PATH=str(work / "storage"),
        PREFECT_LOGGING_LEVEL="INFO" if args.log else "WARNING",
        OPENAI_API_KEY="sk-bench",
    )
    os.environ.update(PREFECT_HOME=env["PREFECT_HOME"], PREFECT_API_URL=api_url)
    import yaml

    from judgebench_flows.testing.fake_batches import FakeBatchServer
    from judgebench_flows.testing.fake_openai import FakeOpenAIServer

    repo = make_repo(work, data)
    endpoints, _, batch_cells = SCENARIOS[args.scenario]
    servers = [FakeOpenAIServer(ANSWER, latency=args.latency) for _ in range(endpoints)]
    batches = FakeBatchServer(ANSWER, turnaround=args.turnaround)
    try:
        for server in [*servers, batches]:
            server.start()
        path = work / "night.yaml"
        path.write_text(
            yaml.safe_dump(matrix([s.base_url for s in servers], batches.base_url, work, repo, args, results_db))
        )
        with InFlight(servers) as sampled:
            night, spawned, exited = run_night(path, env, args.profile, args.log)
        if not night["completed"]:
            raise SystemExit(f"the night did not complete: {night['message']}")
        busiest = max(s.answered for s in servers)
        bound = max(busiest * args.latency / args.concurrency, args.turnaround if batch_cells else 0.0)
        start, end = flow_run_times(night["flow_run_id"])
        flow_s, to_summary, to_exit = (end - start).total_seconds(), end.timestamp() - spawned, exited - spawned
        where = "PostgreSQL" if prefect_db else "SQLite"
        print(
            f"scenario {args.scenario}: {len(servers)} endpoints, Prefect server and results on {where},"
            f" load average {os.getloadavg()[0]:.1f} now; server settings added: {' '.join(args.server_env) or 'none'}"
        )
        print(f"night: {flow_s:.1f} s wall time (the flow run); bound {bound:.1f} s; {flow_s / bound:.2f}x")
        print(f"process spawn to the night's summary: {to_summary:.1f} s; {to_summary / bound:.2f}x")
        print(f"process spawn to its exit: {to_exit:.1f} s; {to_exit / bound:.2f}x")
        phases = {
            "interpreter": night["began"] - spawned,
            "imports": night["imported"] - night["began"],
            "to the flow run's start": start.timestamp() - night["imported"],
            "flow run": flow_s,
            "to the flow's return": night["returned"] - end.timestamp(),
            "to exit": exited - night["returned"],
        }
        print("process phases: " + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in phases.items()))
        errors = retryable_errors(work / "prefect" / "prefect-server.log")
        print(
            f"server: {len(errors)} answers 503 (retryable database errors), log {work / 'prefect'}/prefect-server.log"
        )
        for what in sorted(set(errors)):
            print(f"  {errors.count(what)} x {what}")
        for number, server in enumerate(servers):
            print(f"endpoint {number}: {server.answered} calls, at most {server.max_in_flight} in flight")
        print(sampled.idle_line(start.timestamp(), end.timestamp(), args.concurrency))
        cells = night["cells"]
        mean = sum(c["duration_s"] for c in cells) / len(cells)
        print(
            f"cells: {len(cells)}, each {mean:.1f} s on average from its place to its end, the longest wait {max(c['wait_s'] for c in cells):.1f} s"
        )
        print("\n".join(endpoint_lines(night["flow_run_id"])))
        over = [n for n, s in enumerate(servers) if s.max_in_flight > args.concurrency]
        assert not over, f"endpoints {over} had more than {args.concurrency} calls in flight"
        if batch_cells:
            lines = sum(batches.submitted_lines.values())
            print(
                f"batch cells: {batches.batches_created} batches, {lines} lines, {batches.requests} synchronous calls"
            )
    finally:
        for server in [*servers, batches]:
            server.stop()
        stop_background_server(env)


if __name__ == "__main__":
    main()

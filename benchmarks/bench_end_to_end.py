"""Whole-process wall time: `judgebench run` against a run_judge.py-shaped script, same endpoint and C.

Both are timed as users start them, from the shell to exit, on the full GPT-4o file (350 pairs, both
orders, 700 calls) against the bundled endpoint with a fixed latency L. `judgebench run` clones a git copy
of ../shared/judgebench (pinned commit, clone cache warmed by a 2-pair run, as on any machine that ran it
before), and is timed twice: with no Prefect server (it boots a temporary one) and with one running
(PREFECT_API_URL, as in production). Each timed run starts from an empty results database and empty
Prefect result storage, so every call is paid.

    python benchmarks/bench_end_to_end.py --latency 1.0 --concurrency 32 --repeat 3 \
        --reference-python /path/to/venv-with-judgebench-requirements/bin/python

The stand-in imports what run_judge.py imports at start when those libraries are installed; give it an
interpreter with JudgeBench's requirements.txt (--reference-python) for a like-for-like start-up, or it
runs under this one and starts faster than run_judge.py would (it says which imports it skipped).

Small runs (`--small N`): the fixed cost of a run, which dominates when a user iterates with a few pairs.
The first N pairs of the file are judged by the stand-in and by `judgebench run --data-path` (no clone),
ours timed as a user's first run in a fresh PREFECT_HOME (it boots the temporary server) and as later
runs that attach to the server the first one kept; then a fully cached re-run of the whole 350-pair file
(same database and result storage as a first full run, nothing paid).

    python benchmarks/bench_end_to_end.py --small 10 --latency 0.2 --concurrency 32 --repeat 3

Run by hand; this is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_judging import GPT4O_FILE, make_repo, start_server  # noqa: E402

HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def timed(command: list[str], env: dict[str, str], cwd: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{command[0]} exited {done.returncode}:\n{done.stderr[-3000:]}")
    for line in done.stdout.splitlines():
        if line.startswith("not installed"):
            print(f"{command[0]}: {line}")
    return wall


def start_prefect_server(env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/api"
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=1):
                return server, url
        except OSError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit("the Prefect server did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--reference-python", action="append", help="interpreter for the run_judge.py stand-in (repeatable)"
    )
    parser.add_argument("--small", type=int, help="small-run mode: judge the first N pairs (see above)")
    args = parser.parse_args()
    if args.small:
        small_runs(args)
        return

    workdir = Path(tempfile.mkdtemp(prefix="jb-e2e-"))
    port = free_port()
    endpoint = start_server(args.latency, port)
    base_url = f"http://127.0.0.1:{port}/v1"
    env = {
        **os.environ,
        "OPENAI_API_KEY": "bench-key",
        "PREFECT_HOME": str(workdir / "prefect-home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "JUDGEBENCH_SERVER_KEEPALIVE": "0",
    }  # each run boots its own
    env.pop("PREFECT_API_URL", None)
    prefect_server = None
    try:
        url, sha = make_repo(workdir)
        pairs_file = workdir / "JudgeBench" / "data" / GPT4O_FILE
        judgebench = [
            sys.executable,
            "-m",
            "judgebench_flows.cli.main",
            "run",
            "--judge-type",
            "arena_hard",
            "--model",
            "bench",
            "--repo-url",
            url,
            "--ref",
            sha,
            "--data-file",
            GPT4O_FILE,
            "--base-url",
            base_url,
            "--concurrency",
            str(args.concurrency),
            "--cache-dir",
            str(workdir / "clones"),
            "--no-progress",
        ]

        def ours(name: str, extra_env: dict[str, str]) -> float:
            run = workdir / f"{name}-{time.monotonic_ns()}"
            return timed(
                judgebench
                + [
                    "--result-path",
                    str(run / "results.json"),
                    "--output-dir",
                    str(run / "out"),
                    "--db-url",
                    f"sqlite:///{run}/results.db",
                ],
                {**env, **extra_env, "PREFECT_LOCAL_STORAGE_PATH": str(run / "prefect-results")},
                workdir,
            )

        # Warm-up: the clone cache and Prefect's own database (created and migrated on first use).
        timed(
            judgebench
            + [
                "--max-samples",
                "2",
                "--result-path",
                str(workdir / "w.json"),
                "--output-dir",
                str(workdir / "w"),
                "--db-url",
                f"sqlite:///{workdir}/w.db",
            ],
            env,
            workdir,
        )
        references = {
            f"run_judge.py stand-in ({python})": [
                python,
                str(HERE / "reference_run_judge.py"),
                "--pairs",
                str(pairs_file),
                "--concurrency_limit",
                str(args.concurrency),
                "--base-url",
                base_url,
                "--output",
                str(workdir / "ref.jsonl"),
            ]
            for python in args.reference_python or [sys.executable]
        }
        rows: dict[str, list[float]] = {name: [] for name in references}
        rows["judgebench run, temporary Prefect server"] = []
        rows["judgebench run, Prefect server running"] = []
        for _ in range(args.repeat):
            for name, reference in references.items():
                rows[name].append(timed(reference, env, workdir))
            rows["judgebench run, temporary Prefect server"].append(ours("temporary", {}))
        prefect_server, api_url = start_prefect_server(env)
        for _ in range(args.repeat):
            rows["judgebench run, Prefect server running"].append(ours("running", {"PREFECT_API_URL": api_url}))

        bound = 700 * args.latency / args.concurrency
        print(
            f"700 calls, latency {args.latency} s, concurrency {args.concurrency}: judging alone takes at least {bound:.1f} s"
        )
        print("wall time, median of runs (all runs)")
        for name, walls in rows.items():
            print(f"{name}\n    {statistics.median(walls):7.2f} s  ({', '.join(f'{w:.2f}' for w in walls)})")
    finally:
        if prefect_server is not None:
            prefect_server.terminate()
            prefect_server.wait(timeout=30)
        endpoint.terminate()
        endpoint.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


def small_runs(args: argparse.Namespace) -> None:
    """Fixed cost: N pairs, ours (first run and runs on a kept server) against the stand-in; cached re-run."""
    workdir = Path(tempfile.mkdtemp(prefix="jb-small-"))
    port = free_port()
    endpoint = start_server(args.latency, port)
    base_url = f"http://127.0.0.1:{port}/v1"
    env = {
        **os.environ,
        "OPENAI_API_KEY": "bench-key",
        "PREFECT_HOME": str(workdir / "prefect-home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "JUDGEBENCH_SERVER_KEEPALIVE": "600",
    }
    env.pop("PREFECT_API_URL", None)
    try:
        full = HERE.parent.parent / "shared" / "judgebench" / "data" / GPT4O_FILE
        small = workdir / "small.jsonl"
        small.write_text("".join(full.read_text().splitlines(keepends=True)[: args.small]))

        def ours(pairs: Path, run: Path, *extra: str) -> float:
            return timed(
                [
                    sys.executable,
                    "-m",
                    "judgebench_flows.cli.main",
                    "run",
                    "--model",
                    "bench",
                    "--data-path",
                    str(pairs),
                    "--base-url",
                    base_url,
                    "--concurrency",
                    str(args.concurrency),
                    "--no-progress",
                    "--result-path",
                    str(run / "results.json"),
                    "--output-dir",
                    str(run / "out"),
                    "--db-url",
                    f"sqlite:///{run}/results.db",
                    *extra,
                ],
                {**env, "PREFECT_LOCAL_STORAGE_PATH": str(run / "prefect-results")},
                workdir,
            )

        def fresh() -> Path:
            return workdir / f"run-{time.monotonic_ns()}"

        reference = [
            (args.reference_python or [sys.executable])[0],
            str(HERE / "reference_run_judge.py"),
            "--pairs",
            str(small),
            "--concurrency_limit",
            str(args.concurrency),
            "--base-url",
            base_url,
            "--output",
            str(workdir / "ref.jsonl"),
        ]
        rows: dict[str, list[float]] = {
            "run_judge.py stand-in": [],
            "judgebench run, first run (boots the server)": [],
            "judgebench run, server kept by an earlier run": [],
        }
        load_at_start = os.getloadavg()[0]  # the machine is shared: figures mean little without it
        rows["judgebench run, first run (boots the server)"].append(ours(small, fresh()))
        for _ in range(args.repeat):
            rows["run_judge.py stand-in"].append(timed(reference, env, workdir))
            rows["judgebench run, server kept by an earlier run"].append(ours(small, fresh()))
        cached = fresh()
        ours(full, cached)
        rows["judgebench run, 350 pairs fully cached (re-run)"] = [ours(full, cached) for _ in range(args.repeat)]
        print(
            f"{args.small} pairs, latency {args.latency} s, concurrency {args.concurrency}; wall time, median (all runs); "
            f"load average at the start {load_at_start:.1f}, at the end {os.getloadavg()[0]:.1f}"
        )
        for name, walls in rows.items():
            print(f"{name}\n    {statistics.median(walls):7.2f} s  ({', '.join(f'{w:.2f}' for w in walls)})")
        ratio = statistics.median(rows["judgebench run, server kept by an earlier run"]) / statistics.median(
            rows["run_judge.py stand-in"]
        )
        print(f"ratio, kept server / stand-in: {ratio:.2f}")
    finally:
        record_dir = workdir / "prefect-home" / "judgebench-server"
        for record in record_dir.glob("*.json"):  # stop the server the runs kept
            import json
            import signal

            try:
                os.kill(json.loads(record.read_text())["supervisor_pid"], signal.SIGTERM)
            except (OSError, ValueError, KeyError):
                pass
        endpoint.terminate()
        endpoint.wait(timeout=10)
        time.sleep(1)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()

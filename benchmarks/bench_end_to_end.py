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
ours timed as a user's first run in a fresh PREFECT_HOME (it boots the temporary server), as later runs
that attach to the server the first one kept, started cold (JUDGEBENCH_PRELOAD_KEEPALIVE=0) and forked
from the preloaded process a run leaves behind (cli/preload.py); then a fully cached re-run of the whole
350-pair file (same database and result storage as a first full run, nothing paid), both ways.

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

from judgebench_flows.cli import preload  # noqa: E402

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


JUDGEBENCH_RUN = [sys.executable, "-m", "judgebench_flows.cli.main", "run"]


def bench_setup(args: argparse.Namespace, prefix: str, keepalive: str) -> tuple[Path, subprocess.Popen, str, dict]:
    """A work folder, the bundled endpoint (latency L) and its base URL, and the environment every run gets:
    a PREFECT_HOME of its own, no PREFECT_API_URL, the temporary server kept `keepalive` seconds."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    port = free_port()
    endpoint = start_server(args.latency, port)
    env = {
        **os.environ,
        "OPENAI_API_KEY": "bench-key",
        "PREFECT_HOME": str(workdir / "prefect-home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "JUDGEBENCH_SERVER_KEEPALIVE": keepalive,
        "JUDGEBENCH_PRELOAD_KEEPALIVE": "0",  # every run starts cold unless a row says otherwise
    }
    env.pop("PREFECT_API_URL", None)
    return workdir, endpoint, f"http://127.0.0.1:{port}/v1", env


def reference_command(python: str, pairs: Path, concurrency: int, base_url: str, output: Path) -> list[str]:
    """The run_judge.py stand-in on `pairs`."""
    return [
        python,
        str(HERE / "reference_run_judge.py"),
        "--pairs",
        str(pairs),
        "--concurrency_limit",
        str(concurrency),
        "--base-url",
        base_url,
        "--output",
        str(output),
    ]


def timed_run(command: list[str], run: Path, env: dict[str, str], cwd: Path) -> float:
    """`judgebench run` timed with all it writes (results, JSONL, database, Prefect results) under `run`."""
    return timed(
        [
            *command,
            "--result-path",
            str(run / "results.json"),
            "--output-dir",
            str(run / "out"),
            "--db-url",
            f"sqlite:///{run}/results.db",
        ],
        {**env, "PREFECT_LOCAL_STORAGE_PATH": str(run / "prefect-results")},
        cwd,
    )


def print_walls(rows: dict[str, list[float]]) -> None:
    for name, walls in rows.items():
        print(f"{name}\n    {statistics.median(walls):7.2f} s  ({', '.join(f'{w:.2f}' for w in walls)})")


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

    workdir, endpoint, base_url, env = bench_setup(args, "jb-e2e-", keepalive="0")  # each run boots its own
    prefect_server = None
    try:
        url, sha = make_repo(workdir)
        pairs_file = workdir / "JudgeBench" / "data" / GPT4O_FILE
        judgebench = [
            *JUDGEBENCH_RUN,
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
            return timed_run(judgebench, workdir / f"{name}-{time.monotonic_ns()}", {**env, **extra_env}, workdir)

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
            f"run_judge.py stand-in ({python})": reference_command(
                python, pairs_file, args.concurrency, base_url, workdir / "ref.jsonl"
            )
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
        print_walls(rows)
    finally:
        if prefect_server is not None:
            prefect_server.terminate()
            prefect_server.wait(timeout=30)
        endpoint.terminate()
        endpoint.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


def small_runs(args: argparse.Namespace) -> None:
    """Fixed cost: N pairs, ours (first run and runs on a kept server) against the stand-in; cached re-run."""
    workdir, endpoint, base_url, env = bench_setup(args, "jb-small-", keepalive="600")
    try:
        full = HERE.parent.parent / "shared" / "judgebench" / "data" / GPT4O_FILE
        small = workdir / "small.jsonl"
        small.write_text("".join(full.read_text().splitlines(keepends=True)[: args.small]))

        def ours(pairs: Path, run: Path, preloaded: bool = False) -> float:
            command = [*JUDGEBENCH_RUN, "--model", "bench", "--data-path", str(pairs), "--base-url", base_url]
            command += ["--concurrency", str(args.concurrency), "--no-progress"]
            return timed_run(
                command, run, {**env, "JUDGEBENCH_PRELOAD_KEEPALIVE": "600" if preloaded else "0"}, workdir
            )

        def fresh() -> Path:
            return workdir / f"run-{time.monotonic_ns()}"

        def preload_ready() -> None:
            """Wait until the process a run left behind serves (it imports for a few seconds)."""
            deadline = time.monotonic() + 300
            while not any(r.get("prefect_home") == env["PREFECT_HOME"] and r.get("ready") for r in preload.records()):
                if time.monotonic() > deadline:
                    raise SystemExit("no preloaded process started within 300 s")
                time.sleep(0.2)

        python = (args.reference_python or [sys.executable])[0]
        reference = reference_command(python, small, args.concurrency, base_url, workdir / "ref.jsonl")
        stand_in, kept, warm = (
            "run_judge.py stand-in",
            "judgebench run, server kept by an earlier run, started cold",
            "judgebench run, server kept, forked from the preloaded process",
        )
        rows: dict[str, list[float]] = {
            stand_in: [],
            "judgebench run, first run (boots the server)": [],
            kept: [],
            warm: [],
        }
        load_at_start = os.getloadavg()[0]  # the machine is shared: figures mean little without it
        rows["judgebench run, first run (boots the server)"].append(ours(small, fresh()))
        ours(small, fresh(), preloaded=True)  # leaves the preloaded process
        preload_ready()
        for _ in range(args.repeat):
            rows[stand_in].append(timed(reference, env, workdir))
            rows[kept].append(ours(small, fresh()))
            rows[warm].append(ours(small, fresh(), preloaded=True))
        cached = fresh()
        ours(full, cached)
        rows["judgebench run, 350 pairs fully cached (re-run), started cold"] = [
            ours(full, cached) for _ in range(args.repeat)
        ]
        rows["judgebench run, 350 pairs fully cached (re-run), preloaded"] = [
            ours(full, cached, preloaded=True) for _ in range(args.repeat)
        ]
        print(
            f"{args.small} pairs, latency {args.latency} s, concurrency {args.concurrency}; wall time, median (all runs); "
            f"load average at the start {load_at_start:.1f}, at the end {os.getloadavg()[0]:.1f}"
        )
        print_walls(rows)
        served = sum(r.get("served", 0) for r in preload.records() if r.get("prefect_home") == env["PREFECT_HOME"])
        timed_preloaded = len(rows[warm]) + args.repeat
        print(f"forked from a preloaded process: {served} of the {timed_preloaded} timed preloaded runs")
        for name in (kept, warm):
            ratio = statistics.median(rows[name]) / statistics.median(rows[stand_in])
            print(f"ratio, {name.removeprefix('judgebench run, ')} / stand-in: {ratio:.2f}")
    finally:
        preload.stop(prefect_home=env["PREFECT_HOME"])
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

"""Whole-process wall time: `judgebench run` against a run_judge.py-shaped script, same endpoint and C.

Both are timed as users start them, from the shell to exit, on the full GPT-4o file (350 pairs, both
orders, 700 calls) against the bundled endpoint with a fixed latency L. `judgebench run` clones a git copy
of the JudgeBench data (--data DIR, else $JUDGEBENCH_TEST_DATA, else ../shared/judgebench) (pinned commit, clone cache warmed by a 2-pair run, as on any machine that ran it
before), and is timed twice: with no Prefect server running (it starts Prefect's background server of
its PREFECT_HOME) and with one running (PREFECT_API_URL, as in production). Each timed run starts from an empty results database and empty
Prefect result storage, so every call is paid.

    python benchmarks/bench_end_to_end.py --latency 1.0 --concurrency 32 --repeat 3 \
        --reference-python /path/to/venv-with-judgebench-requirements/bin/python

The stand-in imports what run_judge.py imports at start when those libraries are installed; give it an
interpreter with JudgeBench's requirements.txt (--reference-python) for a like-for-like start-up, or it
runs under this one and starts faster than run_judge.py would (it says which imports it skipped).

Small runs (`--small N`): the fixed cost of a run, which dominates when a user iterates with a few pairs.
The first N pairs of the file are judged by the stand-in and by `judgebench run --data-path` (no clone),
ours timed as a user's first run in a fresh PREFECT_HOME (it starts Prefect's background server), and
as later runs that use the server the first one started; then a fully cached re-run of the whole
350-pair file (same database and result storage as a first full run, nothing paid) with the server up.
`--busy-first-runs N`: N fresh first runs (each a new PREFECT_HOME) beside two busy processes.

    python benchmarks/bench_end_to_end.py --small 10 --latency 0.2 --concurrency 32 --repeat 3

`--ours-arg=--no-head-start` times our runs without their head start (judging/head_start.py: the first
pairs judged while Prefect starts), for an A/B in the same hour.

Run by hand; this is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_judging import (  # noqa: E402
    GPT4O_FILE,
    add_data_option,
    benchmark_data,
    make_repo,
    start_prefect_server,
    start_server,
    stop,
)

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


JUDGEBENCH_RUN = [sys.executable, "-m", "judgebench_flows.cli.main", "run"]


def bench_setup(args: argparse.Namespace, prefix: str) -> tuple[Path, subprocess.Popen, str, dict]:
    """A work folder, the bundled endpoint (latency L) and its base URL, and the environment every run gets:
    a PREFECT_HOME of its own and a port for its background server, no PREFECT_API_URL."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    port = free_port()
    endpoint = start_server(args.latency, port)
    env = {
        **os.environ,
        "OPENAI_API_KEY": "bench-key",
        "PREFECT_HOME": str(workdir / "prefect-home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_API_PORT": str(free_port()),
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


PHASES: list[dict[str, float]] = []  # each timed run's wall time and its results' run.timings


def timed_run(command: list[str], run: Path, env: dict[str, str], cwd: Path) -> float:
    """`judgebench run` timed with all it writes (results, JSONL, database, Prefect results) under `run`;
    its phases (results.json's run.timings beside the wall time) kept in PHASES."""
    wall = timed(
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
    timings = json.loads((run / "results.json").read_text())["run"]["timings"]
    PHASES.append({"wall": wall, **{k: v for k, v in timings.items() if isinstance(v, (int, float))}})
    return wall


def print_phases(runs: list[dict[str, float]]) -> None:
    """Where our runs' time went, median over `runs`: the flow's phases up to judging and the rest of the
    process (start-up, Prefect's flow run, publishing, exit)."""
    if not runs:
        return
    names = ["fetch_s", "load_s", "judge_s"]  # publish_s is set after results.json is written: not in it
    median = {k: statistics.median(p.get(k, 0.0) for p in runs) for k in ["wall", *names]}
    outside = statistics.median(p["wall"] - sum(p.get(k, 0.0) for k in names) for p in runs)
    print(
        "judgebench run phases (median of its runs): "
        + ", ".join(f"{k.removesuffix('_s')} {median[k]:.2f} s" for k in names)
        + f", outside those {outside:.2f} s (start-up, Prefect's flow run, publishing, exit)"
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
    parser.add_argument("--busy-first-runs", type=int, help="N fresh first runs beside two busy processes")
    parser.add_argument(
        "--ours-arg",
        action="append",
        default=[],
        help="an argument added to every `judgebench run` (repeatable), e.g. --ours-arg=--no-head-start",
    )
    add_data_option(parser)
    args = parser.parse_args()
    args.data = benchmark_data(args.data)
    if args.small:
        small_runs(args)
        return
    if args.busy_first_runs:
        busy_first_runs(args)
        return

    workdir, endpoint, base_url, env = bench_setup(args, "jb-e2e-")
    prefect_server = None
    try:
        url, sha = make_repo(workdir, args.data)
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
            *args.ours_arg,
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
        rows["judgebench run, Prefect's background server (kept by the warm-up)"] = []
        rows["judgebench run, Prefect server running"] = []
        for _ in range(args.repeat):
            for name, reference in references.items():
                rows[name].append(timed(reference, env, workdir))
            rows["judgebench run, Prefect's background server (kept by the warm-up)"].append(ours("background", {}))
        prefect_server, api_url = start_prefect_server(env)
        for _ in range(args.repeat):
            rows["judgebench run, Prefect server running"].append(ours("running", {"PREFECT_API_URL": api_url}))

        bound = 700 * args.latency / args.concurrency
        print(
            f"700 calls, latency {args.latency} s, concurrency {args.concurrency}: judging alone takes at least {bound:.1f} s"
        )
        print("wall time, median of runs (all runs)")
        print_walls(rows)
        print_phases(PHASES[: args.repeat])  # the runs on the background server the warm-up started
    finally:
        if prefect_server is not None:
            stop(prefect_server)
        stop_background_server(env)
        stop(endpoint, timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


def stop_background_server(env: dict[str, str]) -> None:
    subprocess.run([sys.executable, "-m", "prefect", "server", "stop"], env=env, capture_output=True)


def small_runs(args: argparse.Namespace) -> None:
    """Fixed cost: N pairs, ours (first run and runs on the server it started) against the stand-in; a
    fully cached re-run of the 350-pair file with the server up."""
    workdir, endpoint, base_url, env = bench_setup(args, "jb-small-")
    try:
        full = args.data / "data" / GPT4O_FILE
        small = workdir / "small.jsonl"
        small.write_text("".join(full.read_text().splitlines(keepends=True)[: args.small]))

        def ours(pairs: Path, run: Path) -> float:
            command = [*JUDGEBENCH_RUN, "--model", "bench", "--data-path", str(pairs), "--base-url", base_url]
            command += ["--concurrency", str(args.concurrency), "--no-progress", *args.ours_arg]
            return timed_run(command, run, env, workdir)

        def fresh() -> Path:
            return workdir / f"run-{time.monotonic_ns()}"

        python = (args.reference_python or [sys.executable])[0]
        reference = reference_command(python, small, args.concurrency, base_url, workdir / "ref.jsonl")
        stand_in, first, kept = (
            "run_judge.py stand-in",
            "judgebench run, first run (starts Prefect's background server)",
            "judgebench run, later runs (the server is up)",
        )
        rows: dict[str, list[float]] = {stand_in: [], first: [], kept: []}
        load_at_start = os.getloadavg()[0]  # the machine is shared: figures mean little without it
        rows[first].append(ours(small, fresh()))
        for _ in range(args.repeat):
            rows[stand_in].append(timed(reference, env, workdir))
            rows[kept].append(ours(small, fresh()))
        cached = fresh()
        ours(full, cached)
        rows["judgebench run, 350 pairs fully cached (re-run), server up"] = [
            ours(full, cached) for _ in range(args.repeat)
        ]
        print(
            f"{args.small} pairs, latency {args.latency} s, concurrency {args.concurrency}; wall time, median (all runs); "
            f"load average at the start {load_at_start:.1f}, at the end {os.getloadavg()[0]:.1f}"
        )
        print_walls(rows)
        print_phases(PHASES[1 : 1 + args.repeat])  # the later runs
        ratio = statistics.median(rows[kept]) / statistics.median(rows[stand_in])
        print(f"ratio, later runs / stand-in: {ratio:.2f}")
    finally:
        stop_background_server(env)
        endpoint.terminate()
        endpoint.wait(timeout=10)
        time.sleep(1)
        shutil.rmtree(workdir, ignore_errors=True)


def busy_first_runs(args: argparse.Namespace) -> None:
    """N first runs, each in a fresh PREFECT_HOME (booting Prefect's server and creating its database),
    beside two processes that keep two cores busy: each must succeed."""
    workdir, endpoint, base_url, env = bench_setup(args, "jb-busy-")
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    walls = []
    try:
        full = args.data / "data" / GPT4O_FILE
        small = workdir / "small.jsonl"
        small.write_text("".join(full.read_text().splitlines(keepends=True)[:2]))
        for attempt in range(args.busy_first_runs):
            run_env = {
                **env,
                "PREFECT_HOME": str(workdir / f"home-{attempt}"),
                "PREFECT_SERVER_API_PORT": str(free_port()),
            }
            command = [*JUDGEBENCH_RUN, "--model", "bench", "--data-path", str(small), "--base-url", base_url]
            try:
                walls.append(timed_run([*command, "--no-progress"], workdir / f"run-{attempt}", run_env, workdir))
            finally:
                stop_background_server(run_env)
        print(f"{len(walls)} of {args.busy_first_runs} first runs beside two busy processes succeeded")
        print_walls({"judgebench run, first run, busy machine": walls})
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
        endpoint.terminate()
        endpoint.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()

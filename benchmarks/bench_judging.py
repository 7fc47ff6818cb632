"""How close does a run come to the endpoint's bound, and what does it cost us per judgment?

Starts the bundled OpenAI-compatible server in its own process with a fixed latency L, then runs the
JudgeBench flow in this process at concurrency C on the full GPT-4o file (700 calls) cloned from a git
copy of the JudgeBench data (--data DIR, else $JUDGEBENCH_TEST_DATA, else ../shared/judgebench), or on a synthetic file of --synthetic N pairs. Prints wall time, calls per
second, the bound C / L and our share of it, our CPU time per judgment (this process only: the endpoint
and the benchmark's own Prefect server, started before the clock, run elsewhere) next to what the openai client alone costs per call on
this machine, peak memory, and the wall time of a fully cached re-run.
With --reference it also times a loop shaped like JudgeBench's run_judge.py (a semaphore of C pairs, the
two orders of a pair one after the other) against the same endpoint, for the end-to-end comparison.

    python benchmarks/bench_judging.py --latency 1.0 --concurrency 32 --reference
    python benchmarks/bench_judging.py --latency 0 --concurrency 64 --synthetic 100000
    python benchmarks/bench_judging.py --latency 0 --concurrency 32 --synthetic 5000 --provider bedrock

With `--provider bedrock` the endpoint is the bundled Bedrock stand-in (`testing/fake_bedrock`, checking
every SigV4 signature) and the client line is our Bedrock wire alone (botocore's `converse` client in a
thread pool of C threads).

Run by hand; this is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BESIDE_REPO = ROOT.parent / "shared" / "judgebench"
DATA_ENV = "JUDGEBENCH_TEST_DATA"  # as the tests (tests/_benchmark_data.py)
GPT4O_FILE = "dataset=judgebench,response_model=gpt-4o-2024-05-13.jsonl"


def add_data_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data",
        metavar="DIR",
        default=None,
        help=f"a JudgeBench checkout (default: ${DATA_ENV}, else ../shared/judgebench beside the repository)",
    )


def benchmark_data(given: str | None) -> Path:
    """The JudgeBench checkout to benchmark on, found as the tests find it: --data, else $JUDGEBENCH_TEST_DATA,
    else ../shared/judgebench. Without its GPT-4o file: one line naming where it looked, exit 2."""
    chosen = given or os.environ.get(DATA_ENV) or str(BESIDE_REPO)
    path = Path(chosen).expanduser()
    if not (path / "data" / GPT4O_FILE).is_file():
        print(
            f"error: no JudgeBench data at {path} (data/{GPT4O_FILE} missing): pass --data DIR or set {DATA_ENV} "
            "to a clone of https://github.com/ScalerLab/JudgeBench",
            file=sys.stderr,
        )
        raise SystemExit(2)
    return path


BEDROCK_MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
BEDROCK_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "AKIABENCHMARK000001",
    "AWS_SECRET_ACCESS_KEY": "bench-secret",
    "AWS_REGION": "us-east-1",
}


def start_server(latency: float, port: int, provider: str = "openai") -> subprocess.Popen:
    server = "fake_bedrock" if provider == "bedrock" else "fake_openai"
    fault = ["--latency", str(latency)] if provider == "openai" else []
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            f"judgebench_flows.testing.{server}",
            "--port",
            str(port),
            *fault,
            "--answer",
            "My final verdict is [[A>B]]",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    process.stdout.readline()  # prints its base URL once it listens
    return process


def start_prefect_server(env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """`prefect server start` in the foreground on a free port, with `env` (its own PREFECT_HOME), its
    output kept off the benchmark's terminal; (the process, its API URL) once it answers."""
    import socket
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdin=subprocess.DEVNULL,
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


def stop(process: subprocess.Popen, timeout: float = 30.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def make_repo(workdir: Path, data: Path) -> tuple[str, str]:
    repo = workdir / "JudgeBench"
    shutil.copytree(data, repo, ignore=shutil.ignore_patterns(".git"))
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "b",
        "GIT_AUTHOR_EMAIL": "b@b",
        "GIT_COMMITTER_NAME": "b",
        "GIT_COMMITTER_EMAIL": "b@b",
    }
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "data"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True)
    sha = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()
    return f"file://{repo}", sha


def make_synthetic(path: Path, n_pairs: int, seed: int = 0) -> None:
    """JudgeBench-shaped pairs with short texts, written as a stream."""
    rng = random.Random(seed)
    sources = ["mmlu-pro-law", "livebench-math", "livebench-reasoning", "livecodebench"]
    with path.open("w") as handle:
        for i in range(n_pairs):
            handle.write(
                json.dumps(
                    {
                        "pair_id": f"synthetic-{i}",
                        "source": sources[i % 4],
                        "question": f"Question {i}: what is {i} + {i}?",
                        "response_A": f"The answer is {2 * i}.",
                        "response_B": f"The answer is {2 * i + 1}.",
                        "label": rng.choice(["A>B", "B>A"]),
                    }
                )
                + "\n"
            )


def run_flow(config) -> tuple[dict, float, float]:
    from judgebench_flows.flows.judgebench_flow import judgebench_flow

    cpu0, wall0 = time.process_time(), time.perf_counter()
    results = asyncio.run(judgebench_flow(config))
    return results, time.perf_counter() - wall0, time.process_time() - cpu0


def both_orders(pair: dict) -> list[str]:
    """What a judge is asked about a pair, in each order, without a judge's template."""
    return [
        f"{pair['question']}\n{a}\n{b}"
        for a, b in ((pair["response_A"], pair["response_B"]), (pair["response_B"], pair["response_A"]))
    ]


async def ask(client, content: str) -> None:
    await client.chat.completions.create(
        model="bench", temperature=0, max_tokens=4096, messages=[{"role": "user", "content": content}]
    )


async def reference_loop(base_url: str, data_path: str, concurrency: int) -> float:
    """The shape of run_judge.py's judging loop: C pairs at a time, the two orders in sequence."""
    import openai

    pairs = [json.loads(line) for line in open(data_path)]
    client = openai.AsyncOpenAI(api_key="bench", base_url=base_url, max_retries=0)
    semaphore = asyncio.Semaphore(concurrency)

    async def judge(pair: dict) -> None:
        async with semaphore:
            for content in both_orders(pair):
                await ask(client, content)

    started = time.perf_counter()
    await asyncio.gather(*(judge(p) for p in pairs))
    await client.close()
    return time.perf_counter() - started


def contents_of(data_path: str, calls: int) -> list[str]:
    import itertools

    with open(data_path) as handle:
        pairs = (json.loads(line) for line in itertools.islice(handle, calls))
        return [content for pair in pairs for content in both_orders(pair)][:calls]


async def bedrock_wire_alone(base_url: str, data_path: str, concurrency: int, calls: int) -> float:
    """CPU seconds per call of our Bedrock wire by itself (botocore's client in a pool of threads)."""
    from judgebench_flows.calls.bedrock_api import BedrockTransport

    contents = contents_of(data_path, calls)
    wire = BedrockTransport(base_url, BEDROCK_MODEL, "EMPTY", 60.0, concurrency)
    semaphore = asyncio.Semaphore(concurrency)

    async def call(content: str) -> None:
        async with semaphore:
            wire.answer(await wire.post([{"role": "user", "content": content}], {"temperature": 0, "max_tokens": 4096}))

    cpu = time.process_time()
    await asyncio.gather(*(call(c) for c in contents))
    cpu = time.process_time() - cpu
    await wire.aclose()
    return cpu / len(contents)


async def openai_alone(base_url: str, data_path: str, concurrency: int, calls: int) -> float:
    """CPU seconds per call of the official client by itself, at the same concurrency against the same
    endpoint, sending the same pairs' texts (`both_orders`): the floor under any tool built on it,
    measured on this machine in this process, so that what the run adds beyond it can be told apart from
    what the client costs."""
    import itertools

    import openai

    with open(data_path) as handle:
        contents = [content for line in itertools.islice(handle, calls) for content in both_orders(json.loads(line))][
            :calls
        ]
    client = openai.AsyncOpenAI(api_key="bench", base_url=base_url, max_retries=0)
    semaphore = asyncio.Semaphore(concurrency)

    async def call(content: str) -> None:
        async with semaphore:
            await ask(client, content)

    cpu = time.process_time()
    await asyncio.gather(*(call(c) for c in contents))
    cpu = time.process_time() - cpu
    await client.close()
    return cpu / len(contents)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--shard-size", type=int, default=50)
    parser.add_argument("--synthetic", type=int, default=0, help="judge N synthetic pairs from a local file instead")
    parser.add_argument("--port", type=int, default=18765)
    parser.add_argument("--reference", action="store_true", help="also time a run_judge.py-shaped loop")
    parser.add_argument("--provider", choices=("openai", "bedrock"), default="openai", help="the endpoint's API")
    add_data_option(parser)
    args = parser.parse_args()
    data = None if args.synthetic else benchmark_data(args.data)

    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ["OPENAI_API_KEY"] = "bench-key"
    if args.provider == "bedrock":
        if args.latency or args.reference:
            parser.error("--provider bedrock: its stand-in answers at once (--latency 0), and has no reference loop")
        os.environ.update(BEDROCK_CREDENTIALS)
    workdir = Path(tempfile.mkdtemp(prefix="jb-bench-"))
    # Shard results of an earlier benchmark (same synthetic data, same judge) must not answer this one.
    os.environ["PREFECT_LOCAL_STORAGE_PATH"] = str(workdir / "prefect-results")
    # A Prefect server of the benchmark's own, as a run has one (`judgebench run` uses a running server,
    # never Prefect's ephemeral one): started before the clock and stopped at the end, its output off this
    # terminal. Without it Prefect would start an ephemeral server in this process, give up on it after
    # 20 s on a busy machine, and print its services' shutdown errors at exit.
    os.environ["PREFECT_HOME"] = str(workdir / "prefect-home")
    prefect, os.environ["PREFECT_API_URL"] = start_prefect_server(dict(os.environ))
    from judgebench_flows.core.config import RunConfig

    server = start_server(args.latency, args.port, args.provider)
    bedrock = args.provider == "bedrock"
    base_url = f"http://127.0.0.1:{args.port}" + ("" if bedrock else "/v1")
    try:
        common = dict(
            model=BEDROCK_MODEL if bedrock else "bench-judge",
            provider=args.provider,
            base_url=base_url,
            concurrency=args.concurrency,
            shard_size=args.shard_size,
            result_path=str(workdir / "results.json"),
            output_dir=str(workdir / "run"),
            db_url=f"sqlite:///{workdir}/bench.db",
            cache_dir=str(workdir / "cache"),
            report=False,
            bootstrap_resamples=200,
        )
        if args.synthetic:
            data_path = workdir / "synthetic.jsonl"
            make_synthetic(data_path, args.synthetic)
            config = RunConfig(data_path=str(data_path), **common)
        else:
            assert data is not None
            url, sha = make_repo(workdir, data)
            data_path = workdir / "JudgeBench" / "data" / GPT4O_FILE
            config = RunConfig(repo_url=url, ref=sha, **common)

        results, wall, cpu = run_flow(config)
        calls = results["usage"]["calls"]
        judgments = calls
        timings = results["run"].get("timings", {})
        judge_s = timings.get("judge_s", wall)
        bound = args.concurrency / args.latency if args.latency else float("inf")
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        if results["usage"]["cached_calls"]:
            print(f"warning: {results['usage']['cached_calls']} of {calls} calls were answered from a cache")
        print(
            f"pairs {results['dataset']['n_pairs']}, calls {calls}, latency {args.latency}s, concurrency {args.concurrency}"
        )
        print(f"end-to-end wall time      {wall:8.2f} s   (phases: {json.dumps(timings)})")
        print(f"judging phase             {judge_s:8.2f} s   {calls / judge_s:8.1f} calls/s")
        if args.latency:
            ideal = calls / bound
            print(
                f"bound C/L                 {bound:8.1f} calls/s -> ideal judging {ideal:.2f} s; share of bound {ideal / judge_s:6.1%}"
            )
        print(f"our CPU per judgment      {1000 * cpu / judgments:8.3f} ms  (whole run, this process)")
        sample = min(calls, 20_000)
        judging_cpu = timings.get("judge_cpu_ms_per_judgment", 1000 * cpu / judgments) / 1000
        if bedrock:
            client_cpu = asyncio.run(bedrock_wire_alone(base_url, str(data_path), args.concurrency, sample))
            print(
                f"bedrock wire alone        {1000 * client_cpu:8.3f} ms  CPU per call (botocore's client, in threads)"
            )
        else:
            client_cpu = asyncio.run(openai_alone(base_url, str(data_path), args.concurrency, sample))
            print(
                f"openai client alone       {1000 * client_cpu:8.3f} ms  CPU per call, same endpoint, concurrency and pairs"
            )
        print(f"ours beyond the client    {1000 * (judging_cpu - client_cpu):8.3f} ms  CPU per judgment, judging phase")
        print(f"peak memory               {peak_mb:8.1f} MiB")

        _, cached_wall, _ = run_flow(config)
        print(f"fully cached re-run       {cached_wall:8.2f} s")

        if args.reference:
            ref = asyncio.run(reference_loop(base_url, str(data_path), args.concurrency))
            print(f"run_judge.py-shaped loop  {ref:8.2f} s   (judging only; no clone, cache, metrics or publishing)")
    finally:
        stop(server, timeout=10)
        stop(prefect)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()

"""What does the Prefect global concurrency limit cost per call, and does it keep the endpoint busy?

Starts a temporary Prefect server (SQLite, like `prefect server start` out of the box) and the bundled
OpenAI-compatible server in this process, then measures with the real `ChatCaller`:

1. sequential calls at zero endpoint latency, in-process semaphore only vs. with the global limit: the
   difference is the per-call overhead (two Prefect API requests: take a lease, give it back);
2. WORKERS processes, each a caller with --concurrency C, sharing one global limit of C, against an
   endpoint with latency L: wall time vs. the bound calls * L / C, and the endpoint's peak calls in flight.

    python benchmarks/bench_global_limit.py --calls 200 --latency 0.05 --concurrency 4 --workers 2
    python benchmarks/bench_global_limit.py --api-url http://127.0.0.1:4200/api   # a server on PostgreSQL

Run by hand; this is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import statistics
import tempfile
import time

from judgebench_flows.testing.fake_openai import FakeOpenAIServer


def caller(base_url: str, concurrency: int, global_limit: str | None):
    from judgebench_flows.calls.llm import ChatCaller

    return ChatCaller(
        base_url=base_url, model="judge", api_key="sk-bench", concurrency=concurrency, global_limit=global_limit
    )


async def sequential(base_url: str, calls: int, global_limit: str | None) -> float:
    """Seconds per call, one call at a time (distinct prompts: no cache in play), with the Prefect client
    context a shard task runs in (so the API client and its connections are reused, as in a run)."""
    from prefect.context import AsyncClientContext

    async with AsyncClientContext.get_or_create():
        chat = caller(base_url, 1, global_limit)
        for i in range(5):
            await chat._call([{"role": "user", "content": f"warm {i}"}], {})
        started = time.perf_counter()
        for i in range(calls):
            await chat._call([{"role": "user", "content": f"sequential {i}"}], {})
        elapsed = time.perf_counter() - started
        await chat.aclose()
    return elapsed / calls


barrier = None


def init_worker(shared_barrier, api_url: str) -> None:
    global barrier
    barrier = shared_barrier
    os.environ["PREFECT_API_URL"] = api_url


def worker(base_url: str, calls: int, concurrency: int, global_limit: str, worker_id: int) -> dict:

    async def run() -> dict:
        from prefect.context import AsyncClientContext

        async with AsyncClientContext.get_or_create():
            chat = caller(base_url, concurrency, global_limit)
            await chat._call([{"role": "user", "content": f"w{worker_id} warm"}], {})
            barrier.wait()
            started = time.time()
            await asyncio.gather(
                *(chat._call([{"role": "user", "content": f"w{worker_id} {i}"}], {}) for i in range(calls))
            )
            finished = time.time()
            await chat.aclose()
        return {"started": started, "finished": finished, **vars(chat.limits.global_slots.stats)}

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--api-url", help="an existing Prefect server (default: start a temporary one on SQLite)")
    args = parser.parse_args()

    os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="bench-prefect-"))
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    if args.api_url:  # before Prefect reads its settings
        os.environ["PREFECT_API_URL"] = args.api_url
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    from judgebench_flows.calls.global_limits import ensure_limit

    prefect = contextlib.nullcontext() if args.api_url else prefect_test_harness(server_startup_timeout=120)
    with prefect, FakeOpenAIServer("[[A>B]]") as server:
        api_url = PREFECT_API_URL.value()
        asyncio.run(ensure_limit("bench-sequential", 1))
        local = asyncio.run(sequential(server.base_url, args.calls, None))
        shared = asyncio.run(sequential(server.base_url, args.calls, "bench-sequential"))
        print(
            f"sequential, zero latency: {1000 * local:.2f} ms/call local, {1000 * shared:.2f} ms/call with the global limit "
            f"(+{1000 * (shared - local):.1f} ms)"
        )

        asyncio.run(ensure_limit("bench-shared", args.concurrency))
        server.configure(latency=args.latency)
        server.reset_counters()
        per_worker = args.calls // args.workers
        context = multiprocessing.get_context("spawn")
        with context.Pool(
            args.workers, initializer=init_worker, initargs=(context.Manager().Barrier(args.workers), api_url)
        ) as pool:
            stats = pool.starmap(
                worker,
                [(server.base_url, per_worker, args.concurrency, "bench-shared", w) for w in range(args.workers)],
            )
        elapsed = max(s["finished"] for s in stats) - min(s["started"] for s in stats)
        total = per_worker * args.workers
        bound = total * args.latency / args.concurrency
        print(
            f"{args.workers} workers x {per_worker} calls, latency {args.latency}s, global limit {args.concurrency}: "
            f"{elapsed:.2f}s (bound {bound:.2f}s: {100 * bound / elapsed:.0f}% of it); peak in flight {server.max_in_flight}"
        )
        taken = [s["acquired"] for s in stats]
        print(
            f"leases from the server: {sum(taken)} for {total} calls (the rest passed on inside a worker); "
            f"denied polls {sum(s['denied'] for s in stats)}; median per worker {statistics.median(taken)}"
        )


if __name__ == "__main__":
    main()

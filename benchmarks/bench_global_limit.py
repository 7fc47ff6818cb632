"""What do the endpoint's slots in the Prefect server cost, and do holders keep the limit busy?

Starts a temporary Prefect server (SQLite, like `prefect server start` out of the box), then measures
`global_limits.SlotLeases`, the way a run holds slots (one group per shard, taken and given back by the
run's process):

1. one group at a time: the cost of taking a group of slots and giving it back (API requests: take,
   note the lease, renew-check, release, forget the note), per group and per call for shards of
   `--calls-per-shard` calls;
2. WORKERS threads (the run's process sending shards to that many Dask worker threads, or separate
   holders) each holding groups of `--concurrency // WORKERS` slots of a limit of `--concurrency` for
   `--hold` seconds: wall time against the bound, and how busy the limit was kept.

    python benchmarks/bench_global_limit.py
    python benchmarks/bench_global_limit.py --api-url http://127.0.0.1:4200/api   # a server on PostgreSQL

Run by hand; this is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
import threading
import time
import uuid


def one_at_a_time(name: str, groups: int, slots: int) -> tuple[float, int]:
    """Seconds per group (take, give back) and API requests per group."""
    from judgebench_flows.calls.global_limits import SlotLeases

    keeper = SlotLeases(name)
    keeper.give_back(keeper.take(slots))  # warm: the client and its connection
    keeper.requests = 0
    started = time.perf_counter()
    for _ in range(groups):
        keeper.give_back(keeper.take(slots))
    elapsed = time.perf_counter() - started
    keeper.close()
    return elapsed / groups, keeper.requests // groups


def holders(name: str, workers: int, groups: int, slots: int, hold: float) -> float:
    """Wall seconds for `workers` threads to hold `groups` groups each, `hold` seconds a group."""
    from judgebench_flows.calls.global_limits import SlotLeases

    keeper = SlotLeases(name)  # one per process, as a run has
    go = threading.Barrier(workers)

    def work() -> None:
        go.wait()
        for _ in range(groups):
            handle = keeper.take(slots)
            time.sleep(hold)
            keeper.give_back(handle)

    threads = [threading.Thread(target=work) for _ in range(workers)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    keeper.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=50)
    parser.add_argument("--calls-per-shard", type=int, default=100, help="a shard of 50 pairs, both orders")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--workers", type=int, default=4, help="holders at once (more than fit: they take turns)")
    parser.add_argument("--hold", type=float, default=0.5, help="seconds a group is held (a shard's judging)")
    parser.add_argument("--api-url", help="an existing Prefect server (default: start a temporary one on SQLite)")
    args = parser.parse_args()

    os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="bench-prefect-"))
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    if args.api_url:  # before Prefect reads its settings
        os.environ["PREFECT_API_URL"] = args.api_url
    from prefect.testing.utilities import prefect_test_harness

    from judgebench_flows.calls.global_limits import ensure_limit

    prefect = contextlib.nullcontext() if args.api_url else prefect_test_harness(server_startup_timeout=120)
    with prefect:
        name = f"bench-{uuid.uuid4().hex[:8]}"
        asyncio.run(ensure_limit(name, args.concurrency))
        share = max(1, args.concurrency // 2)
        seconds, requests = one_at_a_time(name, args.groups, share)
        print(
            f"one group of {share} slots at a time: {1000 * seconds:.1f} ms and {requests} API requests per group "
            f"(take and give back), {1000 * seconds / args.calls_per_shard:.2f} ms per call for shards of "
            f"{args.calls_per_shard} calls"
        )
        rounds = 5
        elapsed = holders(name, args.workers, rounds, share, args.hold)
        fit = max(1, args.concurrency // share)
        bound = rounds * args.workers * args.hold / fit
        print(
            f"{args.workers} holders x {rounds} groups of {share} slots held {args.hold}s, limit {args.concurrency}: "
            f"{elapsed:.2f}s (bound {bound:.2f}s: the limit busy {100 * bound / elapsed:.0f}% of the time)"
        )


if __name__ == "__main__":
    main()

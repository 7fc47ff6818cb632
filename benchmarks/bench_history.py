"""A year of nights in the results database: its size, and the times of `history`, `compare`, `report`,
the leaderboard's read of our runs and the night's regression check, before and after retention.

Seeds `--runs` runs (default 18,000: a year of 50 configurations a night) with their results.json and
metric rows, and `--judged-nights` of the latest nights (default 3; `--full-year`: 30) with every
judgment row (350 pairs, both orders) and call-cache answer, on SQLite and on PostgreSQL
(127.0.0.1:5432, trust auth; a database of its own, dropped afterwards; skipped when unreachable). Then
`judgebench retention --keep-days 7 --vacuum` and the same commands again.

    python benchmarks/bench_history.py                 # a few minutes on a busy 2-core machine
    python benchmarks/bench_history.py --full-year     # 30 nights of judgments: about 3.4 GB on SQLite

The commands run in this process, as `judgebench.cli.main.main([...])` (their output discarded), so the
times are the commands' own work without the interpreter's start; each is the median of `--repeat`.
Run by hand; this is a measurement, not a test. Figures: docs/performance.md.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from judgebench_flows.data import db  # noqa: E402
from judgebench_flows.data.retention import database_bytes, prune, vacuum  # noqa: E402

CATEGORIES = ("knowledge", "reasoning", "math", "coding")
SOURCES = ("mmlu-pro", "livebench-reasoning", "livebench-math", "livecodebench")
TEMPLATE = ROOT / "tests" / "fixtures" / "results" / "second-run-with-regression-check.json"
ANSWER = "The response from assistant A is more accurate and complete. " * 16  # ~1 KB, as a judge's answer


def seed_database(url: str, runs: int, cells: int, judged_nights: int, pairs: int) -> dict[str, list[str]]:
    """Seed the database; returns each configuration's run ids, oldest first."""
    engine = db.open_database(url)
    rng = random.Random(42)
    template = json.loads(TEMPLATE.read_text())
    nights = runs // cells
    now = datetime.now(timezone.utc) - timedelta(hours=1)  # tonight's runs started an hour ago
    configs = [hashlib.sha256(f"config {c}".encode()).hexdigest() for c in range(cells)]
    by_config: dict[str, list[str]] = {key: [] for key in configs}
    tables = {model: model.__table__ for model in (db.RunRow, db.MetricRow, db.JudgmentRow, db.CallCacheRow)}  # type: ignore[attr-defined]
    pending: dict[object, list[dict]] = {table: [] for table in tables.values()}

    def flush(force: bool = False) -> None:
        for table, rows in pending.items():
            if rows and (force or len(rows) >= 5000):
                with engine.begin() as connection:
                    connection.execute(sa.insert(table), rows)
                rows.clear()

    for night in range(nights):
        started = now - timedelta(days=nights - 1 - night)
        judged = night >= nights - judged_nights
        for c, config_key in enumerate(configs):
            run_id = uuid.UUID(int=rng.getrandbits(128)).hex
            by_config[config_key].append(run_id)
            accuracy = round(rng.uniform(0.5, 0.8), 4)
            results = {**template, "run": {**template["run"], "run_id": run_id, "config_key": config_key}}
            results["overall_accuracy"] = {**template["overall_accuracy"], "accuracy": accuracy}
            pending[tables[db.RunRow]].append(
                {
                    "run_id": run_id,
                    "config_key": config_key,
                    "judge_type": "arena_hard",
                    "model": f"judge-{c}",
                    "data_file": "dataset=judgebench,response_model=gpt-4o-2024-05-13.jsonl",
                    "status": "completed",
                    "started": started,
                    "finished": started + timedelta(minutes=20),
                    "n_pairs": pairs,
                    "overall_accuracy": accuracy,
                    "ci_low": accuracy - 0.05,
                    "ci_high": accuracy + 0.05,
                    "config_json": json.dumps(
                        {"model": f"judge-{c}", "judge_type": "arena_hard", "seed": 42, "bootstrap_resamples": 2000}
                    ),
                    "results_json": json.dumps(results),
                }
            )
            for scope, names in (("overall", ("overall",)), ("category", CATEGORIES), ("source", SOURCES)):
                for name in names:
                    pending[tables[db.MetricRow]].append(
                        {
                            "run_id": run_id,
                            "scope": scope,
                            "name": name,
                            "accuracy": accuracy,
                            "correct_count": 1,
                            "valid_samples": 2,
                            "total_samples": 2,
                        }
                    )
            if judged:
                rows = add_judgments(pending, tables, run_id, started, pairs, rng)
                if night == nights - 1:  # the leaderboard's runs: their results as the flow scores them
                    scored_results(results, rows, pending[tables[db.RunRow]][-1], pending[tables[db.MetricRow]])
            flush()
    flush(force=True)
    return by_config


def scored_results(results: dict, judgments: list[dict], run: dict, metric_rows: list[dict]) -> None:
    """A judged run's results.json and metric rows as the flow writes them: its verdicts scored with the
    seed and resamples its configuration names (what the leaderboard reads instead of drawing again)."""
    from judgebench_flows.scoring.metrics import Tally
    from judgebench_flows.scoring.results import build_results

    tally = Tally()
    tally.add(db.judgment_records(db.JudgmentRow(**row) for row in judgments))
    measured = build_results(tally, seed=42, bootstrap_resamples=2000).model_dump(mode="json")
    for key in ("overall_accuracy", "category_accuracy", "source_accuracy", "consistency"):
        results[key] = measured[key]
    overall = measured["overall_accuracy"]
    run.update(
        results_json=json.dumps(results),
        overall_accuracy=overall["accuracy"],
        ci_low=overall["ci_low"],
        ci_high=overall["ci_high"],
    )
    del metric_rows[-(1 + len(CATEGORIES) + len(SOURCES)) :]  # the placeholders written for every run
    slices = [("overall", {"overall": overall}), ("category", measured["category_accuracy"])]
    slices.append(("source", measured["source_accuracy"]))
    for scope, named in slices:
        for name, acc in named.items():
            if acc["accuracy"] is not None:
                metric_rows.append({"run_id": run["run_id"], "scope": scope, "name": name, **acc})


def add_judgments(pending, tables, run_id: str, started: datetime, pairs: int, rng: random.Random) -> list[dict]:
    """One run's judgment rows and the call-cache answers it paid, both orders of every pair."""
    added = []
    for p in range(pairs):
        label = "A>B" if p % 2 else "B>A"
        for order in (0, 1):
            decision = label if rng.random() < 0.7 else ("B>A" if label == "A>B" else "A>B")
            added.append(
                {
                    "run_id": run_id,
                    "pair_id": f"pair-{p:04d}",
                    "order_index": order,
                    "source": SOURCES[p % 4],
                    "category": CATEGORIES[p % 4],
                    "label": label,
                    "status": "ok",
                    "decision": decision,
                    "decision_for_pair": decision,
                    "response": ANSWER,
                    "calls": 1,
                    "prompt_tokens": 1500,
                    "completion_tokens": 250,
                }
            )
            pending[tables[db.JudgmentRow]].append(added[-1])
            pending[tables[db.CallCacheRow]].append(
                {
                    "key": hashlib.sha256(f"{run_id} {p} {order}".encode()).hexdigest(),
                    "model": "judge",
                    "response": ANSWER,
                    "prompt_tokens": 1500,
                    "completion_tokens": 250,
                    "created": started,
                    "paid_by": run_id,
                }
            )
    return added


def timed(action: Callable[[], object], repeat: int) -> tuple[float, float, float]:
    """(first, median of the rest) wall seconds, and the median's CPU seconds of this process: on a busy
    machine the wall time is mostly waiting for a core (PostgreSQL's own CPU is not in it)."""
    times, cpu = [], []
    for _ in range(repeat):
        began, began_cpu = time.perf_counter(), time.process_time()
        action()
        times.append(time.perf_counter() - began)
        cpu.append(time.process_time() - began_cpu)
    rest = slice(1, None) if len(times) > 1 else slice(None)
    return times[0], statistics.median(times[rest]), statistics.median(cpu[rest])


def quietly(argv: list[str]) -> Callable[[], None]:
    from judgebench_flows.cli.main import main

    def call() -> None:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = main(argv)
        if code != 0:
            raise SystemExit(f"judgebench {' '.join(argv)}: exit {code}")

    return call


def regression_check(url: str, config_key: str, run_id: str) -> Callable[[], None]:
    """The next night's regression check: a run judging as `run_id` did, against `run_id` (its baseline:
    its judgments are read, and 2,000 paired bootstrap resamples drawn)."""
    from judgebench_flows.core.config import RunConfig
    from judgebench_flows.scoring.metrics import Tally
    from judgebench_flows.scoring.regression import regression_against_baseline

    engine = db.open_database(url)
    tally = Tally()
    tally.add(db.judgment_records(db.run_judgments(engine, run_id)))
    config = RunConfig(model="judge")

    def check() -> None:
        if regression_against_baseline(engine, config, config_key, "the next night", tally) is None:
            raise SystemExit("no regression check: the previous run's judgments are missing")

    return check


def leaderboard_runs(url: str) -> Callable[[], None]:
    """What `judgebench leaderboard` reads and scores of our runs (`leaderboard.read_runs`: the database
    opened read-only, each configuration's latest run and its verdicts, scored with the intervals its
    results hold); the published outputs it also scores come from the JudgeBench checkout, not the
    database, and take the same time whatever the database holds."""
    from judgebench_flows.scoring.leaderboard import read_runs

    def score() -> None:
        entries, note = read_runs(url, seed=42, resamples=2000)
        if note or not entries:
            raise SystemExit(f"leaderboard: no runs read ({note})")

    return score


def leaderboard_reads(url: str) -> Callable[[], None]:
    """The database's part of the leaderboard: each configuration's latest run and its verdicts."""
    engine = db.open_database(url)

    def read() -> None:
        db.runs_verdicts(engine, [row.run_id for row in db.latest_finished_runs(engine)])

    return read


def measure(
    url: str, by_config: dict[str, list[str]], repeat: int, workdir: Path
) -> dict[str, tuple[float, float, float]]:
    (config_key, ids), (_, other) = list(by_config.items())[:2]
    latest = ids[-1]  # tonight's run, compared with another configuration's (both keep their judgments)
    return {
        "history": timed(quietly(["history", "--db-url", url]), repeat),
        "compare": timed(quietly(["compare", other[-1], latest, "--db-url", url, "--format", "json"]), repeat),
        "report": timed(quietly(["report", latest, "--db-url", url, "--output", str(workdir / "report.html")]), repeat),
        "leaderboard: read": timed(leaderboard_reads(url), repeat),
        "leaderboard: read and score": timed(leaderboard_runs(url), repeat),
        "regression check": timed(regression_check(url, config_key, latest), repeat),
    }


def counts(url: str) -> str:
    engine = db.open_database(url)
    with engine.connect() as connection:
        found = {
            name: connection.execute(sa.text(f"SELECT count(*) FROM {name}")).scalar_one()
            for name in ("runs", "metrics", "judgments", "call_cache")
        }
    return ", ".join(f"{name} {count:,}" for name, count in found.items())


def size(url: str) -> str:
    found = database_bytes(db.open_database(url))
    return "?" if found is None else f"{found / 1e6:,.0f} MB"


def report_times(label: str, times: dict[str, tuple[float, float, float]]) -> None:
    print(f"  {label} (load average {os.getloadavg()[0]:.1f}):")
    for name, (first, rest, cpu) in times.items():
        print(f"    {name}: {first:.2f} s first, {rest:.2f} s after ({cpu:.2f} s CPU)")


def bench(url: str, args: argparse.Namespace, workdir: Path) -> None:
    began = time.perf_counter()
    by_config = seed_database(url, args.runs, args.cells, args.judged_nights, args.pairs)
    print(f"  seeded in {time.perf_counter() - began:.0f} s: {counts(url)}; size {size(url)}")
    report_times("before retention", measure(url, by_config, args.repeat, workdir))
    engine = db.open_database(url)
    began = time.perf_counter()
    pruned = prune(engine, args.keep_days)
    pruned_s = time.perf_counter() - began
    began = time.perf_counter()
    vacuum(engine)
    print(
        f"  retention --keep-days {args.keep_days}: {pruned.judgments:,} judgments and {pruned.answers:,} answers "
        f"deleted in {pruned_s:.1f} s, vacuum {time.perf_counter() - began:.1f} s: {counts(url)}; size {size(url)}"
    )
    report_times("after retention", measure(url, by_config, args.repeat, workdir))


@contextlib.contextmanager
def postgres_database(server: str, name: str) -> Iterator[str | None]:
    """A fresh database on the PostgreSQL server, dropped afterwards; None when the server is unreachable."""
    admin = sa.create_engine(f"{server}/postgres", isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    try:
        with admin.connect() as connection:
            connection.exec_driver_sql(f"CREATE DATABASE {name}")
    except sa.exc.OperationalError as exc:
        print(f"PostgreSQL: skipped, {server} unreachable ({str(exc.orig).strip().splitlines()[0]})")
        yield None
        return
    try:
        yield f"{server}/{name}"
    finally:
        db._engines.pop(f"{server}/{name}", None)
        engine = db.open_existing(f"{server}/{name}")
        if engine is not None:
            engine.dispose()
        with admin.connect() as connection:
            connection.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=18_000, help="runs with metric rows (default 18,000)")
    parser.add_argument("--cells", type=int, default=50, help="configurations a night (default 50)")
    parser.add_argument("--judged-nights", type=int, default=3, help="latest nights with judgments (default 3)")
    parser.add_argument("--full-year", action="store_true", help="30 nights of judgments and answers")
    parser.add_argument("--pairs", type=int, default=350, help="pairs per run, both orders (default 350)")
    parser.add_argument(
        "--keep-days", type=int, default=None, help="retention's kept days (default 1, with --full-year 7)"
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432", help="PostgreSQL server")
    parser.add_argument(
        "--pg-database", default=None, help="the database created there and dropped after (default bench_history_PID)"
    )
    args = parser.parse_args()
    if args.full_year:
        args.judged_nights = 30
    if args.keep_days is None:
        args.keep_days = 7 if args.full_year else 1
    print(
        f"{args.runs:,} runs ({args.cells} a night), {args.judged_nights} nights of judgments "
        f"({args.pairs} pairs x 2 orders), retention keeps {args.keep_days} days"
    )
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        if args.backend in ("sqlite", "both"):
            print("SQLite:")
            bench(f"sqlite:///{workdir}/history.db", args, workdir)
        if args.backend in ("postgresql", "both"):
            with postgres_database(args.pg, args.pg_database or f"bench_history_{os.getpid()}") as url:
                if url is not None:
                    print("PostgreSQL:")
                    bench(url, args, workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Synthetic nights in a results database, as the nightly flow leaves them, for the dashboard's tests and
benchmarks/bench_dashboard.py: `cells` configurations a night for `nights` nights, each run with its row,
its regression check and judge noise in results.json, its category metrics, and for the last two nights
every judgment (so tonight's flips can be found). Seeded: the same arguments give the same database.

Tonight one configuration regressed (`REGRESSED`), one failed with a reason (`FAILED`), and one's
endpoint said another build halfway through (`DRIFTED`)."""

from __future__ import annotations

import hashlib
import json
import random
from datetime import datetime, timedelta, timezone

import sqlalchemy as sa

from judgebench_flows.core.records import CATEGORIES
from judgebench_flows.data import db

REGRESSED, FAILED, DRIFTED = 1, 2, 3  # configuration indexes
FAILED_REASON = "endpoint unreachable: no call answered for 300 s (connection refused)"


def config_key(index: int) -> str:
    return hashlib.sha256(f"config {index}".encode()).hexdigest()


def seed_nights(url: str, nights: int, cells: int, pairs: int = 40, seed: int = 7) -> None:
    engine = db.open_database(url)
    rng = random.Random(seed)
    first = datetime(2026, 12, 7, 1, 0, tzinfo=timezone.utc) - timedelta(days=nights - 1)
    tables = {m: db.table_of(m) for m in (db.RunRow, db.MetricRow, db.JudgmentRow)}
    rows: dict[object, list[dict]] = {m: [] for m in tables}
    base = [0.55 + 0.3 * rng.random() for _ in range(cells)]
    for night in range(nights):
        started = first + timedelta(days=night)
        root = f"night-{night:04d}"
        tonight = night == nights - 1
        for cell in range(cells):
            run_id = hashlib.sha256(f"{night} {cell}".encode()).hexdigest()[:32]
            sd = 0.01 + 0.02 * (cell % 4) / 3
            accuracy = min(1.0, max(0.0, base[cell] + rng.gauss(0, sd)))
            regressed = tonight and cell == REGRESSED
            failed = tonight and cell == FAILED
            if regressed:
                accuracy = base[cell] - 0.15
            status = "regressed" if regressed else "failed" if failed else "completed"
            delta = accuracy - base[cell]
            p_drop = 1e-6 if regressed else min(1.0, max(0.0, 0.5 - delta / (4 * sd)))
            results = {"noise": {"run_to_run_sd": sd}}
            if night > 0:
                results["regression"] = {
                    "delta": delta,
                    "p_drop": p_drop,
                    "alpha": 0.02 / cells / 2,
                    "detectable_drop": 3.4 * sd,
                    "baseline_accuracy": base[cell],
                    "baseline_run_id": hashlib.sha256(f"{night - 1} {cell}".encode()).hexdigest()[:32],
                    "regressed": regressed,
                    "accuracy_regressed": regressed,
                }
            served = f"judge-{cell} ({'fp_b' if cell == DRIFTED and night >= nights // 2 else 'fp_a'})"
            rows[db.RunRow].append(
                {
                    "run_id": run_id,
                    "config_key": config_key(cell),
                    "judge_type": ("arena_hard", "vanilla", "auto_j", "skywork_critic")[cell % 4],
                    "model": f"judge-{cell // 4}",
                    "data_file": "dataset=judgebench,response_model=gpt-4o-2024-05-13.jsonl",
                    "flow_run_id": f"cell-{night}-{cell}",
                    "root_flow_run_id": root,
                    "status": status,
                    "message": FAILED_REASON if failed else ("accuracy dropped by 15.0 points" if regressed else None),
                    "started": started + timedelta(seconds=20 * cell),
                    "finished": started + timedelta(seconds=20 * cell + 300),
                    "n_pairs": pairs,
                    "overall_accuracy": None if failed else accuracy,
                    "ci_low": None if failed else accuracy - 0.05,
                    "ci_high": None if failed else accuracy + 0.05,
                    "cost_usd": round(0.4 + 0.1 * cell, 4),
                    "priced_as": "gpt-4o read 2026-12-01",
                    "order_consistency": 0.8 + 0.1 * rng.random(),
                    "first_position_rate": 0.45 + 0.1 * rng.random(),
                    "served_as": served,
                    "drift": "system_fingerprint fp_a -> fp_b" if cell == DRIFTED and night == nights // 2 else None,
                    "config_json": "{}",
                    "results_json": json.dumps(results),
                }
            )
            if not failed:
                for category in CATEGORIES:
                    value = min(1.0, max(0.0, accuracy + rng.gauss(0, 0.04)))
                    rows[db.MetricRow].append(
                        {
                            "run_id": run_id,
                            "scope": "category",
                            "name": category,
                            "accuracy": value,
                            "correct_count": round(value * pairs / 4),
                            "valid_samples": pairs // 4,
                            "total_samples": pairs // 4,
                            "ci_low": value - 0.1,
                            "ci_high": value + 0.1,
                        }
                    )
            if night >= nights - 2 and not failed:
                right = {p for p in range(pairs) if rng.random() < accuracy}
                for p in range(pairs):
                    for order in (0, 1):
                        correct = p in right
                        decision = ("A>B" if correct else "B>A") if order == 0 else ("B>A" if correct else "A>B")
                        rows[db.JudgmentRow].append(
                            {
                                "run_id": run_id,
                                "pair_id": f"pair-{p:03d}",
                                "order_index": order,
                                "source": CATEGORIES[p % 4],
                                "category": CATEGORIES[p % 4],
                                "label": "A>B",
                                "status": "ok",
                                "decision": decision,
                                "decision_for_pair": "A>B" if correct else "B>A",
                                "response": f"[[{'A' if correct == (order == 0) else 'B'}]] <script>x</script>",
                            }
                        )
    with engine.begin() as connection:
        for model, table in tables.items():
            for start in range(0, len(rows[model]), 2000):
                connection.execute(sa.insert(table), rows[model][start : start + 2000])


__all__ = ["DRIFTED", "FAILED", "FAILED_REASON", "REGRESSED", "config_key", "seed_nights"]

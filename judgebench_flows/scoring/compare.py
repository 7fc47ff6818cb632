"""Compare two runs from the database: accuracy deltas per slice and the pairs whose verdict changed."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy.engine import Engine

from judgebench_flows.core.errors import UserError
from judgebench_flows.core.pricing import run_cost_text
from judgebench_flows.core.records import CATEGORIES, FINISHED, JudgmentRecord
from judgebench_flows.data import db
from judgebench_flows.scoring import metrics, stats
from judgebench_flows.scoring.results import correctness_of


def records_of(engine: Engine, run_id: str) -> list[JudgmentRecord]:
    return db.judgment_records(db.run_judgments(engine, run_id))


def _verdicts_by_pair(records: list[JudgmentRecord]) -> dict[str, str]:
    """Each pair's verdicts in order, mapped back to the pair ("?" for none), e.g. "A>B B>A"."""
    verdicts: dict[str, list[str]] = {}
    for r in sorted(records, key=lambda r: r.order):
        verdicts.setdefault(r.pair_id, []).append(r.decision_for_pair or "?")
    return {pair_id: " ".join(v) for pair_id, v in verdicts.items()}


def _run(engine: Engine, run_id: str) -> db.RunRow:
    run = db.get_run(engine, run_id)
    if run is None:
        raise UserError(f"no run '{run_id}' in the database (see `judgebench history`)")
    return run


PROTOCOL = (
    "single_game",
    "shuffle_responses",
    "max_samples",
    "temperature",
    "max_tokens",
    "judge_template",
    "templates_dir",
)


def _protocol(run: db.RunRow) -> dict[str, Any]:
    try:
        config = json.loads(run.config_json or "{}")
    except json.JSONDecodeError:
        config = {}
    protocol = {name: config.get(name) for name in PROTOCOL}
    if config.get("max_samples") or config.get("shuffle_responses"):
        protocol["seed"] = config.get("seed")  # which pairs are judged, and which are swapped
    return protocol


def comparison_warnings(a: db.RunRow, b: db.RunRow) -> list[str]:
    """Why the two runs may not be comparable: one did not finish, or they differ in judge, model, data
    or protocol. A comparison is still shown (that may be the point), but never silently."""
    warnings = [
        f"run {run.run_id[:8]} is {run.status}, not finished: its numbers cover only the judgments it recorded"
        for run in (a, b)
        if run.status not in FINISHED
    ]
    aspects = {
        "judge": (a.judge_type, b.judge_type),
        "model": (a.model, b.model),
        "data": ((a.repo_url, a.data_file, a.commit), (b.repo_url, b.data_file, b.commit)),
        "protocol": (_protocol(a), _protocol(b)),
    }
    different = [name for name, (left, right) in aspects.items() if left != right]
    if different:
        warnings.append(f"the runs differ in {', '.join(different)}: differences in accuracy are not the judge's alone")
    return warnings


def compare_runs(db_url: str, run_a: str, run_b: str, seed: int = 42) -> dict[str, Any]:
    engine = db.open_existing(db_url)  # reading creates nothing
    if engine is None:
        raise UserError(f"no runs in {db.safe_url(db_url)} (see `judgebench history`)")
    a, b = _run(engine, run_a), _run(engine, run_b)
    records_a, records_b = records_of(engine, a.run_id), records_of(engine, b.run_id)
    scores_a, scores_b = metrics.pair_scores(records_a), metrics.pair_scores(records_b)
    common = sorted(set(scores_a) & set(scores_b))
    slices = []
    names = ["overall", *CATEGORIES]
    for name in names:
        ids = [p for p in common if name == "overall" or scores_a[p].category == name]
        acc_a = sum(scores_a[p].correct for p in ids) / len(ids) if ids else None
        acc_b = sum(scores_b[p].correct for p in ids) / len(ids) if ids else None
        slices.append(
            {
                "name": name,
                "a": acc_a,
                "b": acc_b,
                "delta": None if acc_a is None or acc_b is None else acc_b - acc_a,
                "n": len(ids),
            }
        )
    verdicts_a, verdicts_b = _verdicts_by_pair(records_a), _verdicts_by_pair(records_b)
    labels = {r.pair_id: r.label for r in records_a}
    flipped = [
        {
            "pair_id": p,
            "source": scores_a[p].source,
            "label": labels[p],
            "a": verdicts_a[p],
            "b": verdicts_b[p],
            "now_correct": bool(scores_b[p].correct),
        }
        for p in common
        if scores_a[p].correct != scores_b[p].correct
    ]
    bootstrap = None
    if common:
        result = stats.paired_bootstrap_delta(correctness_of(scores_a), correctness_of(scores_b), seed=seed)
        bootstrap = result.model_dump()
    return {
        "run_a": a.run_id,
        "run_b": b.run_id,
        "slices": slices,
        "flipped": flipped,
        "bootstrap": bootstrap,
        "warnings": comparison_warnings(a, b),
        "cost": {"a": run_cost_text(a.cost_usd, a.priced_as), "b": run_cost_text(b.cost_usd, b.priced_as)},
    }

"""JudgeBench's official metric, sliced overall, by category and by source, plus consistency.

For each pair: +1 for each verdict (the swapped order's mapped back to the pair) that equals the label,
-1 for each that equals the opposite label, 0 for ties and invalid ones; the pair is correct when the sum
is positive. A judge that always answers "A>B" therefore scores 0 in two-order mode. Accuracy divides by
all pairs judged (as JudgeBench does), so an invalid verdict costs accuracy rather than vanishing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from judgebench_flows.records import CATEGORIES, Accuracy, JudgmentRecord, flip


def pair_scores(judgments: Iterable[JudgmentRecord]) -> dict[str, dict[str, Any]]:
    """Per pair: its source, category, score sum, correctness, validity and whether its verdicts agree."""
    by_pair: dict[str, list[JudgmentRecord]] = defaultdict(list)
    for judgment in judgments:
        by_pair[judgment.pair_id].append(judgment)
    scores: dict[str, dict[str, Any]] = {}
    for pair_id, records in by_pair.items():
        records.sort(key=lambda r: r.order)
        label = records[0].label
        total = 0
        for record in records:
            if record.decision_for_pair == label:
                total += 1
            elif record.decision_for_pair == flip(label):
                total -= 1
        valid = all(r.status == "ok" for r in records)
        decisions = [r.decision_for_pair for r in records]
        scores[pair_id] = {
            "source": records[0].source,
            "category": records[0].category,
            "score": total,
            "correct": total > 0,
            "valid": valid,
            "orders": len(records),
            "consistent": valid and len(records) == 2 and decisions[0] == decisions[1],
        }
    return scores


def _accuracy(rows: list[dict[str, Any]]) -> Accuracy:
    total = len(rows)
    correct = sum(1 for r in rows if r["correct"])
    return Accuracy(
        accuracy=round(correct / total, 6) if total else None,
        correct_count=correct,
        valid_samples=sum(1 for r in rows if r["valid"]),
        total_samples=total,
    )


def accuracy_tables(scores: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """overall / category / source accuracy; the four JudgeBench categories always appear."""
    rows = list(scores.values())
    by_category: dict[str, list[dict[str, Any]]] = {c: [] for c in CATEGORIES}
    by_source: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_category.setdefault(row["category"], []).append(row)
        by_source[row["source"]].append(row)
    return {
        "overall_accuracy": _accuracy(rows),
        "category_accuracy": {name: _accuracy(members) for name, members in by_category.items()},
        "source_accuracy": {name: _accuracy(by_source[name]) for name in sorted(by_source)},
    }


def consistency(scores: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Share of pairs whose two valid verdicts agree once the swapped one is mapped back."""
    both = [r for r in scores.values() if r["orders"] == 2 and r["valid"]]
    agreeing = sum(1 for r in both if r["consistent"])
    return {
        "consistency": round(agreeing / len(both), 6) if both else None,
        "consistent_pairs": agreeing,
        "pairs_with_both_verdicts": len(both),
    }


def invalid_counts(judgments: list[JudgmentRecord], skipped_rows: int = 0) -> dict[str, Any]:
    reasons: dict[str, int] = defaultdict(int)
    for j in judgments:
        if j.status != "ok":
            reasons[(j.error or j.status).split(" after ")[0][:80]] += 1
    return {
        "invalid_judgments": sum(1 for j in judgments if j.status == "invalid"),
        "failed_judgments": sum(1 for j in judgments if j.status == "failed"),
        "pairs_with_invalid": len({j.pair_id for j in judgments if j.status != "ok"}),
        "skipped_rows": skipped_rows,
        "reasons": dict(sorted(reasons.items(), key=lambda kv: -kv[1])),
    }


def usage_totals(judgments: list[JudgmentRecord]) -> dict[str, int]:
    return {
        "calls": sum(j.calls for j in judgments),
        "cached_calls": sum(j.cached_calls for j in judgments),
        "paid_calls": sum(j.calls - j.cached_calls for j in judgments),
        "prompt_tokens": sum(j.prompt_tokens for j in judgments),
        "completion_tokens": sum(j.completion_tokens for j in judgments),
    }

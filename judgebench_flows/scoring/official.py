"""A benchmark's own statistics of a run, as its code writes them: results.json's `official`.

JudgeBench's official numbers are the accuracies results.json always held. LLMBar's are its
statistics.json (`scoring.llmbar_statistics`), computed from each pair's two final verdicts: order 0's
winner (LLMBar's `swap = False`) and order 1's mapped back to the pair, "1" for output_1, "2" for output_2,
None without a verdict. A run's tally keeps each pair's decisions by order and epoch (`PairScore`), not its
records, so the rows are read from there; with several epochs every epoch of a pair is one instance.
"""

from __future__ import annotations

from collections.abc import Iterable

from judgebench_flows.scoring.llmbar_statistics import LABELS, WINNERS, Row, llmbar_statistics
from judgebench_flows.scoring.metrics import PairScore


def rows_of_scores(scores: Iterable[PairScore]) -> list[Row]:
    """(label, w0, w1) per pair and epoch, in the given order, for pairs judged in both orders."""
    rows: list[Row] = []
    for score in scores:
        if len(score.decisions) != 2 or score.label not in LABELS:
            continue
        first, second = score.decisions
        rows += [(LABELS[score.label], WINNERS.get(w0), WINNERS.get(w1)) for w0, w1 in zip(first, second, strict=False)]
    return rows


def official_statistics(rule: str, scores: dict[str, PairScore]) -> dict[str, str | float] | None:
    """The benchmark's own statistics of these pair scores (None for JudgeBench's rule, whose official
    numbers are results.json's accuracies, or when no pair was judged in both orders)."""
    if rule != "llmbar":
        return None
    rows = rows_of_scores(scores[pair_id] for pair_id in sorted(scores))
    return llmbar_statistics(rows) if rows else None

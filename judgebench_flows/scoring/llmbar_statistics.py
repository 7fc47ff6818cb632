"""LLMBar's official statistics of a run (its statistics.json), computed as LLMBar's evaluate.py does.

A row is one instance: its label (1: output_1 is better, 2: output_2) and the last stage's two winners,
w0 (`swap = False`) and w1 (`swap = True`, already mapped back to the instance's outputs), each "1", "2"
or None (no verdict). Then:

- `correct_False` / `correct_True`: the share of rows whose w0 / w1 equals the label, written
  "95 / 100 = 95.0%"; `correct_average` their mean ("94.5%", the headline); `correct_both` both right;
  `equal` w0 == w1 (two Nones count as equal).
- `kappa_False`, `kappa_True`: Cohen's kappa between the winners mapped "1" -> 1, anything else -> 0, and
  the labels 1 and 2 as they are (LLMBar's quirk: the two sides never share the label 2, so these are not
  agreement with the labels; they are reproduced as the official numbers), their mean `kappa_average`,
  and `kappa_agreement` between the two mapped orders.

Numbers are formatted as LLMBar's `str.format` writes Python floats, so a file comparison checks them.
`kappa_on_labels` is ours: kappa between w and the label on like terms ("1"/"2"), named as ours.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Literal

from judgebench_flows.core.records import JudgmentRecord

Winner = Literal["1", "2"] | None
Row = tuple[int, Winner, Winner]
LABELS = {"A>B": 1, "B>A": 2}
WINNERS: dict[str, Winner] = {"A>B": "1", "B>A": "2"}


def cohen_kappa(first: Sequence[Hashable], second: Sequence[Hashable]) -> float:
    """Cohen's kappa of two raters over the union of their categories (scikit-learn's `cohen_kappa_score`
    without weights): 1 - observed disagreement / disagreement expected by chance. NaN when chance alone
    expects no disagreement (both raters constant and equal), as scikit-learn returns it."""
    if len(first) != len(second) or not first:
        raise ValueError("kappa needs two equally long, non-empty sequences")
    n = len(first)
    categories = sorted(set(first) | set(second), key=repr)
    count_first = {c: sum(1 for x in first if x == c) for c in categories}
    count_second = {c: sum(1 for y in second if y == c) for c in categories}
    observed = sum(1 for x, y in zip(first, second, strict=True) if x != y)
    expected = sum(count_first[a] * count_second[b] / n for a in categories for b in categories if a != b)
    return 1 - observed / expected if expected else float("nan")


def _share(count: int, total: int) -> str:
    return f"{count} / {total} = {count / total * 100}%"


def llmbar_statistics(rows: Iterable[Row]) -> dict[str, str | float]:
    """Every field of LLMBar's statistics.json, keys in its order, values as it writes them."""
    rows = list(rows)
    if not rows:
        raise ValueError("LLMBar's statistics need at least one instance")
    total = len(rows)
    labels = [int(label) for label, _, _ in rows]
    right_0 = [w0 == str(label) for label, w0, _ in rows]
    right_1 = [w1 == str(label) for label, _, w1 in rows]
    correct_false, correct_true = sum(right_0), sum(right_1)
    both = sum(a and b for a, b in zip(right_0, right_1, strict=True))
    equal = sum(w0 == w1 for _, w0, w1 in rows)
    mapped_0 = [1 if w0 == "1" else 0 for _, w0, _ in rows]
    mapped_1 = [1 if w1 == "1" else 0 for _, _, w1 in rows]
    statistics: dict[str, str | float] = {
        "correct_False": _share(correct_false, total),
        "correct_True": _share(correct_true, total),
        "correct_average": f"{(correct_false + correct_true) / 2 / total * 100}%",
        "correct_both": _share(both, total),
        "equal": _share(equal, total),
    }
    kappa_false, kappa_true = cohen_kappa(mapped_0, labels), cohen_kappa(mapped_1, labels)
    statistics["kappa_False"] = kappa_false
    statistics["kappa_True"] = kappa_true
    statistics["kappa_average"] = (kappa_false + kappa_true) / 2
    statistics["kappa_agreement"] = cohen_kappa(mapped_0, mapped_1)
    return statistics


def kappa_on_labels(rows: Iterable[Row]) -> dict[str, float]:
    """Ours, beside LLMBar's: Cohen's kappa between each order's winner and the label on like terms
    ("1"/"2"; no verdict is its own category), and between the two orders."""
    rows = list(rows)
    labels = [str(label) for label, _, _ in rows]
    first = [w0 or "none" for _, w0, _ in rows]
    second = [w1 or "none" for _, _, w1 in rows]
    return {
        "kappa_False": cohen_kappa(first, labels),
        "kappa_True": cohen_kappa(second, labels),
        "kappa_agreement": cohen_kappa(first, second),
    }


def llmbar_rows(records: Iterable[JudgmentRecord], epoch: int = 0) -> list[Row]:
    """The rows of one epoch's judgments, a pair per row in the order its pairs first appear: the label,
    and each order's verdict mapped to the pair ("1": response A, output_1), None for a judgment without
    one (invalid or failed, as LLMBar counts an answer it could not read). Both orders are needed."""
    pairs: dict[str, dict[int, JudgmentRecord]] = {}
    for record in records:
        if record.epoch == epoch:
            pairs.setdefault(record.pair_id, {})[record.order] = record
    rows: list[Row] = []
    for pair_id, orders in pairs.items():
        if set(orders) != {0, 1}:
            raise ValueError(f"pair {pair_id}: LLMBar's statistics need both orders, the run has {sorted(orders)}")
        label = LABELS[orders[0].label]
        w0, w1 = (WINNERS.get(r.decision_for_pair) if r.status == "ok" else None for r in (orders[0], orders[1]))
        rows.append((label, w0, w1))
    return rows

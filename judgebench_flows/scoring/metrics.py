"""Each benchmark's official metric, sliced overall, by category and by source, plus consistency.

JudgeBench's rule (the default, `rule="judgebench"`), for each pair: +1 for each verdict (the swapped order's mapped back to the pair) that equals the label,
-1 for each that equals the opposite label, 0 for ties and invalid ones; the pair is correct when the sum
is positive. A judge that always answers "A>B" therefore scores 0 in two-order mode. Accuracy divides by
all pairs judged (as JudgeBench does), so an invalid verdict costs accuracy rather than vanishing.

LLMBar's rule (`rule="llmbar"`, its evaluate.py): each order's verdict is scored apart, right when it is
the label; the accuracy is the mean of the two orders' (`correct_average`). A pair then holds two scored
units per epoch (`PairScore.units`) and its correctness is the share of them right: 0, 0.5 or 1.

A run feeds its judgments to a `Tally` shard by shard and lets them go: the tally keeps one small
`PairScore` per pair and counters for the rest, so a run of 100,000 pairs holds a few MB here, not every
judgment with its answer.
"""

from __future__ import annotations

import re
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from judgebench_flows.core.benchmarks import Benchmark
from judgebench_flows.core.records import CATEGORIES, Accuracy, JudgmentRecord, flip
from judgebench_flows.core.text import shorten
from judgebench_flows.scoring.result_types import Consistency, Invalid, Usage

# How many attempts a failure took, and that a request asked again was not resent: left out when failures
# are grouped by reason, so the server's words (kept whole: `calls.retry.describe`) group alike.
ATTEMPTS = re.compile(
    r" after \d+ attempts| \((?:sent once|sent \d+ times): not sent again\)"
    r"| \(its \d+ attempts are spent: not sent again\)"  # as earlier versions wrote it (stored records)
)
MAX_REASON_CHARS = 2000  # the server's words whole; a longer body is cut at a word (each judgment's error is whole)
DIGITS = re.compile(r"\d+")


def reason_of(error: str) -> str:
    """A failure's reason as results.json groups it: the server's message kept, attempts left out."""
    return shorten(ATTEMPTS.sub("", error), MAX_REASON_CHARS, "the judgments' error")


class Verdict(Protocol):
    """What the metric reads of a judgment: a `JudgmentRecord`, or a database row with these fields.

    Read-only properties, so records whose fields are narrower (`Literal` labels and statuses) match too."""

    @property
    def pair_id(self) -> str: ...
    @property
    def order(self) -> int: ...
    @property
    def source(self) -> str: ...
    @property
    def category(self) -> str: ...
    @property
    def label(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def decision_for_pair(self) -> str: ...


def epoch_of(verdict: Verdict) -> int:
    """The verdict's epoch (`--epochs`): records and stored rows carry one, a published file's lines not."""
    return getattr(verdict, "epoch", 0)


@dataclass(frozen=True, slots=True)
class PairScore:
    """A pair's judgments scored: JudgeBench's score per epoch, and what position bias and the judge's noise
    read. With one epoch (`epochs` 1) every count is that epoch's, as it always was."""

    source: str
    category: str
    score: int  # summed over epochs
    valid: bool
    orders: int  # per epoch
    consistent: bool  # in every epoch
    # Position bias: of its verdicts that chose a side, how many chose the response shown first.
    first_position: int = 0
    sided: int = 0
    epochs: int = 1
    # Each epoch's correctness (JudgeBench's `score > 0`, epoch by epoch) and order consistency.
    correct_by_epoch: tuple[int, ...] = ()  # booleans under JudgeBench's rule, right orders under LLMBar's
    consistent_by_epoch: tuple[bool, ...] = ()
    # Each epoch's lean to the response shown first: 2 x (verdicts for it) - (verdicts that chose a side).
    first_lean_by_epoch: tuple[int, ...] = ()
    # Per order, its decisions over the epochs (self-agreement: do two samples of one prompt agree?).
    decisions: tuple[tuple[str, ...], ...] = ()
    # Units scored apart per epoch: 1 under JudgeBench's rule (the pair), the orders under LLMBar's; each
    # entry of `correct_by_epoch` then counts that epoch's units judged right.
    units: int = 1
    label: str = ""  # the pair's label: what a benchmark's own statistics compare each order's verdict with

    @property
    def correct_count(self) -> int:
        """How many of its units (epochs; under LLMBar's rule orders x epochs) were judged right."""
        return int(sum(self.correct_by_epoch)) if self.correct_by_epoch else int(self.score > 0)

    @property
    def correctness(self) -> float:
        """The share of its units judged right: 1.0 or 0.0 with one epoch under JudgeBench's rule."""
        return self.correct_count / (self.epochs * self.units)

    def epoch_credits(self) -> tuple[float, ...]:
        """Each epoch's share of units judged right (0/1 under JudgeBench's rule): the per-epoch samples
        the noise and the alerts read."""
        if not self.correct_by_epoch:
            return (float(self.score > 0),)
        return tuple(c / self.units for c in self.correct_by_epoch)

    @property
    def consistency_share(self) -> float:
        """The share of epochs whose two verdicts agree."""
        count = sum(self.consistent_by_epoch) if self.consistent_by_epoch else int(self.consistent)
        return count / self.epochs

    @property
    def correct(self) -> bool:
        """Judged correctly: in more than half of its units (with one epoch, JudgeBench's `score > 0`)."""
        return 2 * self.correct_count > self.epochs * self.units


def shown_first(verdict: Verdict) -> bool | None:
    """Did this verdict choose the response shown first? None for a tie, an invalid or a failed one.

    The second order shows the pair's B first, so there "B>A" for the pair is a vote for the first shown."""
    if verdict.status != "ok" or verdict.decision_for_pair not in ("A>B", "B>A"):
        return None
    return (verdict.decision_for_pair == "A>B") == (verdict.order == 0)


def _epoch_score(records: list[Verdict]) -> int:
    """JudgeBench's score of one epoch's verdicts: +1 each for the label, -1 each for its opposite."""
    label = records[0].label
    return sum((r.decision_for_pair == label) - (r.decision_for_pair == flip(label)) for r in records)


def _epoch_consistent(records: list[Verdict]) -> bool:
    return (
        len(records) == 2
        and all(r.status == "ok" for r in records)
        and records[0].decision_for_pair == records[1].decision_for_pair
    )


def _sides(records: list[Verdict]) -> tuple[int, int]:
    """(verdicts for the response shown first, verdicts that chose a side) of one epoch."""
    sides = [shown_first(r) for r in records]
    return sum(1 for side in sides if side), sum(1 for side in sides if side is not None)


RULES = ("judgebench", "llmbar")


def pair_scores(judgments: Iterable[Verdict], rule: str = "judgebench") -> dict[str, PairScore]:
    """Per pair: its source, category, score (each epoch's, summed), validity, whether its verdicts agree,
    and with several epochs how many were correct and consistent and each order's decisions. `rule`: the
    benchmark's official rule (`Benchmark.rule`), which decides what counts as correct."""
    by_pair: dict[str, list[Verdict]] = defaultdict(list)
    for judgment in judgments:
        by_pair[judgment.pair_id].append(judgment)
    return {pair_id: _pair_score(records, rule) for pair_id, records in by_pair.items()}


def _orders_right(records: list[Verdict]) -> int:
    """LLMBar's rule on one epoch: how many of its orders' verdicts are the label."""
    return sum(r.status == "ok" and r.decision_for_pair == r.label for r in records)


def _pair_score(records: list[Verdict], rule: str = "judgebench") -> PairScore:
    records.sort(key=lambda r: (epoch_of(r), r.order))
    by_epoch: dict[int, list[Verdict]] = defaultdict(list)
    for record in records:
        by_epoch[epoch_of(record)].append(record)
    epochs = [by_epoch[e] for e in sorted(by_epoch)]
    scores = [_epoch_score(epoch) for epoch in epochs]
    consistent = [_epoch_consistent(epoch) for epoch in epochs]
    sides = [_sides(epoch) for epoch in epochs]
    if rule == "llmbar":
        units = max(len(epoch) for epoch in epochs)
        correct: tuple[int, ...] = tuple(_orders_right(epoch) for epoch in epochs)
    else:
        units, correct = 1, tuple(score > 0 for score in scores)
    return PairScore(
        source=sys.intern(records[0].source),
        category=sys.intern(records[0].category),
        score=sum(scores),
        valid=all(r.status == "ok" for r in records),
        orders=max(len(epoch) for epoch in epochs),
        consistent=all(consistent),
        first_position=sum(first for first, _ in sides),
        sided=sum(sided for _, sided in sides),
        epochs=len(epochs),
        correct_by_epoch=correct,
        consistent_by_epoch=tuple(consistent),
        first_lean_by_epoch=tuple(2 * first - sided for first, sided in sides),
        decisions=_decisions_by_order(epochs),
        units=units,
        label=records[0].label,
    )


def _decisions_by_order(epochs: list[list[Verdict]]) -> tuple[tuple[str, ...], ...]:
    """Each order's decisions over the epochs ("" where it gave none): what self-agreement compares."""
    orders = sorted({r.order for epoch in epochs for r in epoch})
    return tuple(
        tuple(
            next((r.decision_for_pair for r in epoch if r.order == order and r.status == "ok"), "") for epoch in epochs
        )
        for order in orders
    )


def accuracy_of(rows: list[PairScore]) -> Accuracy:
    """The official accuracy, and with K epochs the mean of the K epochs' (each pair counts K times; under
    LLMBar's rule each order too, so `correct_count` counts right verdicts)."""
    total = len(rows)
    epochs = max((r.epochs for r in rows), default=1)
    units = max((r.units for r in rows), default=1)
    correct = sum(r.correct_count for r in rows)
    return Accuracy(
        accuracy=round(correct / (total * epochs * units), 6) if total else None,
        correct_count=correct,
        valid_samples=sum(1 for r in rows if r.valid),
        total_samples=total,
        epochs=epochs,
    )


def epoch_accuracies(rows: list[PairScore]) -> list[float]:
    """Each epoch's official accuracy over these pairs, in epoch order (one figure with one epoch)."""
    if not rows:
        return []
    epochs = max(r.epochs for r in rows)
    return [
        round(sum(r.correct_by_epoch[e] / r.units for r in rows if e < len(r.correct_by_epoch)) / len(rows), 6)
        for e in range(epochs)
    ]


def slices(
    scores: dict[str, PairScore], categories: tuple[str, ...] = CATEGORIES
) -> dict[str, dict[str, list[PairScore]]]:
    """The pairs of each slice: overall, each category (the benchmark's own always, JudgeBench's four by
    default) and each source.

    Pairs go in pair-id order, not the order shards happened to finish: the seeded bootstrap over a slice
    must give the same interval in-process and on Dask, and on every re-run."""
    rows = [scores[pair_id] for pair_id in sorted(scores)]
    by_category: dict[str, list[PairScore]] = {c: [] for c in categories}
    by_source: dict[str, list[PairScore]] = defaultdict(list)
    for row in rows:
        by_category.setdefault(row.category, []).append(row)
        by_source[row.source].append(row)
    return {
        "overall": {"overall": rows},
        "category": by_category,
        "source": {name: by_source[name] for name in sorted(by_source)},
    }


def consistency(scores: dict[str, PairScore]) -> Consistency:
    """Share of pairs whose two valid verdicts agree once the swapped one is mapped back, and the
    first-position rate: the share of verdicts that chose a side (ties, invalid and failed ones left out)
    that chose the response shown first. An unbiased judge is near 50%; one that favours whatever it
    reads first is above (JudgeBench computes the first and discards it; we keep both, run after run)."""
    both = [r for r in scores.values() if r.orders == 2 and r.valid]
    agreeing = sum(1 for r in both if r.consistent)  # consistent in every epoch
    first = sum(r.first_position for r in scores.values())
    sided = sum(r.sided for r in scores.values())
    return Consistency(
        consistency=round(agreeing / len(both), 6) if both else None,
        consistent_pairs=agreeing,
        pairs_with_both_verdicts=len(both),
        first_position_rate=round(first / sided, 6) if sided else None,
        first_position_verdicts=first,
        sided_verdicts=sided,
    )


class Tally:
    """Everything results.json and the report need from a run's judgments, fed a shard at a time.

    Keeps a `PairScore` per pair, counters for invalid/failed judgments and token usage, and a bounded
    sample of judgments with their raw answers for the report: the first `report_limit` of any status,
    then up to `problem_limit` more that failed or were unparseable (their number is always in the counts).
    All judgments of a pair must arrive in the same `add` (a shard holds whole pairs).
    """

    def __init__(
        self,
        report_limit: int = 5000,
        problem_limit: int = 2000,
        rule: str = "judgebench",
        categories: tuple[str, ...] = CATEGORIES,
    ):
        self.rule = rule  # the benchmark's official rule (`Benchmark.rule`)
        self.categories = categories  # the slices every result shows (`Benchmark.categories`)
        self.scores: dict[str, PairScore] = {}
        self.invalid = 0
        self.failed = 0
        self.pairs_with_problems = 0
        self.reasons: Counter[str] = Counter()
        # Reasons that differ only in their numbers (a context length's token counts) are one reason,
        # named by the first seen: its shape (digits masked) -> that reason.
        self._reason_names: dict[str, str] = {}
        self.usage: Counter[str] = Counter()
        self.report_sample: list[JudgmentRecord] = []
        self._report_limit = report_limit
        self._problem_limit = problem_limit

    @classmethod
    def for_benchmark(cls, benchmark: Benchmark) -> Tally:
        """A run's tally, scored by its benchmark's official rule and sliced by its categories."""
        return cls(rule=benchmark.rule, categories=benchmark.categories)

    @classmethod
    def of(cls, judgments: Iterable[JudgmentRecord], report_limit: int = 5000) -> Tally:
        tally = cls(report_limit=report_limit)
        tally.add(list(judgments))
        return tally

    def add(self, judgments: list[JudgmentRecord]) -> None:
        self.scores.update(pair_scores(judgments, self.rule))
        problem_pairs = set()
        for j in judgments:
            self.usage["judgments"] += 1
            self.usage["calls"] += j.calls
            self.usage["cached_calls"] += j.cached_calls
            # Paid means answered and not from a cache: a failed judgment's last call got no answer.
            self.usage["paid_calls"] += max(0, j.calls - j.cached_calls - (j.status == "failed"))
            self.usage["prompt_tokens"] += j.prompt_tokens
            self.usage["completion_tokens"] += j.completion_tokens
            self.usage["reasoning_tokens"] += j.reasoning_tokens
            if not j.cached_calls:  # paid: none of its calls came from a cache (what Dask runs are priced by)
                self.usage["paid_prompt_tokens"] += j.prompt_tokens
                self.usage["paid_completion_tokens"] += j.completion_tokens
            if j.status != "ok":
                self.invalid += j.status == "invalid"
                self.failed += j.status == "failed"
                reason = reason_of(j.error or j.status)
                self.reasons[self._reason_names.setdefault(DIGITS.sub("#", reason), reason)] += 1
                problem_pairs.add(j.pair_id)
            self._sample(j)
        self.pairs_with_problems += len(problem_pairs)

    def _sample(self, judgment: JudgmentRecord) -> None:
        limit = self._report_limit if judgment.status == "ok" else self._report_limit + self._problem_limit
        if len(self.report_sample) < limit:
            self.report_sample.append(judgment.model_copy(update={"prompt": ""}))

    def invalid_counts(self, skipped_rows: int = 0) -> Invalid:
        return Invalid(
            invalid_judgments=self.invalid,
            failed_judgments=self.failed,
            pairs_with_invalid=self.pairs_with_problems,
            skipped_rows=skipped_rows,
            reasons=dict(self.reasons.most_common()),
        )

    def usage_totals(self) -> Usage:
        return Usage(
            judgments=self.usage["judgments"],
            calls=self.usage["calls"],
            cached_calls=self.usage["cached_calls"],
            # The run's flow replaces this with what its endpoint clients actually sent when it has them;
            # from records, for Dask and tools.
            paid_calls=self.usage["paid_calls"],
            failed_calls=self.failed,
            prompt_tokens=self.usage["prompt_tokens"],
            completion_tokens=self.usage["completion_tokens"],
            reasoning_tokens=self.usage["reasoning_tokens"],
        )

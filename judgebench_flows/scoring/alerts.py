"""Alerts that know the judge's noise: did this run's judge get worse than its recent runs, pair by pair?

The question a nightly run answers is whether the judge changed, not whether tonight's draw of a noisy
judge fell low. Three one-sided tests compare the run with the mean of its configuration's recent
finished runs (`baseline_runs`), on the pairs they all judged:

- accuracy: the share of epochs each pair was judged correctly;
- order consistency: the share of epochs whose two verdicts agree (worse: lower);
- first-position lean: 2 x votes for the response shown first - sided votes, per epoch (worse: further
  from no lean, in the direction the run leans).

Each test is a paired z-test over pairs. The run's samples of a pair (its K epochs) and the baseline's
(every epoch of every baseline run) are two samples of one distribution when the judge did not change,
so the variance of their difference is estimated from both pooled, per pair: v_i (1/K + 1/K_B). A pair a
deterministic judge always judges alike adds nothing; a pair it wobbles on adds what it wobbles. This
is the judge's own noise in the test (Miller, "Adding Error Bars to Evals": cluster on the pair, use
the within-pair variance, plan for power).

The false-alarm rate is a night's, not a cell's: `alert_false_alarm_rate` (default 2%) is split evenly
over the `alert_cells` runs tested together (Bonferroni), accuracy taking half of a cell's share and
each position test a quarter. Bonferroni because each cell decides alone, when it finishes, on whatever
worker ran it, without waiting for the night's other cells, and it holds whatever the dependence between
cells (they share endpoints and often a judge). Each result says the smallest drop it detects 80% of
the time. benchmarks/bench_alerts.py measures both rates through this code (docs/alerts.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from judgebench_flows.scoring.metrics import PairScore

POWER = 0.8  # the detectable drop is the one detected this often
_NORMAL = NormalDist()


@dataclass(frozen=True)
class AlertPlan:
    """How much false-alarm rate each test of one run may spend: a cell's share of the night's rate goes
    half to accuracy (split evenly between the per-night test and the sequential one,
    `scoring.sequential`, when it runs) and a quarter to each position test."""

    false_alarm_rate: float = 0.02
    cells: int = 1
    position_bias: bool = True
    sequential: bool = True

    @property
    def cell_alpha(self) -> float:
        return self.false_alarm_rate / self.cells

    @property
    def _accuracy_share(self) -> float:
        return self.cell_alpha / 2 if self.position_bias else self.cell_alpha

    @property
    def accuracy_alpha(self) -> float:
        """The per-night accuracy test's share."""
        return self._accuracy_share / 2 if self.sequential else self._accuracy_share

    @property
    def sequential_alpha(self) -> float:
        """The sequential test's share: its expected alarms per night of an unchanged judge."""
        return self._accuracy_share / 2 if self.sequential else 0.0

    @property
    def position_alpha(self) -> float:
        """Each of the two position tests' share."""
        return self.cell_alpha / 4


@dataclass(frozen=True)
class ShiftTest:
    """One paired, one-sided test: the run's mean minus the baseline's, its standard error under "no
    change" (the judge's noise pooled), the p-value of a shift the worse way, and what it could see."""

    n_pairs: int
    candidate: float
    baseline: float
    delta: float
    se: float
    p_value: float
    alpha: float
    detectable: float

    @property
    def alerted(self) -> bool:
        return self.p_value < self.alpha


# How much each end of a measure's range weighs in every pair's variance, as if observed (a prior of
# PRIOR_WEIGHT samples at each bound): a pair seen alike a few times may still wobble. Without it a pair
# that never varied in its 6 samples has no variance, and its one wobble tonight reads as a certain
# change: with few pairs varying (100 pairs, little noise) alerts came 2.5x as often as planned;
# with it, at or below plan (bench_alerts.py, docs/alerts.md).
PRIOR_WEIGHT = 0.2


@dataclass(frozen=True)
class PairSums:
    """Per pair: how many samples, their sum and their sum of squares (arrays of shape (..., pairs)).
    Sufficient for every test here, and they add up: a baseline of five nights is their sums' sum."""

    count: np.ndarray
    total: np.ndarray
    squares: np.ndarray

    @classmethod
    def of(cls, samples: np.ndarray) -> PairSums:
        """Samples (..., pairs, samples), NaN where a pair has fewer."""
        seen = ~np.isnan(samples)
        values = np.where(seen, samples, 0.0)
        return cls(seen.sum(axis=-1).astype(float), values.sum(axis=-1), (values * values).sum(axis=-1))

    @classmethod
    def zeros(cls, shape: tuple[int, ...]) -> PairSums:
        return cls(np.zeros(shape), np.zeros(shape), np.zeros(shape))

    def plus(self, other: PairSums, where: np.ndarray | bool = True) -> PairSums:
        """These sums with `other` added where `where` (a batch mask) holds."""
        mask = np.asarray(where)[..., None] if np.ndim(where) else where
        return PairSums(*(a + np.where(mask, b, 0.0) for a, b in zip(self.fields(), other.fields(), strict=True)))

    def kept(self, where: np.ndarray | bool) -> PairSums:
        """These sums where `where` holds, zero elsewhere."""
        mask = np.asarray(where)[..., None] if np.ndim(where) else where
        return PairSums(*(np.where(mask, a, 0.0) for a in self.fields()))

    def fields(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.count, self.total, self.squares

    def __add__(self, other: PairSums) -> PairSums:
        return PairSums(*(a + b for a, b in zip(self.fields(), other.fields(), strict=True)))


def pair_variance(*parts: PairSums, bounds: tuple[float, float]) -> np.ndarray:
    """Each pair's variance of one sample, every part's samples and the prior's pooled (the sample
    variance, from sufficient statistics: the same for a night's samples as for a sum of nights')."""
    low, high = bounds
    w = PRIOR_WEIGHT
    k = sum(p.count for p in parts)
    total = sum(p.total for p in parts)
    squares = sum(p.squares for p in parts)
    mean = (total + w * (low + high)) / (k + 2 * w)
    ss = squares - 2 * mean * total + k * mean * mean + w * ((low - mean) ** 2 + (high - mean) ** 2)
    return np.maximum(ss, 0.0) / (k + 2 * w) * k / np.maximum(k - 1, 1)


_upper_tail = np.vectorize(lambda z: 1 - _NORMAL.cdf(z), otypes=[float])


def shift_sums(
    candidate: PairSums, baseline: PairSums, worse: np.ndarray | int = -1, bounds: tuple[float, float] = (0, 1)
) -> tuple[np.ndarray, ...]:
    """The paired test on per-pair sums (arrays (..., pairs), any leading batch axes): per batch the pairs
    kept (a sample on both sides), the candidate's and the baseline's means, delta, SE and the p-value of
    a shift the `worse` way (per batch, -1 or +1). What `shift_test` and the benchmark's nights compute."""
    k_c, k_b = candidate.count, baseline.count
    kept = (k_c > 0) & (k_b > 0)
    n = kept.sum(axis=-1)
    safe_n = np.maximum(n, 1)
    cand_means = candidate.total / np.maximum(k_c, 1)
    base_means = baseline.total / np.maximum(k_b, 1)
    variance = pair_variance(candidate, baseline, bounds=bounds)
    variance = variance * (1 / np.maximum(k_c, 1) + 1 / np.maximum(k_b, 1))
    delta = np.where(kept, cand_means - base_means, 0.0).sum(axis=-1) / safe_n
    se = np.sqrt(np.where(kept, variance, 0.0).sum(axis=-1)) / safe_n
    z = np.asarray(worse) * delta / np.where(se > 0, se, 1.0)
    p_value = np.where((se > 0) & (n > 0), _upper_tail(z), 1.0)
    means = [np.where(kept, m, 0.0).sum(axis=-1) / safe_n for m in (cand_means, base_means)]
    return n, means[0], means[1], delta, se, p_value


def shift_arrays(
    candidate: np.ndarray, baseline: np.ndarray, worse: np.ndarray | int = -1, bounds: tuple[float, float] = (0, 1)
) -> tuple[np.ndarray, ...]:
    """`shift_sums` on samples (..., pairs, samples), NaN where a pair has fewer."""
    return shift_sums(PairSums.of(candidate), PairSums.of(baseline), worse, bounds)


def _detectable(se: float, alpha: float) -> float:
    """The smallest shift a one-sided test at `alpha` sees POWER of the time when its standard error is `se`."""
    return (_NORMAL.inv_cdf(1 - alpha) + _NORMAL.inv_cdf(POWER)) * se


def shift_test(
    candidate: np.ndarray, baseline: np.ndarray, *, alpha: float, worse: int = -1, bounds: tuple[float, float] = (0, 1)
) -> ShiftTest:
    """Per pair (row), the run's samples and the baseline's (NaN where a pair has fewer), each within
    `bounds`; `worse` -1 tests for a drop, +1 for a rise.

    Pairs with no sample on either side are left out. With no pair left the p-value is 1; a run judged
    exactly as its baselines (a deterministic judge, unchanged) has delta 0 and never alerts."""
    n, cand, base, delta, se, p_value = (float(x) for x in shift_arrays(candidate, baseline, worse, bounds))
    if not n:
        return ShiftTest(0, math.nan, math.nan, math.nan, math.nan, 1.0, alpha, math.nan)
    return ShiftTest(int(n), cand, base, delta, se, p_value, alpha, _detectable(se, alpha))


def _correct(score: PairScore) -> tuple[float, ...]:
    return score.epoch_credits()


def _consistent(score: PairScore) -> tuple[bool, ...]:
    if score.orders != 2:
        return ()
    return score.consistent_by_epoch or (score.consistent,)


def _lean(score: PairScore) -> tuple[int, ...]:
    return score.first_lean_by_epoch or (2 * score.first_position - score.sided,)


def _matrix(rows: list[list[float]]) -> np.ndarray:
    """Rows of samples as a matrix, NaN where a row is shorter than the longest."""
    width = max((len(r) for r in rows), default=0)
    out = np.full((len(rows), width), np.nan)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


@dataclass(frozen=True)
class Samples:
    """A run's (or its baselines') samples per pair, pairs in one order: rows of per-epoch values."""

    correct: np.ndarray
    consistent: np.ndarray
    lean: np.ndarray

    @classmethod
    def of(cls, runs: Sequence[dict[str, PairScore]], pairs: Sequence[str]) -> Samples:
        def rows(field: Callable[[PairScore], tuple]) -> np.ndarray:
            return _matrix([[float(x) for run in runs for x in field(run[p])] for p in pairs])

        return cls(rows(_correct), rows(_consistent), rows(_lean))


@dataclass(frozen=True)
class RunAlerts:
    """The three tests of a run against its baseline runs."""

    accuracy: ShiftTest
    consistency: ShiftTest | None
    first_position: ShiftTest | None
    lean_direction: int  # +1: the run leans to the first shown, -1: to the second, 0: no lean

    @property
    def position_alerted(self) -> bool:
        return any(t is not None and t.alerted for t in (self.consistency, self.first_position))

    @property
    def alerted(self) -> bool:
        return self.accuracy.alerted or self.position_alerted


def decide(candidate: Samples, baseline: Samples, plan: AlertPlan) -> RunAlerts:
    """The decision: the run's samples against its baselines', each test at its share of the plan's rate.
    (benchmarks/bench_alerts.py runs nights through this function.)"""
    accuracy = shift_test(candidate.correct, baseline.correct, alpha=plan.accuracy_alpha, worse=-1)
    if not plan.position_bias:
        return RunAlerts(accuracy, None, None, 0)
    leaning = float(np.nansum(candidate.lean))
    direction = (leaning > 0) - (leaning < 0)
    consistency = shift_test(candidate.consistent, baseline.consistent, alpha=plan.position_alpha, worse=-1)
    # The direction is the run's own lean, chosen from the data: each direction gets half the test's share.
    lean_alpha = plan.position_alpha / 2
    first = (
        shift_test(candidate.lean, baseline.lean, alpha=lean_alpha, worse=direction, bounds=(-2, 2))
        if direction
        else None
    )
    return RunAlerts(accuracy, consistency, first, direction)


@dataclass(frozen=True)
class SampleSums:
    """A run's (or several runs') per-pair sums of the three measures: what the per-night tests read.
    Sums of nights add up (a baseline of five nights is their sum)."""

    correct: PairSums
    consistent: PairSums
    lean: PairSums

    @classmethod
    def of(cls, samples: Samples) -> SampleSums:
        return cls(PairSums.of(samples.correct), PairSums.of(samples.consistent), PairSums.of(samples.lean))

    def __add__(self, other: SampleSums) -> SampleSums:
        return SampleSums(self.correct + other.correct, self.consistent + other.consistent, self.lean + other.lean)


def night_alerted(candidate: SampleSums, baseline: SampleSums, plan: AlertPlan) -> np.ndarray:
    """`decide(...).alerted` for a batch of runs at once (sums with leading batch axes): the same tests
    at the same shares, for benchmarks/bench_alerts.py's thousands of nights."""
    p_acc = shift_sums(candidate.correct, baseline.correct, -1)[-1]
    alerted = p_acc < plan.accuracy_alpha
    if not plan.position_bias:
        return alerted
    direction = np.sign(candidate.lean.total.sum(axis=-1))
    p_cons = shift_sums(candidate.consistent, baseline.consistent, -1)[-1]
    p_lean = shift_sums(candidate.lean, baseline.lean, np.where(direction == 0, 1, direction), (-2, 2))[-1]
    return alerted | (p_cons < plan.position_alpha) | ((direction != 0) & (p_lean < plan.position_alpha / 2))


def run_alerts(
    candidate: dict[str, PairScore], baselines: Sequence[dict[str, PairScore]], plan: AlertPlan
) -> RunAlerts:
    """The run against the mean of `baselines`, on the pairs the run and every baseline judged."""
    shared = sorted(set(candidate).intersection(*(set(b) for b in baselines))) if baselines else []
    return decide(Samples.of([candidate], shared), Samples.of(baselines, shared), plan)


# What an unmeasured judge is assumed to wobble: the mean within-pair variance of a pair's correctness
# from one sample to the next, about what 15% of verdicts re-drawn per call gives (docs/alerts.md).
DEFAULT_WITHIN_VARIANCE = 0.1


def detectable_drop(within: float, pairs: int, epochs: int, baseline_runs: int, alpha: float) -> float:
    """The accuracy drop a run of `epochs` epochs on `pairs` pairs detects 80% of the time against
    `baseline_runs` runs alike, when the judge's within-pair variance is `within` (a fraction)."""
    if pairs <= 0:
        return math.nan
    se = math.sqrt(within * (1 / epochs + 1 / (baseline_runs * epochs)) / pairs)
    z_alpha = _NORMAL.inv_cdf(1 - alpha)
    floor = math.ceil(z_alpha**2 / (epochs * (1 + baseline_runs))) / pairs
    return max(_detectable(se, alpha), floor)


def epochs_to_detect(
    drop: float, within: float, pairs: int, baseline_runs: int, alpha: float, most: int = 100
) -> int | None:
    """The fewest epochs whose detectable drop is at most `drop` (None: not within `most`)."""
    for epochs in range(1, most + 1):
        if detectable_drop(within, pairs, epochs, baseline_runs, alpha) <= drop:
            return epochs
    return None


__all__ = [
    "DEFAULT_WITHIN_VARIANCE",
    "AlertPlan",
    "RunAlerts",
    "ShiftTest",
    "detectable_drop",
    "epochs_to_detect",
    "Samples",
    "decide",
    "night_alerted",
    "pair_variance",
    "PairSums",
    "SampleSums",
    "shift_sums",
    "run_alerts",
    "shift_arrays",
    "shift_test",
]

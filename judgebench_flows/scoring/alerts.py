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
    """How much false-alarm rate each test of one run may spend."""

    false_alarm_rate: float = 0.02
    cells: int = 1
    position_bias: bool = True

    @property
    def cell_alpha(self) -> float:
        return self.false_alarm_rate / self.cells

    @property
    def accuracy_alpha(self) -> float:
        return self.cell_alpha / 2 if self.position_bias else self.cell_alpha

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


def _pair_variances(pooled: np.ndarray, k: np.ndarray, bounds: tuple[float, float]) -> np.ndarray:
    """Each row's variance of one sample, its observed samples (NaN: none) and the prior's pooled."""
    low, high = bounds
    w = PRIOR_WEIGHT
    mean = (np.nansum(pooled, axis=1) + w * (low + high)) / (k + 2 * w)
    squares = np.nansum((pooled - mean[:, None]) ** 2, axis=1) + w * ((low - mean) ** 2 + (high - mean) ** 2)
    return squares / (k + 2 * w) * k / np.maximum(k - 1, 1)


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
    k_c, k_b = np.sum(~np.isnan(candidate), axis=1), np.sum(~np.isnan(baseline), axis=1)
    kept = (k_c > 0) & (k_b > 0)
    n = int(kept.sum())
    if not n:
        return ShiftTest(0, math.nan, math.nan, math.nan, math.nan, 1.0, alpha, math.nan)
    cand, base, k_c, k_b = candidate[kept], baseline[kept], k_c[kept], k_b[kept]
    cand_means, base_means = np.nansum(cand, axis=1) / k_c, np.nansum(base, axis=1) / k_b
    k = k_c + k_b
    variance = _pair_variances(np.concatenate([cand, base], axis=1), k, bounds) * (1 / k_c + 1 / k_b)
    delta = float(np.mean(cand_means - base_means))
    se = math.sqrt(float(variance.sum())) / n
    p_value = 1.0 if se == 0.0 else 1 - _NORMAL.cdf(worse * delta / se)
    detectable = _detectable(se, alpha)
    return ShiftTest(n, float(cand_means.mean()), float(base_means.mean()), delta, se, p_value, alpha, detectable)


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
    "run_alerts",
    "shift_test",
]

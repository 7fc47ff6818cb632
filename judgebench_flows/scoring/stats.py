"""Seeded bootstrap statistics for judge accuracy: intervals for one run, paired deltas between two runs.

JudgeBench slices are small (a few hundred pairs, some categories under a hundred), so a point accuracy
alone invites reading noise as signal. Everything here is a percentile bootstrap over *pairs* with a
fixed seed, so the same inputs always give the same numbers (reports and regression checks must not
flicker between re-runs). Resampling is vectorized: one index matrix per chunk, no Python loop per
resample.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from pydantic import BaseModel

from judgebench_flows.core.errors import UserError

# Upper bound on index-matrix elements held at once (8 bytes each: ~32 MB). Large inputs are resampled in
# chunks of resamples so memory stays flat; 2000 x 700 fits in one chunk.
_MAX_CHUNK_ELEMENTS = 4_000_000


class DeltaResult(BaseModel):
    """Candidate minus baseline accuracy over the pairs both runs judged, with its bootstrap interval.

    `p_drop` is the share of bootstrap resamples in which the candidate did NOT do worse (resampled
    delta >= 0): a one-sided, p-value-like figure for "the candidate dropped". Small means the drop is
    robust to which pairs happened to be in the set; around 0.5 means no evidence either way.
    `regressed` is True only when the whole interval is below zero (ci_high < 0) AND the point drop is
    larger than `min_drop`, i.e. the drop is bigger than sampling noise and than what the caller tolerates.
    With no pairs in common every figure is NaN, `n_pairs` is 0 and `regressed` is False.
    """

    delta: float
    ci_low: float
    ci_high: float
    n_pairs: int
    p_drop: float
    regressed: bool
    baseline_accuracy: float
    candidate_accuracy: float
    confidence: float
    min_drop: float


def _check_options(n_resamples: int, confidence: float) -> None:
    if n_resamples < 1:
        raise UserError(f"n_resamples must be at least 1, got {n_resamples}")
    if not 0.0 < confidence < 1.0:
        raise UserError(f"confidence must be strictly between 0 and 1, got {confidence}")


def _resampled_means(values: np.ndarray, rng: np.random.Generator, n_resamples: int) -> np.ndarray:
    """Means of `n_resamples` bootstrap resamples of `values` (drawn with replacement, same size)."""
    n = values.shape[0]
    chunk = max(1, _MAX_CHUNK_ELEMENTS // n)
    means = np.empty(n_resamples, dtype=float)
    for start in range(0, n_resamples, chunk):
        stop = min(start + chunk, n_resamples)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = values[idx].mean(axis=1)
    return means


def _percentile_interval(samples: np.ndarray, confidence: float) -> tuple[float, float]:
    alpha = 1.0 - confidence
    low, high = np.quantile(samples, [alpha / 2.0, 1.0 - alpha / 2.0])
    return float(low), float(high)


def bootstrap_accuracy_ci(
    correct: Sequence[float],
    *,
    seed: int = 0,
    n_resamples: int = 2000,
    confidence: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap interval for the mean of per-pair correctness (1.0 correct, 0.0 not).

    Empty input returns (nan, nan) rather than None so callers can store and compare it as floats
    without a special case; `math.isnan` tells it apart. A degenerate slice (all 1.0 or all 0.0) gives a
    zero-width interval at that value, which is what the bootstrap says: it cannot see variation that
    the sample does not contain.
    """
    _check_options(n_resamples, confidence)
    values = np.asarray(correct, dtype=float)
    if values.size == 0:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    return _percentile_interval(_resampled_means(values, rng, n_resamples), confidence)


def paired_bootstrap_delta(
    baseline: Mapping[str, float],
    candidate: Mapping[str, float],
    *,
    seed: int = 0,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    min_drop: float = 0.0,
) -> DeltaResult:
    """Did the candidate run get worse than the baseline, beyond sampling noise?

    Both mappings are pair_id -> correctness. Only pairs present in both count (a pair one run skipped
    says nothing about the difference). Pairs are resampled jointly, the same indices for both runs,
    because the two runs share their hard and easy pairs: the paired interval is much tighter than two
    independent intervals and so catches real drops that overlapping intervals would hide. Shared ids
    are sorted first: set order of strings changes between processes, and the seed must be enough to
    reproduce the result.
    """
    _check_options(n_resamples, confidence)
    if min_drop < 0:
        raise UserError(f"min_drop must be >= 0, got {min_drop}")
    shared = sorted(set(baseline) & set(candidate))
    if not shared:
        nan = math.nan
        return DeltaResult(
            delta=nan,
            ci_low=nan,
            ci_high=nan,
            n_pairs=0,
            p_drop=nan,
            regressed=False,
            baseline_accuracy=nan,
            candidate_accuracy=nan,
            confidence=confidence,
            min_drop=min_drop,
        )
    base = np.array([baseline[pid] for pid in shared], dtype=float)
    cand = np.array([candidate[pid] for pid in shared], dtype=float)
    # mean(cand[idx]) - mean(base[idx]) == mean((cand - base)[idx]): one gather instead of two.
    diff = cand - base
    delta = float(diff.mean())
    rng = np.random.default_rng(seed)
    deltas = _resampled_means(diff, rng, n_resamples)
    ci_low, ci_high = _percentile_interval(deltas, confidence)
    p_drop = float(np.mean(deltas >= 0.0))
    regressed = ci_high < 0.0 and delta < -min_drop
    return DeltaResult(
        delta=delta,
        ci_low=ci_low,
        ci_high=ci_high,
        n_pairs=len(shared),
        p_drop=p_drop,
        regressed=bool(regressed),
        baseline_accuracy=float(base.mean()),
        candidate_accuracy=float(cand.mean()),
        confidence=confidence,
        min_drop=min_drop,
    )


class McNemarResult(BaseModel):
    """Exact McNemar test of two judges (or runs) on the same pairs.

    Only discordant pairs carry information: `discordant_a_only` pairs A got right and B wrong,
    `discordant_b_only` the reverse. Under "no difference" each discordant pair is a fair coin, so the
    two-sided p-value is the exact binomial tail of the smaller count, doubled (capped at 1). With no
    discordant pairs the p-value is 1: nothing tells the two apart.
    """

    p_value: float
    discordant_a_only: int
    discordant_b_only: int


def exact_binomial_two_sided(successes: int, trials: int) -> float:
    """Two-sided exact p-value of `successes` in `trials` fair coin flips: the smaller tail doubled.

    Integer arithmetic (math.comb over 2**n), so it is exact for any n a benchmark has; Python's int/int
    division rounds the ratio correctly even when both are far beyond float range.
    """
    if trials <= 0:
        return 1.0
    low = min(successes, trials - successes)
    tail = sum(math.comb(trials, k) for k in range(low + 1))
    return min(1.0, 2 * tail / 2**trials)


def mcnemar_exact(a: Mapping[str, float], b: Mapping[str, float]) -> McNemarResult:
    """Exact McNemar test over the pairs both mappings hold (pair_id -> correctness, 1.0 or 0.0)."""
    shared = set(a) & set(b)
    a_only = sum(1 for pid in shared if a[pid] > 0.5 and b[pid] <= 0.5)
    b_only = sum(1 for pid in shared if b[pid] > 0.5 and a[pid] <= 0.5)
    return McNemarResult(
        p_value=exact_binomial_two_sided(a_only, a_only + b_only),
        discordant_a_only=a_only,
        discordant_b_only=b_only,
    )


def paired_sign_test(a: Mapping[str, float], b: Mapping[str, float]) -> McNemarResult:
    """Exact two-sided sign test over the pairs both mappings hold (pair_id -> a pair's share of units
    judged right: LLMBar scores each order apart, so 0, 0.5 or 1): discordant pairs are those where one
    side scored more. With 1.0/0.0 values it is `mcnemar_exact`."""
    shared = set(a) & set(b)
    a_only = sum(1 for pid in shared if a[pid] > b[pid])
    b_only = sum(1 for pid in shared if b[pid] > a[pid])
    return McNemarResult(
        p_value=exact_binomial_two_sided(a_only, a_only + b_only),
        discordant_a_only=a_only,
        discordant_b_only=b_only,
    )


def holm_adjusted(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input's order: the i-th smallest of m is multiplied by
    (m - i), made non-decreasing, capped at 1. Rejecting where adjusted < alpha controls the chance of any
    false "better" across all m tests at alpha (testing four categories at 5% each would not)."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    running = 0.0
    for step, index in enumerate(order):
        running = max(running, min(1.0, (m - step) * p_values[index]))
        adjusted[index] = running
    return adjusted

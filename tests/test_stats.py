"""Bootstrap statistics: reproducible, sensible intervals, and a paired test that flags real drops only."""

from __future__ import annotations

import math

import numpy as np
import pytest

from judgebench_flows.core.errors import UserError
from judgebench_flows.scoring.stats import DeltaResult, bootstrap_accuracy_ci, paired_bootstrap_delta


def correctness(n: int = 350, accuracy: float = 0.7, seed: int = 42) -> dict[str, float]:
    """pair_id -> 1.0/0.0 with exactly round(n * accuracy) correct pairs, shuffled."""
    values = np.zeros(n)
    values[: round(n * accuracy)] = 1.0
    np.random.default_rng(seed).shuffle(values)
    return {f"pair-{i:04d}": float(v) for i, v in enumerate(values)}


def flip_some(base: dict[str, float], to_wrong: int, to_right: int) -> dict[str, float]:
    """A candidate run that loses `to_wrong` correct pairs and gains `to_right` wrong ones."""
    out = dict(base)
    right = [pid for pid, v in base.items() if v == 1.0]
    wrong = [pid for pid, v in base.items() if v == 0.0]
    for pid in right[:to_wrong]:
        out[pid] = 0.0
    for pid in wrong[:to_right]:
        out[pid] = 1.0
    return out


def test_accuracy_ci_is_reproducible_and_contains_the_estimate() -> None:
    values = list(correctness().values())
    first = bootstrap_accuracy_ci(values, seed=7)
    assert first == bootstrap_accuracy_ci(values, seed=7)
    low, high = first
    assert low < np.mean(values) < high
    # Close to the normal approximation: 1.96 * sqrt(p(1-p)/n) ~ 0.048 for p=0.7, n=350.
    assert high - low == pytest.approx(2 * 1.96 * math.sqrt(0.7 * 0.3 / 350), abs=0.012)


def test_accuracy_ci_seeds_differ_slightly() -> None:
    values = list(correctness().values())
    a, b = bootstrap_accuracy_ci(values, seed=0), bootstrap_accuracy_ci(values, seed=1)
    assert a != b
    assert a == pytest.approx(b, abs=0.02)


def test_accuracy_ci_edge_cases() -> None:
    assert bootstrap_accuracy_ci([1.0] * 50) == (1.0, 1.0)
    assert bootstrap_accuracy_ci([0.0] * 50) == (0.0, 0.0)
    low, high = bootstrap_accuracy_ci([])
    assert math.isnan(low) and math.isnan(high)
    narrow = bootstrap_accuracy_ci([1.0, 0.0] * 200, confidence=0.5)
    wide = bootstrap_accuracy_ci([1.0, 0.0] * 200, confidence=0.99)
    assert wide[0] < narrow[0] < 0.5 < narrow[1] < wide[1]


def test_bad_options_are_user_errors() -> None:
    with pytest.raises(UserError, match="confidence"):
        bootstrap_accuracy_ci([1.0], confidence=95)
    with pytest.raises(UserError, match="n_resamples"):
        paired_bootstrap_delta({"a": 1.0}, {"a": 1.0}, n_resamples=0)
    with pytest.raises(UserError, match="min_drop"):
        paired_bootstrap_delta({"a": 1.0}, {"a": 1.0}, min_drop=-0.1)


def test_real_ten_point_drop_is_a_regression() -> None:
    base = correctness()
    worse = flip_some(base, to_wrong=35, to_right=0)  # exactly -10 points on 350 pairs
    result = paired_bootstrap_delta(base, worse)
    assert isinstance(result, DeltaResult)
    assert result.delta == pytest.approx(-0.10)
    assert result.n_pairs == 350
    assert result.ci_low <= result.delta <= result.ci_high < 0
    assert result.regressed
    assert result.p_drop < 0.01
    assert result.baseline_accuracy == pytest.approx(0.7) and result.candidate_accuracy == pytest.approx(0.6)


def test_identical_runs_and_small_wobble_are_not_regressions() -> None:
    base = correctness()
    same = paired_bootstrap_delta(base, dict(base))
    assert (same.delta, same.ci_low, same.ci_high, same.regressed) == (0.0, 0.0, 0.0, False)
    assert same.p_drop == 1.0  # no resample shows a drop

    wobble = paired_bootstrap_delta(base, flip_some(base, to_wrong=6, to_right=5))
    assert wobble.delta == pytest.approx(-1 / 350)
    assert wobble.ci_low < 0 < wobble.ci_high
    assert not wobble.regressed
    assert 0.2 < wobble.p_drop < 0.8


def test_improvement_is_not_a_regression() -> None:
    base = correctness()
    better = paired_bootstrap_delta(base, flip_some(base, to_wrong=0, to_right=35))
    assert better.delta == pytest.approx(0.10) and better.ci_low > 0
    assert not better.regressed and better.p_drop == 1.0


def test_min_drop_raises_the_bar() -> None:
    base = correctness()
    worse = flip_some(base, to_wrong=35, to_right=0)
    assert paired_bootstrap_delta(base, worse, min_drop=0.05).regressed
    tolerant = paired_bootstrap_delta(base, worse, min_drop=0.15)
    assert tolerant.ci_high < 0 and not tolerant.regressed


def test_pairing_beats_independent_intervals() -> None:
    """A 4-point drop on few discordant pairs: paired CI excludes 0 though the runs' own CIs overlap."""
    base = correctness()
    worse = flip_some(base, to_wrong=14, to_right=0)
    base_ci = bootstrap_accuracy_ci(list(base.values()))
    worse_ci = bootstrap_accuracy_ci(list(worse.values()))
    assert worse_ci[1] > base_ci[0]  # overlapping separate intervals
    assert paired_bootstrap_delta(base, worse).regressed


def test_only_shared_pairs_count_and_key_order_does_not_matter() -> None:
    base = correctness()
    candidate = flip_some(base, to_wrong=35, to_right=0)
    candidate["only-in-candidate"] = 0.0
    del candidate["pair-0000"]
    result = paired_bootstrap_delta(base, candidate, seed=3)
    assert result.n_pairs == 349
    reversed_base = dict(reversed(list(base.items())))
    assert paired_bootstrap_delta(reversed_base, candidate, seed=3) == result


def test_paired_delta_seeds_reproduce_and_differ_slightly() -> None:
    base = correctness()
    candidate = flip_some(base, to_wrong=30, to_right=10)
    a = paired_bootstrap_delta(base, candidate, seed=11)
    assert a == paired_bootstrap_delta(base, candidate, seed=11)
    b = paired_bootstrap_delta(base, candidate, seed=12)
    assert a.delta == b.delta
    assert (a.ci_low, a.ci_high) != (b.ci_low, b.ci_high)
    assert a.ci_low == pytest.approx(b.ci_low, abs=0.01) and a.ci_high == pytest.approx(b.ci_high, abs=0.01)


def test_no_shared_pairs_gives_nan_and_no_regression() -> None:
    result = paired_bootstrap_delta({"a": 1.0}, {"b": 0.0})
    assert result.n_pairs == 0 and not result.regressed
    assert math.isnan(result.delta) and math.isnan(result.ci_low) and math.isnan(result.p_drop)


def test_scales_to_full_runs_and_beyond() -> None:
    """No timing assert: a loop per resample would make this test visibly slow, a bug in chunking wrong."""
    base = correctness(n=700)
    result = paired_bootstrap_delta(base, flip_some(base, 70, 0), n_resamples=2000)
    assert result.regressed and result.n_pairs == 700
    # 100k pairs x 300 resamples exceeds one chunk of the index matrix: exercised in several chunks.
    big = np.random.default_rng(0).random(100_000) < 0.5
    low, high = bootstrap_accuracy_ci(big.astype(float), n_resamples=300)
    assert low < big.mean() < high and high - low < 0.01

"""Evidence that accumulates: a one-sided CUSUM over a configuration's nights against a frozen reference.

Today's per-night test (`scoring.alerts`) compares one night with the mean of the last few; at one epoch a
5-point drop on 350 pairs is mostly within that night's noise, and after a few nights the dropped nights
are the baseline. This test keeps the evidence instead (Page's CUSUM, 1954):

- the reference is the nights before a suspected change: every night since the configuration's last
  boundary (a reset, a served-build drift, a new judge) joins it while no change is suspected, until it
  holds `REFERENCE_NIGHTS`; then it is frozen. Nights of a suspected change (statistic above 0) wait, and
  join only when the suspicion ends without an alarm. A slow decline is thus measured against the nights
  before it, never against nights that declined too;
- each night gives x_t = -(its mean per-pair correctness - the reference's) / SE_night, with the judge's
  own per-pair noise (the same pooled per-pair variance as the per-night test, `alerts.pair_variance`);
- S_t = max(0, S_{t-1} + x_t - CUSUM_K); an alarm when S_t > h. Once alarmed the configuration stays
  flagged (the flow persists the flag until the reference is reset).

The false-alarm rate is controlled as a rate per night: h is chosen so that the expected alarms per night
of an unchanged judge, 1 / ARL_0 (Siegmund's approximation of the CUSUM's average run length), equals the
test's share of the night's budget (`AlertPlan.sequential_alpha`). A frozen reference has its own error,
shared by every later night: in units of a night's SE it is N(0, r^2), r = SE_reference / SE_night, and
h averages the rate over it (Gauss-Hermite). So the expected nights between false alarms of one cell are
1 / sequential_alpha, and the per-night test and this one together spend `alert_false_alarm_rate` a night
for the whole matrix. benchmarks/bench_alerts.py measures both (docs/alerts.md).

Every function works on arrays with any leading batch axes (histories in the benchmark, one configuration
in a run): pairs are the second last axis of a night's samples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

import numpy as np

from judgebench_flows.scoring.alerts import PairSums, pair_variance

CUSUM_K = 1.0  # the allowance, in a night's SE: shifts above twice it are what the CUSUM is quickest for
REFERENCE_NIGHTS = 20  # the reference is frozen once it holds this many nights
MIN_REFERENCE_NIGHTS = 3  # no statistic before the reference holds this many
_SIEGMUND = 1.166  # the overshoot correction of Siegmund's approximation for normal increments
_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(60)
_WEIGHTS = _WEIGHTS / _WEIGHTS.sum()
_NORMAL = NormalDist()


def _alarms_per_night(h: float, k: float, r: float) -> float:
    """Expected alarms per night of an unchanged judge: 1 / ARL_0 averaged over the reference's error."""
    mu = _NODES * r - k
    hp = h + _SIEGMUND
    small = np.abs(mu) < 1e-9
    m = np.where(small, 1.0, mu)
    with np.errstate(over="ignore"):
        arl = np.where(small, hp * hp, (np.exp(np.minimum(-2 * m * hp, 700)) + 2 * m * hp - 1) / (2 * m * m))
    return float(np.sum(_WEIGHTS / arl))


@lru_cache(maxsize=4096)
def threshold(alpha: float, r: float, k: float = CUSUM_K) -> float:
    """The h whose expected alarms per night is `alpha` when the reference's SE is r night SEs."""
    low, high = 0.0, 1.0
    while _alarms_per_night(high, k, r) > alpha and high < 1e4:
        low, high = high, high * 2
    for _ in range(50):
        mid = (low + high) / 2
        low, high = (mid, high) if _alarms_per_night(mid, k, r) > alpha else (low, mid)
    return high


def pooled_variance(*parts: PairSums) -> np.ndarray:
    """Each pair's variance of one sample, all parts' samples pooled: the per-night test's."""
    return pair_variance(*parts, bounds=(0.0, 1.0))


def paired_shift(tonight: PairSums, reference: PairSums, variance: np.ndarray) -> tuple[np.ndarray, ...]:
    """Mean over pairs of (tonight's mean - the reference's), and the SEs of tonight's part and the
    reference's part, over pairs seen on both sides."""
    both = (tonight.count > 0) & (reference.count > 0)
    n = both.sum(axis=-1)
    safe_n = np.maximum(n, 1)
    tc, rc = np.maximum(tonight.count, 1), np.maximum(reference.count, 1)
    diff = np.where(both, tonight.total / tc - reference.total / rc, 0.0)
    delta = diff.sum(axis=-1) / safe_n
    se_night = np.sqrt(np.where(both, variance / tc, 0.0).sum(axis=-1)) / safe_n
    se_ref = np.sqrt(np.where(both, variance / rc, 0.0).sum(axis=-1)) / safe_n
    return delta, se_night, se_ref, n


@dataclass(frozen=True)
class Watch:
    """The sequential test's state over a configuration's nights (arrays with the batch's shape).

    `reference`: the frozen reference's per-pair sums over `reference_nights` nights; `statistic`: S;
    `suspect`: the sums of the nights of the current suspected change (statistic above 0), `since` the
    index of its first night (-1: none), `alarm` the night it alarmed (-1: not), `nights` seen so far."""

    reference: PairSums
    reference_nights: np.ndarray
    statistic: np.ndarray
    suspect: PairSums
    suspect_nights: np.ndarray
    since: np.ndarray
    alarm: np.ndarray
    nights: np.ndarray
    threshold: np.ndarray

    @classmethod
    def start(cls, shape: tuple[int, ...], pairs: int) -> Watch:
        zeros = PairSums.zeros((*shape, pairs))
        ints = np.zeros(shape, dtype=int)
        return cls(zeros, ints, np.zeros(shape), zeros, ints, ints - 1, ints - 1, ints, np.full(shape, np.inf))

    @property
    def flagged(self) -> np.ndarray:
        return self.alarm >= 0

    def restarted(self, where: np.ndarray) -> Watch:
        """This watch with the configurations `where` holds started afresh (a reset: no reference, no
        flag), their night count kept."""
        fresh = Watch.start(self.statistic.shape, self.reference.count.shape[-1])
        mask = np.asarray(where)

        def pick(new: np.ndarray, old: np.ndarray) -> np.ndarray:
            return np.where(mask.reshape(mask.shape + (1,) * (old.ndim - mask.ndim)), new, old)

        def sums(new: PairSums, old: PairSums) -> PairSums:
            return PairSums(*(pick(a, b) for a, b in zip(new.fields(), old.fields(), strict=True)))

        return Watch(
            sums(fresh.reference, self.reference),
            pick(fresh.reference_nights, self.reference_nights),
            pick(fresh.statistic, self.statistic),
            sums(fresh.suspect, self.suspect),
            pick(fresh.suspect_nights, self.suspect_nights),
            pick(fresh.since, self.since),
            pick(fresh.alarm, self.alarm),
            self.nights,
            pick(fresh.threshold, self.threshold),
        )


@dataclass(frozen=True)
class Night:
    """What one night's step measured: its shift against the reference, in points and in night SEs."""

    delta: np.ndarray
    se_night: np.ndarray
    se_reference: np.ndarray
    z: np.ndarray
    pairs: np.ndarray


def step(watch: Watch, tonight: np.ndarray, alpha: float, k: float = CUSUM_K) -> tuple[Watch, Night]:
    """One night (samples (..., pairs, epochs) of per-pair correctness) through the test at a per-night
    false-alarm rate `alpha`. A flagged configuration stays flagged; its suspected change keeps
    gathering nights (what the change measures)."""
    sums = PairSums.of(tonight)
    testing = watch.reference_nights >= MIN_REFERENCE_NIGHTS
    variance = pooled_variance(watch.reference, sums)
    delta, se_night, se_ref, n = paired_shift(sums, watch.reference, variance)
    z = np.where(se_night > 0, delta / np.where(se_night > 0, se_night, 1.0), 0.0)
    r = np.where(se_night > 0, se_ref / np.where(se_night > 0, se_night, 1.0), 0.0)
    h = np.vectorize(lambda ri: threshold(alpha, round(float(ri), 3), k), otypes=[float])(r) if np.size(r) else r
    flagged = watch.flagged
    moving = testing & ~flagged
    s = np.where(moving, np.maximum(0.0, watch.statistic - z - k), watch.statistic)
    alarm = np.where(moving & (s > h), watch.nights, watch.alarm)
    suspected = testing & (s > 0) | (alarm >= 0)
    # a night of no suspicion (or before testing) joins the reference while it has room, and so do the
    # nights of a suspicion that ended without an alarm
    room = watch.reference_nights < REFERENCE_NIGHTS
    ended = ~suspected & (watch.suspect_nights > 0)
    reference = watch.reference.plus(watch.suspect, ended & room).plus(sums, ~suspected & room)
    reference_nights = watch.reference_nights + np.where(
        room & ~suspected, 1 + np.where(ended, watch.suspect_nights, 0), 0
    )
    suspect = watch.suspect.kept(suspected).plus(sums, suspected)
    suspect_nights = np.where(suspected, watch.suspect_nights + 1, 0)
    since = np.where(suspected, np.where(watch.since >= 0, watch.since, watch.nights), -1)
    updated = Watch(
        reference,
        reference_nights,
        s,
        suspect,
        suspect_nights,
        since,
        alarm,
        watch.nights + 1,
        np.where(moving, h, watch.threshold),
    )
    return updated, Night(delta, se_night, se_ref, z, n)


def change(watch: Watch) -> tuple[np.ndarray, np.ndarray]:
    """The suspected change's size (mean per-pair shift of its nights against the reference, negative a
    drop) and its SE, the judge's noise and the reference's error included."""
    variance = pooled_variance(watch.reference, watch.suspect)
    delta, se_night, se_ref, _ = paired_shift(watch.suspect, watch.reference, variance)
    return delta, np.sqrt(se_night**2 + se_ref**2)


def nights_to_detect(
    drop: float,
    within: float,
    pairs: int,
    epochs: int,
    alpha: float,
    reference_nights: int = REFERENCE_NIGHTS,
    power: float = 0.9,
    most: int = 60,
) -> int | None:
    """About how many nights a persistent drop of `drop` (a fraction) takes to be caught `power` of the
    time at this rate, when the judge's within-pair variance is `within`: the CUSUM's increments are
    normal with mean drop / SE_night - k, and its crossing is simulated (10,000 seeded paths; a planning
    figure, as `alerts.detectable_drop` is). None: not within `most` nights."""
    if pairs <= 0 or within <= 0:
        return 1 if drop > 0 else None
    se_night = math.sqrt(within / (pairs * epochs))
    r = math.sqrt(1 / reference_nights)
    h = threshold(alpha, round(r, 3))
    rng = np.random.default_rng(0)
    shifts = rng.normal(0.0, r, size=10_000)  # the reference's own error, shared by every night
    s = np.zeros(10_000)
    caught = np.zeros(10_000, dtype=bool)
    for night in range(1, most + 1):
        x = rng.normal(drop / se_night, 1.0, size=10_000) + shifts
        s = np.maximum(0.0, s + x - CUSUM_K)
        caught |= s > h
        if caught.mean() >= power:
            return night
    return None


__all__ = [
    "CUSUM_K",
    "MIN_REFERENCE_NIGHTS",
    "REFERENCE_NIGHTS",
    "Night",
    "Watch",
    "change",
    "nights_to_detect",
    "paired_shift",
    "pooled_variance",
    "step",
    "threshold",
]

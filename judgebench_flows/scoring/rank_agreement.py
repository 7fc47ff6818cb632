"""How far two rankings of the same judges agree: Kendall's tau-b, and a seeded bootstrap interval for it.

numpy only (scipy is not a dependency). Tau-b counts ties as scipy's `kendalltau` does: concordant minus
discordant pairs over sqrt((n0 - ties in x) * (n0 - ties in y)), n0 = n(n-1)/2. The bootstrap resamples
each benchmark's pairs (as every interval of this project does), recomputes every judge's score from the
resampled pairs, and takes tau-b of each resample: the interval says how much the agreement would move on
other pairs of the same kind.
"""

from __future__ import annotations

import math

import numpy as np

# Resamples scored at once: (chunk, judges, judges) sign arrays stay a few MB for tens of judges.
_CHUNK = 256


def kendall_tau_b(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Tau-b of each row of `x` against the same row of `y` (shape (..., n)); nan where a ranking is all ties."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = x.shape[-1]
    upper = np.triu(np.ones((n, n), dtype=bool), k=1)
    dx = np.sign(x[..., :, None] - x[..., None, :])[..., upper]
    dy = np.sign(y[..., :, None] - y[..., None, :])[..., upper]
    pairs = n * (n - 1) / 2
    concordance = (dx * dy).sum(axis=-1)
    untied_x = pairs - (dx == 0).sum(axis=-1)
    untied_y = pairs - (dy == 0).sum(axis=-1)
    denominator = np.sqrt(untied_x * untied_y)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, concordance / np.where(denominator > 0, denominator, 1), np.nan)


def resampled_means(correct: np.ndarray, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """(resamples, judges): each judge's mean over one bootstrap draw of the pairs (columns of `correct`,
    shape (judges, pairs), nan where a judge has no verdict on a pair), the same draw for every judge."""
    judges, pairs = correct.shape
    if pairs == 0:
        return np.full((resamples, judges), np.nan)
    counts = rng.multinomial(pairs, np.full(pairs, 1 / pairs), size=resamples).astype(float)
    present = ~np.isnan(correct)
    totals = counts @ np.where(present, correct, 0.0).T
    weights = counts @ present.T.astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(weights > 0, totals / np.where(weights > 0, weights, 1), np.nan)


def percentile_interval(samples: np.ndarray, confidence: float = 0.95) -> tuple[float | None, float | None]:
    """The central `confidence` interval of the finite samples (None, None when there are none)."""
    finite = samples[np.isfinite(samples)]
    if finite.size == 0:
        return None, None
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(finite, [tail, 100 - tail])
    return round(float(low), 6), round(float(high), 6)


def tau_point(x: list[float], y: list[float]) -> float | None:
    value = float(kendall_tau_b(np.asarray(x), np.asarray(y)))
    return None if math.isnan(value) else round(value, 6)


def tau_interval(x_samples: np.ndarray, y_samples: np.ndarray) -> tuple[float | None, float | None]:
    """The 95% percentile interval of tau-b over paired resamples ((resamples, judges) each)."""
    taus = np.concatenate(
        [
            kendall_tau_b(x_samples[start : start + _CHUNK], y_samples[start : start + _CHUNK])
            for start in range(0, len(x_samples), _CHUNK)
        ]
    )
    return percentile_interval(taus)


__all__ = ["kendall_tau_b", "percentile_interval", "resampled_means", "tau_interval", "tau_point"]

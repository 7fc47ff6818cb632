"""A judge's own noise: how much its verdicts wobble from one sample of a prompt to the next.

A judge sampled at temperature > 0 (every reasoning model) or served by a non-deterministic stack gives
another verdict to some prompts each time it is asked. An accuracy without that noise is read as more
precise than it is, and two runs of an unchanged judge look like a change. Following Miller ("Adding Error
Bars to Evals", 2024), a pair is the unit: its K epochs and both orders are one cluster, and the variance
of the accuracy splits into the spread between pairs and the judge's noise within a pair:

- per pair i, correctness c_ik in {0, 1} for each epoch k (JudgeBench's rule on that epoch's orders; under
  LLMBar's the share of its orders right, 0, 0.5 or 1) and
  its mean m_i over the K epochs;
- within (the judge's noise): the mean over pairs of the unbiased variance of c_ik, K/(K-1) * m_i(1-m_i);
- between (which pairs are hard): var(m_i) - within / K, at least 0;
- clustered standard error of the accuracy: sd(m_i) / sqrt(n), so the interval counts both;
- run-to-run SD: sqrt(within / (n K)), how far another run of this judge on these same pairs would land;
- self-agreement: for each prompt (pair and order), the share of its K samples' pairs that agree.

With one epoch a run has no second sample of its own: the noise is then measured from the run and its
configuration's recent finished runs taken as epochs, which holds only while the judge did not change
(`source` "runs" says so). Every figure can be computed by hand from the judgments JSONL (docs/noise.md).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

from judgebench_flows.scoring.metrics import PairScore
from judgebench_flows.scoring.result_types import JudgeNoise

Z95 = 1.959963984540054


def _self_agreement(scores: Sequence[PairScore]) -> float | None:
    """The share of a prompt's sample pairs that agree, averaged over prompts with two samples or more."""
    shares = []
    for score in scores:
        for decisions in score.decisions:
            k = len(decisions)
            if k < 2:
                continue
            counts: dict[str, int] = {}
            for decision in decisions:
                counts[decision] = counts.get(decision, 0) + 1
            shares.append(sum(c * (c - 1) for c in counts.values()) / (k * (k - 1)))
    return round(float(np.mean(shares)), 6) if shares else None


def correctness_matrix(scores: Sequence[PairScore]) -> np.ndarray:
    """Pairs x epochs of 0/1 correctness, for the pairs judged in every epoch of the widest."""
    epochs = max((s.epochs for s in scores), default=1)
    rows = [s.epoch_credits() for s in scores if len(s.correct_by_epoch) == epochs]
    return np.asarray(rows, dtype=float).reshape(len(rows), epochs)


def measure_noise(
    scores: Sequence[PairScore], source: Literal["epochs", "runs"] = "epochs", run_epochs: int | None = None
) -> JudgeNoise | None:
    """The noise over these pairs' epochs (None with fewer than two epochs or no pairs).

    `run_epochs`: with `source` "runs", the epochs of the run described (its first columns): the noise
    is measured over every run, the interval and run-to-run SD are that run's, with its own epochs."""
    c = correctness_matrix(scores)
    n, k = c.shape
    if n == 0 or k < 2:
        return None
    m = c.mean(axis=1)
    within = float(np.mean(k / (k - 1) * m * (1 - m)))
    spread = float(np.var(m, ddof=1)) if n > 1 else 0.0
    between = max(0.0, spread - within / k)
    own = run_epochs or k  # the samples per pair of the run the figures describe
    se = math.sqrt((between + within / own) / n) if run_epochs else math.sqrt(spread / n)
    accuracy = float(c[:, :own].mean())
    noise = JudgeNoise(
        source=source,
        epochs=k,
        pairs=n,
        self_agreement=_self_agreement(scores),
        varying_pairs=round(float(np.mean((m > 0) & (m < 1))), 6),
        within_variance=round(within, 6),
        between_variance=round(between, 6),
        noise_share=round(within / (within + between), 6) if within + between > 0 else None,
        clustered_se=round(se, 6),
        ci_low=round(max(0.0, accuracy - Z95 * se), 6),
        ci_high=round(min(1.0, accuracy + Z95 * se), 6),
        run_to_run_sd=round(math.sqrt(within / (n * own)), 6),
    )
    noise.message = describe(noise)
    return noise


def as_epochs(runs: Sequence[dict[str, PairScore]]) -> list[PairScore]:
    """Several one-epoch runs of a configuration as the epochs of one run, over the pairs all of them
    judged (a run's epochs in order, then the next run's)."""
    shared = sorted(set.intersection(*(set(run) for run in runs))) if runs else []
    merged = []
    for pair_id in shared:
        parts = [run[pair_id] for run in runs]
        first = parts[0]
        orders = max(len(p.decisions) for p in parts)
        merged.append(
            PairScore(
                source=first.source,
                category=first.category,
                score=sum(p.score for p in parts),
                valid=all(p.valid for p in parts),
                orders=first.orders,
                consistent=all(p.consistent for p in parts),
                first_position=sum(p.first_position for p in parts),
                sided=sum(p.sided for p in parts),
                epochs=sum(p.epochs for p in parts),
                correct_by_epoch=tuple(c for p in parts for c in (p.correct_by_epoch or (p.score > 0,))),
                consistent_by_epoch=tuple(c for p in parts for c in (p.consistent_by_epoch or (p.consistent,))),
                first_lean_by_epoch=tuple(c for p in parts for c in p.first_lean_by_epoch),
                decisions=tuple(
                    tuple(d for p in parts if o < len(p.decisions) for d in p.decisions[o]) for o in range(orders)
                ),
                units=first.units,
            )
        )
    return merged


def stored_noise_figure(results_json: str | None, name: str) -> float | None:
    """One figure of a stored run's `noise` (results.json's), else None."""
    text = results_json or ""
    if '"noise"' not in text:  # most one-epoch runs without history: not worth parsing
        return None
    try:
        value = (json.loads(text).get("noise") or {}).get(name)
    except (ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, (int, float)) else None


def stored_noise_sd(results_json: str | None) -> float | None:
    """A stored run's judge noise, run to run (`noise.run_to_run_sd`), else None."""
    return stored_noise_figure(results_json, "run_to_run_sd")


def describe(noise: JudgeNoise) -> str:
    """The noise in one line, as the summary, report and history say it."""
    where = f"{noise.epochs} epochs" if noise.source == "epochs" else f"this run and {noise.epochs - 1} earlier runs"
    agreement = f"self-agreement {noise.self_agreement:.1%}, " if noise.self_agreement is not None else ""
    share = f"{noise.noise_share:.0%} of the variance" if noise.noise_share is not None else "no variance"
    line = (
        f"judge noise over {where}: {agreement}{noise.varying_pairs or 0:.1%} of pairs vary, {share} is the judge's own; "
        f"run-to-run SD {noise.run_to_run_sd * 100:.1f} points"
    )
    if noise.source == "runs":
        line += " (measured across runs: assumes the judge did not change)"
    return line


__all__ = [
    "JudgeNoise",
    "as_epochs",
    "correctness_matrix",
    "describe",
    "measure_noise",
    "stored_noise_figure",
    "stored_noise_sd",
]

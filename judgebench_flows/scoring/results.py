"""Assemble results.json (the published contract) and the JudgeBench-shaped JSONL from judgment records.

Also the regression check: a run is compared with the previous successful run of the same configuration
by a seeded paired bootstrap over the pairs both judged.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from judgebench_flows.core.errors import PathNotWritable
from judgebench_flows.core.records import JudgmentRecord, Pair
from judgebench_flows.data import storage
from judgebench_flows.scoring import metrics, stats
from judgebench_flows.scoring.result_types import Measured, Regression, SliceAccuracy


def slice_accuracy(
    members: list[metrics.PairScore], seed: int, resamples: int, known: SliceAccuracy | None = None
) -> SliceAccuracy:
    """One slice's accuracy with its seeded 95% bootstrap interval (results.json's and the leaderboard's).

    `known`: the same slice as a run stored it, scored with this seed and these resamples (the caller
    checks that): when its counts are these, its interval is this one, read instead of drawn again (the
    leaderboard of 50 configurations spent seconds re-drawing what each run's results already hold)."""
    data = SliceAccuracy.model_validate(metrics.accuracy_of(members).model_dump())
    if known is not None and known.ci_low is not None and known.ci_high is not None and _same_counts(data, known):
        data.ci_low, data.ci_high = known.ci_low, known.ci_high
        return data
    correct = [1.0 if s.correct else 0.0 for s in members]
    if resamples and correct:
        low, high = stats.bootstrap_accuracy_ci(correct, seed=seed, n_resamples=resamples)
        data.ci_low, data.ci_high = round(float(low), 6), round(float(high), 6)
    return data


def _same_counts(a: SliceAccuracy, b: SliceAccuracy) -> bool:
    return (a.accuracy, a.correct_count, a.valid_samples, a.total_samples) == (
        b.accuracy,
        b.correct_count,
        b.valid_samples,
        b.total_samples,
    )


def build_results(tally: metrics.Tally, *, seed: int, bootstrap_resamples: int, skipped_rows: int = 0) -> Measured:
    """results.json's measurement: accuracy (with 95% bootstrap intervals) and diagnostics."""
    parts = metrics.slices(tally.scores)
    sliced = partial(slice_accuracy, seed=seed, resamples=bootstrap_resamples)
    return Measured(
        overall_accuracy=sliced(parts["overall"]["overall"]),
        category_accuracy={name: sliced(members) for name, members in parts["category"].items()},
        source_accuracy={name: sliced(members) for name, members in parts["source"].items()},
        consistency=metrics.consistency(tally.scores),
        invalid=tally.invalid_counts(skipped_rows),
        usage=tally.usage_totals(),
    )


def correctness_of(scores: dict[str, metrics.PairScore]) -> dict[str, float]:
    """pair_id -> 1.0 if the pair was judged correctly, else 0.0 (what the regression bootstrap compares)."""
    return {pair_id: 1.0 if s.correct else 0.0 for pair_id, s in scores.items()}


def regression_check(
    baseline: dict[str, float],
    candidate: dict[str, float],
    *,
    baseline_run_id: str,
    seed: int,
    resamples: int,
    min_drop: float,
) -> Regression:
    result = stats.paired_bootstrap_delta(
        baseline, candidate, seed=seed, n_resamples=max(resamples, 200), min_drop=min_drop
    )
    if result.regressed:
        message = (
            f"accuracy dropped by {-result.delta * 100:.1f} points against run {baseline_run_id[:8]} "
            f"(95% CI of the change {result.ci_low * 100:+.1f} to {result.ci_high * 100:+.1f} points"
            f" over {result.n_pairs} pairs): regression"
        )
    else:
        message = f"change {result.delta * 100:+.1f} points against run {baseline_run_id[:8]} is within sampling noise"
    return Regression.of(result, baseline_run_id=baseline_run_id, message=message)


def jsonl_rows(pairs: list[Pair], judgments: list[JudgmentRecord], judge_name: str) -> Iterable[dict[str, Any]]:
    """JudgeBench's outputs/ record shape: the pair plus `judgments`, so its own scripts read our files."""
    by_pair: dict[str, list[JudgmentRecord]] = {}
    for judgment in judgments:
        by_pair.setdefault(judgment.pair_id, []).append(judgment)
    for pair in pairs:
        records = sorted(by_pair.get(pair.pair_id, []), key=lambda r: r.order)
        if not records:
            continue
        row = pair.model_dump(exclude={"swapped"} if not pair.swapped else set())
        row["judge_name"] = judge_name
        row["judgments"] = [
            {
                "judgment": {"judge_model": r.judge_model, "prompt": r.prompt, "response": r.response}
                if r.scores is None
                else {"judge_model": r.judge_model, "scores": r.scores},
                "decision": r.decision or None,
                "status": r.status,
                "error": r.error,
                "order": r.order,
            }
            for r in records
        ]
        yield row


def write_atomic(path: str | Path, text: str, option: str = "--output-dir") -> Path:
    """Write via a temporary file and rename, so readers never see half a file after a crash; an
    object-store URL (`s3://...`) is written with one PUT (data.storage) and returned as it was given.
    A local write that fails (a full disk, no permission) leaves no temporary file behind and raises
    `PathNotWritable` naming the folder and its `option`."""
    if storage.is_url(path):
        return storage.write_text(path, text)  # type: ignore[return-value]  # a URL stays a str
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise PathNotWritable.of(option, path.parent, exc) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise PathNotWritable.of(option, path.parent, exc) from None
    return path


def write_json(path: str | Path, data: BaseModel, option: str = "--result-path") -> Path:
    """A model as indented UTF-8 JSON, in its fields' order (results.json, the leaderboard, a rescore)."""
    return write_atomic(path, json.dumps(data.model_dump(), indent=2, ensure_ascii=False, default=str) + "\n", option)


def write_jsonl(path: str | Path, rows: Iterable[dict[str, Any]], option: str = "--output-dir") -> Path:
    return write_atomic(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), option)

"""Assemble results.json (the published contract) and the JudgeBench-shaped JSONL from judgment records.

The regression check is `scoring.regression` (against the configuration's recent runs, `scoring.alerts`).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from functools import partial
from pathlib import Path

from pydantic import BaseModel, JsonValue

from judgebench_flows.core.errors import PathNotWritable
from judgebench_flows.core.records import JudgmentRecord, Pair
from judgebench_flows.data import storage
from judgebench_flows.scoring import metrics, stats
from judgebench_flows.scoring.noise import measure_noise
from judgebench_flows.scoring.result_types import Measured, SliceAccuracy


def slice_accuracy(
    members: list[metrics.PairScore], seed: int, resamples: int, known: SliceAccuracy | None = None
) -> SliceAccuracy:
    """One slice's accuracy with its seeded 95% bootstrap interval (results.json's and the leaderboard's).

    `known`: the same slice as a run stored it, scored with this seed and these resamples (the caller
    checks that): when its counts are these, its interval is this one, read instead of drawn again (the
    leaderboard of 50 configurations spent seconds re-drawing what each run's results already hold)."""
    data = SliceAccuracy.model_validate(metrics.accuracy_of(members).model_dump())
    if data.epochs == 1:
        data.epochs = None  # written only with several epochs: a one-epoch slice is what it always was
    if known is not None and known.ci_low is not None and known.ci_high is not None and _same_counts(data, known):
        data.ci_low, data.ci_high = known.ci_low, known.ci_high
        return data
    correct = [s.correctness for s in members]  # a pair's epochs one cluster: resampled together
    if resamples and correct:
        low, high = stats.bootstrap_accuracy_ci(correct, seed=seed, n_resamples=resamples)
        data.ci_low, data.ci_high = round(float(low), 6), round(float(high), 6)
    return data


def _same_counts(a: SliceAccuracy, b: SliceAccuracy) -> bool:
    return (a.accuracy, a.correct_count, a.valid_samples, a.total_samples, a.epochs) == (
        b.accuracy,
        b.correct_count,
        b.valid_samples,
        b.total_samples,
        b.epochs,
    )


def build_results(tally: metrics.Tally, *, seed: int, bootstrap_resamples: int, skipped_rows: int = 0) -> Measured:
    """results.json's measurement: accuracy (with 95% bootstrap intervals) and diagnostics."""
    parts = metrics.slices(tally.scores, tally.categories)
    sliced = partial(slice_accuracy, seed=seed, resamples=bootstrap_resamples)
    everyone = parts["overall"]["overall"]
    epochs = max((score.epochs for score in everyone), default=1)
    return Measured(
        overall_accuracy=sliced(parts["overall"]["overall"]),
        category_accuracy={name: sliced(members) for name, members in parts["category"].items()},
        source_accuracy={name: sliced(members) for name, members in parts["source"].items()},
        consistency=metrics.consistency(tally.scores),
        invalid=tally.invalid_counts(skipped_rows),
        usage=tally.usage_totals(),
        epochs=epochs,
        epoch_accuracy=metrics.epoch_accuracies(everyone) if epochs > 1 else None,
        noise=measure_noise(everyone),
    )


def correctness_of(scores: dict[str, metrics.PairScore]) -> dict[str, float]:
    """pair_id -> the share of its epochs that judged the pair correctly (1.0 or 0.0 with one epoch): what
    the paired comparisons resample, each pair with all its epochs as one cluster."""
    return {pair_id: s.correctness for pair_id, s in scores.items()}


def jsonl_rows(pairs: list[Pair], judgments: list[JudgmentRecord], judge_name: str) -> Iterable[dict[str, JsonValue]]:
    """JudgeBench's outputs/ record shape: the pair plus `judgments`, so its own scripts read our files.

    With `--epochs K` a pair has one line per epoch, each with its `epoch` (0..K-1) beside `pair_id`:
    JudgeBench's scorer, which scores each line, then gives the mean of the K epochs' accuracies, as we
    do. One epoch writes what it always wrote (no `epoch` key)."""
    by_pair: dict[tuple[str, int], list[JudgmentRecord]] = {}
    for judgment in judgments:
        by_pair.setdefault((judgment.pair_id, judgment.epoch), []).append(judgment)
    epochs = 1 + max((epoch for _, epoch in by_pair), default=0)
    for pair in pairs:
        for epoch in range(epochs):
            row = _jsonl_row(pair, by_pair.get((pair.pair_id, epoch), []), judge_name, epoch if epochs > 1 else None)
            if row is not None:
                yield row


def _jsonl_row(
    pair: Pair, judged: list[JudgmentRecord], judge_name: str, epoch: int | None
) -> dict[str, JsonValue] | None:
    """One line: the pair and its judgments of one epoch in order (None when it has none)."""
    records = sorted(judged, key=lambda r: r.order)
    if not records:
        return None
    row = pair.model_dump(exclude={"swapped"} if not pair.swapped else set())
    if epoch is not None:
        row["epoch"] = epoch
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
    return row


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


def write_jsonl(path: str | Path, rows: Iterable[Mapping[str, object]], option: str = "--output-dir") -> Path:
    return write_atomic(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), option)

"""Aggregate row verdicts into the run's result: counts, mean and the shape of the score distribution.

The mean is over scored rows only: NA means "cannot be evaluated" and errors mean "not evaluated", and
folding either in as 0 would blame the model for the judge's limits. Both are counted instead, so a
high mean over few scored rows is visible as such.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from typing import Any

from pydantic import BaseModel

from judgebench_flows.judges.external.scoring import RowResult

BINS = 10
# Exact value counts are listed when there are at most this many distinct scores (e.g. 0/1 judges).
MAX_DISTINCT_VALUES = 10
MAX_ERROR_EXAMPLES = 5


class HistogramBin(BaseModel):
    lower: float
    upper: float
    count: int


class ScoreDistribution(BaseModel):
    """Counts in 10 equal bins over [0, 1] (the last one includes 1.0), plus order statistics."""

    bins: list[HistogramBin]
    min: float | None
    max: float | None
    median: float | None
    # str(score) -> count, ascending by score; None when there are more than MAX_DISTINCT_VALUES.
    value_counts: dict[str, int] | None


class ErrorExample(BaseModel):
    qid: Any
    error: str


class ExternalRunResult(BaseModel):
    judge_path: str
    judge_function: str
    judge_form: str
    data_path: str
    output_files: list[str]
    result_path: str
    total: int
    scored: int
    na: int
    errors: int
    mean_score: float | None
    distribution: ScoreDistribution
    # The first few errored rows, by qid (row position when there is no qid column).
    error_examples: list[ErrorExample]
    flow_run_id: str | None = None


def bin_index(score: float) -> int:
    """Which of the 10 bins [k/10, (k+1)/10) holds the score; 1.0 goes in the last one.

    Rounded to 9 decimals first, so 0.3 (stored as 0.29999999999999999) lands in [0.3, 0.4) as a reader
    expects; numpy.histogram would put it in [0.2, 0.3) because its edge 0.30000000000000004 is above it.
    """
    return min(math.floor(round(score * BINS, 9)), BINS - 1)


def distribution(scores: list[float]) -> ScoreDistribution:
    counts = Counter(bin_index(score) for score in scores)
    bins = [HistogramBin(lower=i / BINS, upper=(i + 1) / BINS, count=counts[i]) for i in range(BINS)]
    distinct = Counter(scores)
    value_counts = (
        {str(value): distinct[value] for value in sorted(distinct)} if len(distinct) <= MAX_DISTINCT_VALUES else None
    )
    return ScoreDistribution(
        bins=bins,
        min=min(scores) if scores else None,
        max=max(scores) if scores else None,
        median=float(statistics.median(scores)) if scores else None,
        value_counts=value_counts,
    )


def summarize(results: list[RowResult], qids: list[Any], **about: Any) -> ExternalRunResult:
    """The run result; `about` fills the descriptive fields (judge_path, data_path, output_files, ...)."""
    scores = [result.score for result in results if result.status == "scored" and result.score is not None]
    errors = [(qid, result.error) for qid, result in zip(qids, results, strict=False) if result.status == "error"]
    return ExternalRunResult(
        total=len(results),
        scored=len(scores),
        na=sum(result.status == "na" for result in results),
        errors=len(errors),
        mean_score=sum(scores) / len(scores) if scores else None,
        distribution=distribution(scores),
        error_examples=[ErrorExample(qid=qid, error=error) for qid, error in errors[:MAX_ERROR_EXAMPLES]],
        **about,
    )


def to_markdown(result: ExternalRunResult) -> str:
    """The summary as shown in the Prefect UI artifact."""
    mean = "n/a" if result.mean_score is None else f"{result.mean_score:.4f}"
    lines = [
        f"# External judge `{result.judge_function}` ({result.judge_form} form)",
        "",
        f"Judge file: `{result.judge_path}`  ",
        f"Data: `{result.data_path}`  ",
        f"Output: {', '.join(f'`{path}`' for path in result.output_files)}  ",
        f"Summary: `{result.result_path}`",
        "",
        "| rows | scored | NA | errors | mean score (scored rows) |",
        "| ---: | ---: | ---: | ---: | ---: |",
        f"| {result.total} | {result.scored} | {result.na} | {result.errors} | {mean} |",
        "",
        "## Score distribution",
        "",
    ]
    dist = result.distribution
    if dist.min is not None:
        lines += [f"min {dist.min:g}, median {dist.median:g}, max {dist.max:g}", ""]
    lines += ["| bin | count |", "| --- | ---: |"]
    for index, bin_ in enumerate(dist.bins):
        closing = "]" if index == len(dist.bins) - 1 else ")"
        lines.append(f"| [{bin_.lower:g}, {bin_.upper:g}{closing} | {bin_.count} |")
    if dist.value_counts:
        lines += ["", "| score | count |", "| ---: | ---: |"]
        lines += [f"| {value} | {count} |" for value, count in dist.value_counts.items()]
    if result.error_examples:
        lines += ["", "## First errors", "", "| qid | error |", "| --- | --- |"]
        for example in result.error_examples:
            text = example.error.replace("|", "\\|")
            lines.append(f"| {example.qid} | {text} |")
    return "\n".join(lines) + "\n"

"""A single self-contained HTML report for one benchmark run: figures, charts, trend and every judgment.

The report is meant to be mailed, attached to a Prefect artifact or opened from disk years later, so it
carries no JavaScript and loads nothing external: charts are inline SVG whose geometry is computed in
scoring/report_charts.py (the template only draws), and each judgment's raw output and prompt sit in
`<details>` elements.

Judge output and prompts are arbitrary text (they do contain `<script>` and `&`), so the template runs
in a sandboxed Jinja2 environment with autoescape on, and links are only made from http(s) URLs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Any

from jinja2 import Template
from jinja2.sandbox import SandboxedEnvironment
from pydantic import BaseModel
from typing_extensions import TypedDict

from judgebench_flows.core.pricing import format_usd
from judgebench_flows.core.records import CATEGORIES, JudgmentRecord, category_of, flip
from judgebench_flows.core.text import page_text
from judgebench_flows.scoring.report_charts import (
    HistoryPoint,
    bar_chart,
    bias_chart,
    history_point,
    trend_chart,
    trend_points,
)
from judgebench_flows.scoring.report_charts import count as _count
from judgebench_flows.scoring.report_charts import fmt_time as _fmt_time
from judgebench_flows.scoring.report_charts import num as _num
from judgebench_flows.scoring.report_charts import parse_time as _parse_time
from judgebench_flows.scoring.report_charts import pct as _pct
from judgebench_flows.scoring.result_types import Regression, SliceAccuracy, Usage
from judgebench_flows.scoring.run_results import DatasetInfo, RunResults

TEMPLATE_NAME = "report.html.jinja2"
# Prompts repeat the pair's question and both responses (~10 KB each); showing them in full would make a
# 1,240-judgment report tens of MB. The judge's raw response is always shown in full: it is the evidence.
PROMPT_PREVIEW_CHARS = 4000

_STATUS_RANK = {"failed": 0, "invalid": 1, "ok": 2}


@lru_cache(maxsize=1)
def _template() -> Template:
    """Compile the packaged template once per process (it is shipped as package data of `templates`)."""
    source = files("judgebench_flows.templates").joinpath(TEMPLATE_NAME).read_text(encoding="utf-8")
    env = SandboxedEnvironment(autoescape=True, trim_blocks=True, lstrip_blocks=True, finalize=page_text)
    return env.from_string(source)


def _signed_points(value: Any) -> str:
    """A difference of accuracies in percentage points, always with its sign (the unit said once, after)."""
    number = _num(value)
    return "–" if number is None else f"{number * 100:+.1f}"


def _duration(started: Any, finished: Any) -> str:
    start, end = _parse_time(started), _parse_time(finished)
    if start is None or end is None or (start.tzinfo is None) != (end.tzinfo is None):
        return "–"
    seconds = int((end - start).total_seconds())
    if seconds < 0:
        return "–"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes:02d}m {secs:02d}s" if hours else f"{minutes}m {secs:02d}s"


def _safe_url(value: Any) -> str | None:
    """Only http(s) URLs become links: a `javascript:` URL would run on click even with escaping."""
    if isinstance(value, str) and value.lower().startswith(("https://", "http://")):
        return value
    return None


def _ordered(slices: Mapping[str, SliceAccuracy], preferred: Sequence[str] = ()) -> list[str]:
    """Known names in their canonical order first, then the rest alphabetically."""
    names = [name for name in preferred if name in slices]
    return names + sorted(name for name in slices if name not in names)


def _source_sort_key(source: str) -> tuple[int, str]:
    """Sources grouped under their category in canonical order (unknown categories last), then by name."""
    category = category_of(source)
    rank = CATEGORIES.index(category) if category in CATEGORIES else len(CATEGORIES)
    return rank, source


class JudgmentView(BaseModel):
    """One judgment as the report lists it, formatted."""

    pair_id: str
    source: str
    order: int
    label: str
    decision: str
    decision_for_pair: str
    match: str
    status: str
    latency: str
    response: str
    error: str | None
    judge_model: str
    prompt: str
    prompt_chars: str
    prompt_truncated: bool


def _judgment_rows(judgments: Sequence[JudgmentRecord]) -> list[JudgmentView]:
    """Display rows, failed then invalid then ok, otherwise in the given order (stable sort)."""
    rows = []
    for j in judgments:
        for_pair = j.decision_for_pair or (flip(j.decision) if j.order == 1 else j.decision)
        latency = _num(j.latency_s)
        rows.append(
            JudgmentView(
                pair_id=j.pair_id,
                source=j.source,
                order=j.order,
                label=j.label,
                decision=j.decision,
                decision_for_pair=for_pair,
                match="" if not for_pair else ("✓" if for_pair == j.label else "✗"),
                status=j.status,
                latency="–" if latency is None else f"{latency:.1f} s",
                response=j.response,
                error=j.error,
                judge_model=j.judge_model,
                prompt=j.prompt[:PROMPT_PREVIEW_CHARS],
                prompt_chars=f"{len(j.prompt):,}",
                prompt_truncated=len(j.prompt) > PROMPT_PREVIEW_CHARS,
            )
        )
    rows.sort(key=lambda r: _STATUS_RANK.get(r.status, 0))
    return rows


# What each request rule (calls/request_rules.py) means, for a reader who has never seen the rule names.
REQUEST_RULE_WORDS = {
    "standard": "as ordinary chat requests: the judge's messages and sampling parameters unchanged",
    "o1": "as JudgeBench sends o1 models, with no sampling parameters",
    "reasoning": "as reasoning models (o3, o4, gpt-5) accept them: default sampling only",
}


class RegressionView(BaseModel):
    regressed: bool
    baseline_run_id: str
    figures: str
    message: str


def _regression_view(regression: Regression) -> RegressionView:
    """The check's message already gives the change in points: the figures are shown only without one,
    so the banner says it once."""
    interval = (
        f" (95% CI {_signed_points(regression.ci_low)} to {_signed_points(regression.ci_high)} points)"
        if _num(regression.ci_low) is not None and _num(regression.ci_high) is not None
        else ""
    )
    return RegressionView(
        regressed=regression.regressed,
        baseline_run_id=regression.baseline_run_id or "?",
        figures="" if regression.message else f"{_signed_points(regression.delta)} points{interval}",
        message=regression.message,
    )


class DatasetView(BaseModel):
    repo_url: str
    repo_link: str | None
    commit: str
    commit_short: str
    data_file: str
    n_pairs: str
    skipped_rows: str


def _dataset_view(dataset: DatasetInfo) -> DatasetView:
    commit = dataset.commit or ""
    return DatasetView(
        repo_url=dataset.repo_url or "",
        repo_link=_safe_url(dataset.repo_url),
        commit=commit or "–",
        commit_short=commit[:12] or "–",
        data_file=dataset.data_file or "–",
        n_pairs=_count(dataset.n_pairs),
        skipped_rows=_count(dataset.skipped_rows),
    )


class OverallView(BaseModel):
    accuracy: str
    interval: str | None
    correct: str
    total: str
    valid: str
    unit: str = "pairs"  # what `correct` and `total` count: pairs, or with epochs each pair's epochs


def _official_view(results: RunResults) -> list[tuple[str, str]]:
    """The benchmark's own statistics (results.json's `official`), each value as its code wrote it."""
    return [
        (key, f"{value:.6f}" if isinstance(value, float) else str(value))
        for key, value in (results.official or {}).items()
    ]


def benchmark_title(name: str | None) -> str:
    """The benchmark as a page names it (JudgeBench for runs that name none)."""
    from judgebench_flows.core import benchmarks

    return benchmarks.get(name).title if name in benchmarks.BENCHMARKS else "JudgeBench"


def _overall_view(overall: SliceAccuracy, orders_apart: bool = False) -> OverallView:
    """`orders_apart`: a benchmark whose rule scores each order's verdict apart (LLMBar's): its correct
    count is of verdicts, two a pair."""
    epochs = overall.epochs or 1  # with --epochs K each pair counts K times: correct_count is over pair-epochs
    if orders_apart:
        total, unit = (
            overall.total_samples * epochs * 2,
            f"verdicts ({overall.total_samples} pairs, each order scored apart)",
        )
    elif epochs == 1:
        total, unit = overall.total_samples, "pairs"
    else:
        total, unit = overall.total_samples * epochs, f"pair-epochs ({overall.total_samples} pairs x {epochs} epochs)"
    return OverallView(
        accuracy=_pct(overall.accuracy),
        interval=(
            f"{_pct(overall.ci_low)} – {_pct(overall.ci_high)}"
            if _num(overall.ci_low) is not None and _num(overall.ci_high) is not None
            else None
        ),
        correct=_count(overall.correct_count),
        total=_count(total),
        valid=_count(overall.valid_samples),
        unit=unit,
    )


class UsageView(BaseModel):
    calls: str
    cached_calls: str
    prompt_tokens: str
    completion_tokens: str
    reasoning_tokens: str | None
    cost: str | None


def _usage_view(usage: Usage) -> UsageView:
    return UsageView(
        calls=_count(usage.calls),
        cached_calls=_count(usage.cached_calls),
        prompt_tokens=_count(usage.prompt_tokens),
        completion_tokens=_count(usage.completion_tokens),
        reasoning_tokens=_count(usage.reasoning_tokens) if usage.reasoning_tokens else None,
        cost=_cost(usage),
    )


def _cost(usage: Usage) -> str | None:
    """The run's dollars with the date of the prices, "unpriced", or None for a run from before costs."""
    if not usage.priced:
        return None
    prices = usage.price
    if usage.dollars is None:
        return format_usd(None)
    batch = " batch" if prices.batch else ""
    return f"{format_usd(usage.dollars)} (prices of {prices.model}{batch}, read {prices.read_on or '?'})"


def _invalid_count(results: RunResults, name: str, counted: int | None) -> str:
    """An invalid/failed count from results.json, or counted from the judgments when it lacks one."""
    return _count(getattr(results.invalid, name) if results.invalid.given(name) else counted)


def _counted(counts: Mapping[str, int]) -> str:
    """Each value the answers named with how many named it, most first: `fp_a (18), fp_b (2)`."""
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{value or '(unsaid)'} ({_count(n)})" for value, n in ordered) or "–"


class ProvenanceView(TypedDict):
    """The report's provenance card: (name, value) rows of what was sent and of what the endpoint said,
    the answers counted, the cache's line and the drift against the baseline run."""

    sent: list[tuple[str, str]]
    heard: list[tuple[str, str]]
    answers: str | None
    cache: str | None
    changed: bool
    drift: str | None


def _provenance_view(results: RunResults) -> ProvenanceView | None:
    """What was sent (package version, template hash, sampling, provider, endpoint: no credentials are
    recorded) and what the endpoint said about the model that answered (`model`, `system_fingerprint`,
    a vLLM server's `/models` entry), with what of it changed against the baseline run. None for a run
    from before they were recorded."""
    provenance = results.provenance
    if provenance is None:
        return None
    sent = provenance.sent
    sampling = ", ".join(f"{name} {value}" for name, value in sent.sampling.items())
    facts = [
        ("Provider", sent.provider or "–"),
        ("Endpoint", sent.endpoint or "–"),
        ("Model asked for", sent.model or "–"),
        ("Sampling", sampling or "–"),
        ("Template hash", sent.template_hash or "–"),
        ("Package version", sent.package_version or "–"),
    ]
    served = provenance.served
    heard: list[tuple[str, str]] = []
    if served is not None and served.answers:
        heard = [("Answered as", _counted(served.models))]
        if any(served.system_fingerprints):
            heard.append(("system_fingerprint", _counted(served.system_fingerprints)))
        entry = served.model_entry or {}
        if entry:
            heard.append(("/models entry", ", ".join(f"{k} {v}" for k, v in entry.items() if v is not None)))
    drift = results.drift
    return {
        "sent": facts,
        "heard": heard,
        "answers": _count(served.answers) if served is not None else None,
        "cache": results.run.cache.line() if results.run.cache else None,
        "changed": drift.changed if drift else False,
        "drift": drift.message if drift and drift.message else None,
    }


def build_context(
    results: RunResults,
    judgments: Sequence[JudgmentRecord],
    history: Sequence[HistoryPoint] = (),
) -> dict[str, object]:
    """Everything the template shows, already formatted: keeps arithmetic and fallbacks out of Jinja (its
    variables by name: only the template reads them).
    A results.json's content and plain judgment or history dicts are read into their models."""
    results = RunResults.model_validate(results)
    judgments = [JudgmentRecord.model_validate(j) for j in judgments]
    history = [HistoryPoint.model_validate(h) for h in history]
    dataset, overall, run, invalid = results.dataset, results.overall_accuracy, results.run, results.invalid
    categories, sources = results.category_accuracy, results.source_accuracy
    consistency = results.consistency if results.consistency and results.consistency.model_fields_set else None
    usage = results.usage if results.usage and (results.usage.model_fields_set or results.usage.model_extra) else None

    category_chart = bar_chart(
        [("overall", overall, True)] + [(name, categories[name], False) for name in _ordered(categories, CATEGORIES)]
    )
    # Sources grouped by their category, in the canonical category order.
    source_names = sorted(sources, key=_source_sort_key)
    source_chart = bar_chart([(name, sources[name], False) for name in source_names]) if sources else None
    points = trend_points(results, history)
    rows = _judgment_rows(judgments)
    status_counts = {s: sum(1 for r in rows if r.status == s) for s in ("ok", "invalid", "failed")}

    return {
        "title": " · ".join(part for part in (results.judge_type, results.model, dataset.data_file) if part)
        or "JudgeBench run",
        "benchmark": benchmark_title(results.benchmark),
        "scoring": results.scoring,
        "official": _official_view(results),
        "judge_type": results.judge_type or "–",
        "model": results.model or "–",
        "dataset": _dataset_view(dataset),
        "overall": _overall_view(overall, orders_apart=results.official is not None),
        "consistency": None
        if not consistency
        else {
            "value": _pct(consistency.consistency),
            "consistent": _count(consistency.consistent_pairs),
            "both": _count(consistency.pairs_with_both_verdicts),
            "first_position": _pct(consistency.first_position_rate),
        },
        "noise": _noise_view(results),
        "invalid": {
            "invalid": _invalid_count(results, "invalid_judgments", status_counts["invalid"] if rows else None),
            "failed": _invalid_count(results, "failed_judgments", status_counts["failed"] if rows else None),
            "pairs": _invalid_count(results, "pairs_with_invalid", None),
        },
        "usage": _usage_view(usage) if usage else None,
        # Why the run is not a measurement, the top reasons judgments failed, and how requests were shaped.
        "run_failure": run.failure,
        "problem_reasons": list(invalid.reasons.items())[:5],
        "requests": run.requests.model_dump() if run.requests else None,
        "request_words": REQUEST_RULE_WORDS.get((run.requests.model_extra or {}).get("rule", ""), "")
        if run.requests
        else "",
        "regression": _regression_view(results.regression) if results.regression else None,
        "provenance": _provenance_view(results),
        "run": {
            "run_id": run.run_id or "–",
            "flow_run_id": run.flow_run_id or "–",
            "mode": run.mode or "–",
            "started": _fmt_time(run.started),
            "finished": _fmt_time(run.finished),
            "duration": _duration(run.started, run.finished),
        },
        "category_chart": category_chart,
        "source_chart": source_chart,
        "trend": trend_chart(points),
        "bias_trend": bias_chart(points),
        "trend_runs": len(points),
        "judgments": rows,
        "judgments_total": usage.judgments if usage else None,
        "status_counts": status_counts,
        "prompt_preview_chars": f"{PROMPT_PREVIEW_CHARS:,}",
    }


def _noise_view(results: RunResults) -> dict[str, str] | None:
    """The judge's own noise (results.json's `noise`), formatted; None when the run did not measure it."""
    noise = results.noise
    if noise is None:
        return None
    where = f"{noise.epochs} epochs" if noise.source == "epochs" else f"this run and {noise.epochs - 1} earlier runs"
    return {
        "run_to_run": f"±{noise.run_to_run_sd * 100:.1f} pts",
        "where": where,
        "varying": _pct(noise.varying_pairs),
        "agreement": _pct(noise.self_agreement) if noise.self_agreement is not None else "",
        "interval": f"{_pct(noise.ci_low)} – {_pct(noise.ci_high)}",
    }


def render_report(
    results: RunResults,
    judgments: Sequence[JudgmentRecord],
    history: Sequence[HistoryPoint] = (),
) -> str:
    """The report as one HTML string.

    `results` follows the results.json contract (optional parts such as intervals, consistency, usage
    and regression may be missing); `history` lists past runs of the same configuration, oldest first,
    (`HistoryPoint`s). This run is added to the trend unless `history` already holds its run_id.
    """
    return _template().render(**build_context(results, judgments, history))


def write_report(
    path: str | Path,
    results: RunResults,
    judgments: Sequence[JudgmentRecord],
    history: Sequence[HistoryPoint] = (),
) -> Path:
    """Render and write the report (UTF-8), creating parent directories, or to an object-store URL;
    returns where it was written."""
    from judgebench_flows.scoring.results import write_atomic

    return write_atomic(path, render_report(results, judgments, history))  # a full disk: `PathNotWritable`


__all__ = ["PROMPT_PREVIEW_CHARS", "HistoryPoint", "build_context", "history_point", "render_report", "write_report"]

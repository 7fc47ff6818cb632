"""A single self-contained HTML report for one benchmark run: figures, charts, trend and every judgment.

The report is meant to be mailed, attached to a Prefect artifact or opened from disk years later, so it
carries no JavaScript and loads nothing external: charts are inline SVG whose geometry is computed here
(the template only draws), and each judgment's raw output and prompt sit in `<details>` elements.

Judge output and prompts are arbitrary text (they do contain `<script>` and `&`), so the template runs
in a sandboxed Jinja2 environment with autoescape on, and links are only made from http(s) URLs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache, partial
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jinja2 import Template
from jinja2.sandbox import SandboxedEnvironment
from pydantic import BaseModel

from judgebench_flows.core.pricing import format_usd
from judgebench_flows.core.records import CATEGORIES, JudgmentRecord, category_of, flip
from judgebench_flows.core.text import page_text
from judgebench_flows.scoring.formatting import finite, percent
from judgebench_flows.scoring.result_types import Regression, SliceAccuracy, Usage
from judgebench_flows.scoring.run_results import DatasetInfo, RunResults

if TYPE_CHECKING:
    from judgebench_flows.data.db import RunRow

TEMPLATE_NAME = "report.html.jinja2"
# Prompts repeat the pair's question and both responses (~10 KB each); showing them in full would make a
# 1,240-judgment report tens of MB. The judge's raw response is always shown in full: it is the evidence.
PROMPT_PREVIEW_CHARS = 4000

# Bar chart geometry (SVG user units; the SVG scales to the page width).
_BAR_WIDTH = 800
_BAR_LABEL_RIGHT = 190  # labels end here (text-anchor: end)
_BAR_X0 = 200  # 0 % on the axis
_BAR_PLOT = 380  # width of 0..100 %
_BAR_TOP = 26  # room for axis tick labels
_BAR_ROW = 30
# Trend chart geometry.
_TREND_WIDTH = 800
_TREND_HEIGHT = 240
_TREND_LEFT, _TREND_RIGHT, _TREND_TOP, _TREND_BOTTOM = 56, 16, 20, 44
_TREND_INSET = 44  # keeps the first and last points' date labels inside the SVG

_STATUS_RANK = {"failed": 0, "invalid": 1, "ok": 2}


@lru_cache(maxsize=1)
def _template() -> Template:
    """Compile the packaged template once per process (it is shipped as package data of `templates`)."""
    source = files("judgebench_flows.templates").joinpath(TEMPLATE_NAME).read_text(encoding="utf-8")
    env = SandboxedEnvironment(autoescape=True, trim_blocks=True, lstrip_blocks=True, finalize=page_text)
    return env.from_string(source)


_num = finite


_pct = partial(percent, digits=1, missing="–")


def _count(value: Any) -> str:
    number = _num(value)
    return "–" if number is None else f"{int(number):,}"


def _signed_points(value: Any) -> str:
    """A difference of accuracies in percentage points, always with its sign (the unit said once, after)."""
    number = _num(value)
    return "–" if number is None else f"{number * 100:+.1f}"


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _fmt_time(value: Any) -> str:
    parsed = _parse_time(value)
    if parsed is None:
        return str(value) if value else "–"
    offset = parsed.utcoffset()
    suffix = " UTC" if offset is not None and offset.total_seconds() == 0 else ""
    return parsed.strftime("%Y-%m-%d %H:%M") + suffix


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


def _x(fraction: float) -> float:
    return _BAR_X0 + max(0.0, min(1.0, fraction)) * _BAR_PLOT


def _bar_chart(slices: Sequence[tuple[str, SliceAccuracy, bool]]) -> dict[str, Any]:
    """Geometry for a horizontal bar chart: one row per (label, accuracy, is_overall)."""
    rows = []
    for i, (label, acc, overall) in enumerate(slices):
        y = _BAR_TOP + i * _BAR_ROW
        accuracy = _num(acc.accuracy)
        low, high = _num(acc.ci_low), _num(acc.ci_high)
        total, valid = _num(acc.total_samples), _num(acc.valid_samples)
        n_text = f"n={_count(total)}"
        if valid is not None and total is not None and valid != total:
            n_text += f", {_count(valid)} valid"
        interval = f" [{_pct(low)}–{_pct(high)}]" if low is not None and high is not None else ""
        rows.append(
            {
                "label": label,
                "overall": overall,
                "y_text": f"{y + 19:.1f}",
                "bar_y": f"{y + 7:.1f}",
                "bar_w": f"{_x(accuracy) - _BAR_X0:.1f}" if accuracy is not None else None,
                "whisker": None
                if low is None or high is None
                else {
                    "x1": f"{_x(low):.1f}",
                    "x2": f"{_x(high):.1f}",
                    "y": f"{y + 15:.1f}",
                    "y1": f"{y + 9:.1f}",
                    "y2": f"{y + 21:.1f}",
                },
                "value": (_pct(accuracy) if accuracy is not None else "no data"),
                "detail": f"{interval} {n_text}".strip(),
                "title": f"{label}: {_pct(accuracy)}{interval}, {n_text}, correct {_count(acc.correct_count)}",
            }
        )
    height = _BAR_TOP + len(rows) * _BAR_ROW + 8
    ticks = [{"x": f"{_x(t / 100):.1f}", "label": f"{t}%", "chance": t == 50} for t in (0, 25, 50, 75, 100)]
    return {
        "width": _BAR_WIDTH,
        "height": height,
        "rows": rows,
        "ticks": ticks,
        "label_x": _BAR_LABEL_RIGHT,
        "x0": _BAR_X0,
        "value_x": _BAR_X0 + _BAR_PLOT + 12,
        "axis_bottom": height - 4,
    }


def _ordered(slices: Mapping[str, SliceAccuracy], preferred: Sequence[str] = ()) -> list[str]:
    """Known names in their canonical order first, then the rest alphabetically."""
    names = [name for name in preferred if name in slices]
    return names + sorted(name for name in slices if name not in names)


def _source_sort_key(source: str) -> tuple[int, str]:
    """Sources grouped under their category in canonical order (unknown categories last), then by name."""
    category = category_of(source)
    rank = CATEGORIES.index(category) if category in CATEGORIES else len(CATEGORIES)
    return rank, source


class HistoryPoint(BaseModel):
    """One run on the report's trend charts: an earlier run of the configuration, or this one (`current`)."""

    run_id: str | None = None
    started: str | None = None
    accuracy: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    order_consistency: float | None = None
    first_position_rate: float | None = None
    current: bool = False


def history_point(run: RunRow) -> HistoryPoint:
    """One earlier run of the configuration, as the report's trend chart takes it (a results database row)."""
    return HistoryPoint(
        run_id=run.run_id,
        started=run.started.isoformat(),
        accuracy=run.overall_accuracy,
        ci_low=run.ci_low,
        ci_high=run.ci_high,
        order_consistency=run.order_consistency,
        first_position_rate=run.first_position_rate,
    )


def _trend_points(results: RunResults, history: Sequence[HistoryPoint]) -> list[HistoryPoint]:
    """Past runs plus this run (appended unless `history` already ends with it), oldest first."""
    run, overall, consistency = results.run, results.overall_accuracy, results.consistency
    points = [h.model_copy() for h in history]
    current_id = run.run_id
    if not any(current_id is not None and p.run_id == current_id for p in points):
        points.append(
            HistoryPoint(
                run_id=current_id,
                started=run.started,
                accuracy=overall.accuracy,
                ci_low=overall.ci_low,
                ci_high=overall.ci_high,
                order_consistency=consistency.consistency if consistency else None,
                first_position_rate=consistency.first_position_rate if consistency else None,
            )
        )
    for p in points:
        p.current = current_id is not None and p.run_id == current_id
    return [p for p in points if _num(p.accuracy) is not None]


_TREND_LABEL_FORMATS = ("%Y-%m-%d", "%m-%d %H:%M", "%m-%d %H:%M:%S")


def _trend_label_format(started: Sequence[str | None]) -> str:
    """The shortest of dates, minutes and seconds under which no two labels read alike: a new user's
    first run and its re-run, a minute apart, were both labelled `2026-11-27`."""
    times = [parsed for parsed in map(_parse_time, started) if parsed is not None]
    return next(
        (f for f in _TREND_LABEL_FORMATS if len({t.strftime(f) for t in times}) == len(times)),
        _TREND_LABEL_FORMATS[-1],
    )


def _trend_x_label(started: str | None, label_format: str) -> str:
    parsed = _parse_time(started)
    return parsed.strftime(label_format) if parsed is not None else _fmt_time(started)[:10]


def _trend_chart(points: Sequence[HistoryPoint]) -> dict[str, Any] | None:
    """Geometry for the accuracy-over-runs line chart with its interval band; None with no points."""
    if not points:
        return None
    values: list[tuple[float, float, float]] = []
    for p in points:
        acc = _num(p.accuracy)
        assert acc is not None, "`_trend_points` keeps only runs with an accuracy"
        low, high = _num(p.ci_low), _num(p.ci_high)
        values.append((acc, acc if low is None else low, acc if high is None else high))
    # Zoom the y axis to the data (whole 5 % steps, at least 20 points tall): run-to-run differences of a
    # few points would be invisible on a fixed 0..100 % axis.
    lo = math.floor(min(v[1] for v in values) * 20) / 20
    hi = math.ceil(max(v[2] for v in values) * 20) / 20
    while hi - lo < 0.2:
        lo, hi = max(0.0, lo - 0.05), min(1.0, hi + 0.05)
        if lo == 0.0 and hi == 1.0:
            break
    plot_w = _TREND_WIDTH - _TREND_LEFT - _TREND_RIGHT
    plot_h = _TREND_HEIGHT - _TREND_TOP - _TREND_BOTTOM

    def y(v: float) -> float:
        return _TREND_TOP + (hi - v) / (hi - lo) * plot_h

    n = len(values)

    def x(i: int) -> float:
        span = plot_w - 2 * _TREND_INSET
        return _TREND_LEFT + _TREND_INSET + (span / 2 if n == 1 else i * span / (n - 1))

    step = 0.05 if hi - lo <= 0.4 else 0.1
    y_ticks = []
    k = 0
    while lo + k * step <= hi + 1e-9:
        v = lo + k * step
        y_ticks.append({"y": f"{y(v):.1f}", "label": f"{v * 100:.0f}%"})
        k += 1
    stride = max(1, math.ceil(n / 8))
    # Every stride-th date plus the last, dropping one that would crowd the last label.
    labelled = {i for i in range(n) if i == n - 1 or (i % stride == 0 and n - 1 - i >= stride)}
    label_format = _trend_label_format([points[i].started for i in sorted(labelled)])
    out_points = []
    for i, (p, (acc, low, high)) in enumerate(zip(points, values, strict=False)):
        label_x = i in labelled
        out_points.append(
            {
                "x": f"{x(i):.1f}",
                "y": f"{y(acc):.1f}",
                "y_low": f"{y(low):.1f}",
                "y_high": f"{y(high):.1f}",
                "current": p.current,
                "value": _pct(acc),
                "show_value": n <= 12 or i == n - 1,
                "x_label": _trend_x_label(p.started, label_format) if label_x else None,
                "title": f"run {p.run_id or '?'} · {_fmt_time(p.started)} · {_pct(acc)}"
                + (f" [{_pct(low)}–{_pct(high)}]" if (low, high) != (acc, acc) else ""),
            }
        )
    upper = " ".join(f"{x(i):.1f},{y(v[2]):.1f}" for i, v in enumerate(values))
    lower = " ".join(f"{x(i):.1f},{y(v[1]):.1f}" for i, v in reversed(list(enumerate(values))))
    return {
        "width": _TREND_WIDTH,
        "height": _TREND_HEIGHT,
        "points": out_points,
        "y_ticks": y_ticks,
        "left": _TREND_LEFT,
        "right": _TREND_WIDTH - _TREND_RIGHT,
        "x_label_y": _TREND_HEIGHT - _TREND_BOTTOM + 18,
        "band": f"{upper} {lower}" if n > 1 else None,
        "line": " ".join(f"{p['x']},{p['y']}" for p in out_points) if n > 1 else None,
    }


_BIAS_SERIES = (("order_consistency", "order consistency"), ("first_position_rate", "first-position rate"))


def _bias_chart(points: Sequence[HistoryPoint]) -> dict[str, Any] | None:
    """Geometry for position bias over the same runs as the accuracy trend: order consistency and the
    first-position rate on a fixed 0..100% axis (50% marked: an unbiased judge's first-position rate).
    None when no run has either figure (runs from before they were kept)."""
    if not any(_num(getattr(p, key)) is not None for p in points for key, _ in _BIAS_SERIES):
        return None
    plot_h = _TREND_HEIGHT - _TREND_TOP - _TREND_BOTTOM
    plot_w = _TREND_WIDTH - _TREND_LEFT - _TREND_RIGHT
    n = len(points)

    def x(i: int) -> float:
        span = plot_w - 2 * _TREND_INSET
        return _TREND_LEFT + _TREND_INSET + (span / 2 if n == 1 else i * span / (n - 1))

    def y(v: float) -> float:
        return _TREND_TOP + (1.0 - v) * plot_h

    series = []
    for key, name in _BIAS_SERIES:
        marks = []
        for i, p in enumerate(points):
            value = _num(getattr(p, key))
            if value is not None:
                marks.append(
                    {
                        "x": f"{x(i):.1f}",
                        "y": f"{y(value):.1f}",
                        "current": p.current,
                        "title": f"run {p.run_id or '?'} · {_fmt_time(p.started)} · {name} {_pct(value)}",
                    }
                )
        line = " ".join(f"{m['x']},{m['y']}" for m in marks) if len(marks) > 1 else None
        series.append({"key": key, "name": name, "points": marks, "line": line})
    return {
        "width": _TREND_WIDTH,
        "height": _TREND_HEIGHT,
        "left": _TREND_LEFT,
        "right": _TREND_WIDTH - _TREND_RIGHT,
        "y_ticks": [{"y": f"{y(t / 100):.1f}", "label": f"{t}%", "chance": t == 50} for t in (0, 25, 50, 75, 100)],
        "series": series,
    }


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


def _overall_view(overall: SliceAccuracy) -> OverallView:
    return OverallView(
        accuracy=_pct(overall.accuracy),
        interval=(
            f"{_pct(overall.ci_low)} – {_pct(overall.ci_high)}"
            if _num(overall.ci_low) is not None and _num(overall.ci_high) is not None
            else None
        ),
        correct=_count(overall.correct_count),
        total=_count(overall.total_samples),
        valid=_count(overall.valid_samples),
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


def _provenance_view(results: RunResults) -> dict[str, Any] | None:
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
) -> dict[str, Any]:
    """Everything the template shows, already formatted: keeps arithmetic and fallbacks out of Jinja.
    A results.json's content and plain judgment or history dicts are read into their models."""
    results = RunResults.model_validate(results)
    judgments = [JudgmentRecord.model_validate(j) for j in judgments]
    history = [HistoryPoint.model_validate(h) for h in history]
    dataset, overall, run, invalid = results.dataset, results.overall_accuracy, results.run, results.invalid
    categories, sources = results.category_accuracy, results.source_accuracy
    consistency = results.consistency if results.consistency and results.consistency.model_fields_set else None
    usage = results.usage if results.usage and (results.usage.model_fields_set or results.usage.model_extra) else None

    category_chart = _bar_chart(
        [("overall", overall, True)] + [(name, categories[name], False) for name in _ordered(categories, CATEGORIES)]
    )
    # Sources grouped by their category, in the canonical category order.
    source_names = sorted(sources, key=_source_sort_key)
    source_chart = _bar_chart([(name, sources[name], False) for name in source_names]) if sources else None
    points = _trend_points(results, history)
    rows = _judgment_rows(judgments)
    status_counts = {s: sum(1 for r in rows if r.status == s) for s in ("ok", "invalid", "failed")}

    return {
        "title": " · ".join(part for part in (results.judge_type, results.model, dataset.data_file) if part)
        or "JudgeBench run",
        "judge_type": results.judge_type or "–",
        "model": results.model or "–",
        "dataset": _dataset_view(dataset),
        "overall": _overall_view(overall),
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
        "trend": _trend_chart(points),
        "bias_trend": _bias_chart(points),
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

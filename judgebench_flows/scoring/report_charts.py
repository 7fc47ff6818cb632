"""The run report's charts as geometry (scoring/report.py renders them through its template): the
accuracy bars of the categories and sources, and the trends over the configuration's runs (accuracy with
its interval band, position bias). Inline SVG whose every coordinate is computed here, so the template only
draws and the report loads nothing external.

Also the report's text formats for numbers and times ("–" for a figure that is missing), which the charts'
labels and the report's tables share.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from typing_extensions import TypedDict

from judgebench_flows.scoring.formatting import finite, percent
from judgebench_flows.scoring.result_types import SliceAccuracy
from judgebench_flows.scoring.run_results import RunResults

if TYPE_CHECKING:
    from judgebench_flows.data.db import RunRow

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


class Whisker(TypedDict):
    """A bar's 95% interval: a line from x1 to x2 at y, with end caps from y1 to y2."""

    x1: str
    x2: str
    y: str
    y1: str
    y2: str


class BarRow(TypedDict):
    """One bar: its label and value text, where it is drawn (no bar without an accuracy), its whisker."""

    label: str
    overall: bool
    y_text: str
    bar_y: str
    bar_w: str | None
    whisker: Whisker | None
    value: str
    detail: str
    title: str


class Tick(TypedDict):
    """An x-axis tick of the bar chart; `chance` marks 50%."""

    x: str
    label: str
    chance: bool


class BarChart(TypedDict):
    """`bar_chart`'s geometry, as the report's template draws it."""

    width: int
    height: int
    rows: list[BarRow]
    ticks: list[Tick]
    label_x: int
    x0: int
    value_x: int
    axis_bottom: int


class YTick(TypedDict):
    """A y-axis tick of a trend chart."""

    y: str
    label: str


class BiasTick(YTick):
    """A y-axis tick of the position-bias chart; `chance` marks 50%."""

    chance: bool


class TrendPoint(TypedDict):
    """One run on the accuracy trend: its point, its interval's ends and its labels."""

    x: str
    y: str
    y_low: str
    y_high: str
    current: bool
    value: str
    show_value: bool
    x_label: str | None
    title: str


class TrendChart(TypedDict):
    """`trend_chart`'s geometry: the points, the interval band and the line (both None for one run)."""

    width: int
    height: int
    points: list[TrendPoint]
    y_ticks: list[YTick]
    left: int
    right: int
    x_label_y: int
    band: str | None
    line: str | None


class BiasMark(TypedDict):
    """One run's value on one series of the position-bias chart."""

    x: str
    y: str
    current: bool
    title: str


class BiasSeries(TypedDict):
    """One series of the position-bias chart (order consistency, first-position rate)."""

    key: str
    name: str
    points: list[BiasMark]
    line: str | None


class BiasChart(TypedDict):
    """`bias_chart`'s geometry."""

    width: int
    height: int
    left: int
    right: int
    y_ticks: list[BiasTick]
    series: list[BiasSeries]


num = finite
pct = partial(percent, digits=1, missing="–")


def count(value: Any) -> str:
    number = num(value)
    return "–" if number is None else f"{int(number):,}"


def parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def fmt_time(value: Any) -> str:
    parsed = parse_time(value)
    if parsed is None:
        return str(value) if value else "–"
    offset = parsed.utcoffset()
    suffix = " UTC" if offset is not None and offset.total_seconds() == 0 else ""
    return parsed.strftime("%Y-%m-%d %H:%M") + suffix


def _x(fraction: float) -> float:
    return _BAR_X0 + max(0.0, min(1.0, fraction)) * _BAR_PLOT


def bar_chart(slices: Sequence[tuple[str, SliceAccuracy, bool]]) -> BarChart:
    """Geometry for a horizontal bar chart: one row per (label, accuracy, is_overall)."""
    rows: list[BarRow] = []
    for i, (label, acc, overall) in enumerate(slices):
        y = _BAR_TOP + i * _BAR_ROW
        accuracy = num(acc.accuracy)
        low, high = num(acc.ci_low), num(acc.ci_high)
        total, valid = num(acc.total_samples), num(acc.valid_samples)
        n_text = f"n={count(total)}"
        if valid is not None and total is not None and valid != total:
            n_text += f", {count(valid)} valid"
        interval = f" [{pct(low)}–{pct(high)}]" if low is not None and high is not None else ""
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
                "value": (pct(accuracy) if accuracy is not None else "no data"),
                "detail": f"{interval} {n_text}".strip(),
                "title": f"{label}: {pct(accuracy)}{interval}, {n_text}, correct {count(acc.correct_count)}",
            }
        )
    height = _BAR_TOP + len(rows) * _BAR_ROW + 8
    ticks: list[Tick] = [{"x": f"{_x(t / 100):.1f}", "label": f"{t}%", "chance": t == 50} for t in (0, 25, 50, 75, 100)]
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


def trend_points(results: RunResults, history: Sequence[HistoryPoint]) -> list[HistoryPoint]:
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
    return [p for p in points if num(p.accuracy) is not None]


_TREND_LABEL_FORMATS = ("%Y-%m-%d", "%m-%d %H:%M", "%m-%d %H:%M:%S")


def _trend_label_format(started: Sequence[str | None]) -> str:
    """The shortest of dates, minutes and seconds under which no two labels read alike: a new user's
    first run and its re-run, a minute apart, were both labelled `2026-11-27`."""
    times = [parsed for parsed in map(parse_time, started) if parsed is not None]
    return next(
        (f for f in _TREND_LABEL_FORMATS if len({t.strftime(f) for t in times}) == len(times)),
        _TREND_LABEL_FORMATS[-1],
    )


def _trend_x_label(started: str | None, label_format: str) -> str:
    parsed = parse_time(started)
    return parsed.strftime(label_format) if parsed is not None else fmt_time(started)[:10]


def trend_chart(points: Sequence[HistoryPoint]) -> TrendChart | None:
    """Geometry for the accuracy-over-runs line chart with its interval band; None with no points."""
    if not points:
        return None
    values: list[tuple[float, float, float]] = []
    for p in points:
        acc = num(p.accuracy)
        assert acc is not None, "`trend_points` keeps only runs with an accuracy"
        low, high = num(p.ci_low), num(p.ci_high)
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
    y_ticks: list[YTick] = []
    k = 0
    while lo + k * step <= hi + 1e-9:
        v = lo + k * step
        y_ticks.append({"y": f"{y(v):.1f}", "label": f"{v * 100:.0f}%"})
        k += 1
    stride = max(1, math.ceil(n / 8))
    # Every stride-th date plus the last, dropping one that would crowd the last label.
    labelled = {i for i in range(n) if i == n - 1 or (i % stride == 0 and n - 1 - i >= stride)}
    label_format = _trend_label_format([points[i].started for i in sorted(labelled)])
    out_points: list[TrendPoint] = []
    for i, (p, (acc, low, high)) in enumerate(zip(points, values, strict=False)):
        label_x = i in labelled
        out_points.append(
            {
                "x": f"{x(i):.1f}",
                "y": f"{y(acc):.1f}",
                "y_low": f"{y(low):.1f}",
                "y_high": f"{y(high):.1f}",
                "current": p.current,
                "value": pct(acc),
                "show_value": n <= 12 or i == n - 1,
                "x_label": _trend_x_label(p.started, label_format) if label_x else None,
                "title": f"run {p.run_id or '?'} · {fmt_time(p.started)} · {pct(acc)}"
                + (f" [{pct(low)}–{pct(high)}]" if (low, high) != (acc, acc) else ""),
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


def bias_chart(points: Sequence[HistoryPoint]) -> BiasChart | None:
    """Geometry for position bias over the same runs as the accuracy trend: order consistency and the
    first-position rate on a fixed 0..100% axis (50% marked: an unbiased judge's first-position rate).
    None when no run has either figure (runs from before they were kept)."""
    if not any(num(getattr(p, key)) is not None for p in points for key, _ in _BIAS_SERIES):
        return None
    plot_h = _TREND_HEIGHT - _TREND_TOP - _TREND_BOTTOM
    plot_w = _TREND_WIDTH - _TREND_LEFT - _TREND_RIGHT
    n = len(points)

    def x(i: int) -> float:
        span = plot_w - 2 * _TREND_INSET
        return _TREND_LEFT + _TREND_INSET + (span / 2 if n == 1 else i * span / (n - 1))

    def y(v: float) -> float:
        return _TREND_TOP + (1.0 - v) * plot_h

    series: list[BiasSeries] = []
    for key, name in _BIAS_SERIES:
        marks: list[BiasMark] = []
        for i, p in enumerate(points):
            value = num(getattr(p, key))
            if value is not None:
                marks.append(
                    {
                        "x": f"{x(i):.1f}",
                        "y": f"{y(value):.1f}",
                        "current": p.current,
                        "title": f"run {p.run_id or '?'} · {fmt_time(p.started)} · {name} {pct(value)}",
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


__all__ = [
    "BarChart",
    "BiasChart",
    "HistoryPoint",
    "TrendChart",
    "bar_chart",
    "bias_chart",
    "count",
    "fmt_time",
    "history_point",
    "num",
    "parse_time",
    "pct",
    "trend_chart",
    "trend_points",
]

"""The dashboard's charts as geometry (views/dashboard.py renders them through its template): one
configuration's accuracy over the nights with its 95% interval and the judge's noise band, its position
bias, and one small chart per category. Inline SVG whose coordinates are computed here, as the run
report's are (scoring/report_charts.py), so the page loads nothing and the template only draws.

The x axis is the page's nights, oldest left, one step per night whether or not the configuration ran:
the charts of every configuration line up with each other, and a served build's change is marked where
it happened. Coordinates are whole units: a year of nights of 48 configurations stays a few MB.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from judgebench_flows.scoring.formatting import finite, percent

TREND_W, TREND_H = 720, 170
SMALL_W, SMALL_H = 170, 64
_LEFT, _RIGHT, _TOP, _BOTTOM = 44, 10, 12, 22
MARKED_NIGHTS = 40  # up to this many nights every night is a point on the charts
# Most nights a line or band goes through (a year's 365 are thinned to every other or third night, the
# notable ones always kept): 720 units wide, more would not show, and a year of 48 charts stays small.
LINE_NIGHTS, SMALL_NIGHTS = 150, 50


@dataclass(slots=True)
class Mark:
    """One night on a chart: where, what it says on hover, and its alert (`cls`, for the colour)."""

    x: int
    y: int
    cls: str
    title: str


@dataclass(slots=True)
class Tick:
    y: int
    label: str
    chance: bool = False


@dataclass(slots=True)
class Change:
    """A served build's change (or another model answering) marked on the time axis."""

    x: int
    title: str
    anchor: str = "start"  # its label's side: "end" (left of the mark) near the right edge


@dataclass(slots=True)
class Series:
    """A line through the nights that have a value (None: fewer than two)."""

    name: str
    cls: str
    line: str | None
    marks: list[Mark]


@dataclass(slots=True)
class Chart:
    """What the template draws: plot box, y ticks, bands, series, x labels and marked changes."""

    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int
    ticks: list[Tick]
    series: list[Series]
    x_labels: list[tuple[int, str, str]]  # x, text, its text-anchor (the ends' labels stay inside)
    band: str | None = None  # the 95% interval
    noise: str | None = None  # where an unchanged judge's night lands: baseline ± 1.96 run-to-run SD
    changes: list[Change] = field(default_factory=list)
    failed: list[Mark] = field(default_factory=list)  # nights that failed: a cross on the axis


@dataclass(slots=True)
class Point:
    """One night of one configuration, as the charts read it (None: not measured)."""

    accuracy: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    noise_low: float | None = None
    noise_high: float | None = None
    order_consistency: float | None = None
    first_position_rate: float | None = None
    alert: str = "none"
    title: str = ""
    changed: str | None = None  # what the endpoint said differently that night


def _xs(n: int, width: int, left: int, right: int) -> list[int]:
    span = width - left - right
    if n == 1:
        return [left + span // 2]
    return [round(left + i * span / (n - 1)) for i in range(n)]


def _zoom(values: Sequence[float]) -> tuple[float, float]:
    """A y range in whole 5-point steps around the values, at least 20 points tall (as the report's)."""
    lo = math.floor(min(values) * 20) / 20
    hi = math.ceil(max(values) * 20) / 20
    while hi - lo < 0.2 and not (lo == 0.0 and hi == 1.0):
        lo, hi = max(0.0, lo - 0.05), min(1.0, hi + 0.05)
    return lo, hi


def _band(xs: list[int], lows: list[float | None], highs: list[float | None], y: Callable[[float], int]) -> str | None:
    kept = [(x, lo, hi) for x, lo, hi in zip(xs, lows, highs, strict=True) if lo is not None and hi is not None]
    if len(kept) < 2:
        return None
    upper = " ".join(f"{x},{y(hi)}" for x, _, hi in kept)
    lower = " ".join(f"{x},{y(lo)}" for x, lo, _ in reversed(kept))
    return f"{upper} {lower}"


def _line(marks: list[Mark]) -> str | None:
    return " ".join(f"{m.x},{m.y}" for m in marks) if len(marks) > 1 else None


def _drawn(marks: list[Mark], notable: Callable[[Mark], bool]) -> list[Mark]:
    """The marks drawn as points: every night's on a short window, else the notable nights' and the last
    (a year of nights draws its line, not 365 points per chart)."""
    if len(marks) <= MARKED_NIGHTS:
        return marks
    return [m for i, m in enumerate(marks) if notable(m) or i == len(marks) - 1]


def _kept(n: int, most: int, always: Callable[[int], bool]) -> list[int]:
    """The nights (indexes) a line goes through: all up to `most`, else every k-th, the last and those
    `always` keeps (a regressed night is never thinned away)."""
    if n <= most:
        return list(range(n))
    stride = math.ceil(n / most)
    return [i for i in range(n) if i % stride == 0 or i == n - 1 or always(i)]


def _x_labels(xs: list[int], labels: Sequence[str], most: int) -> list[tuple[int, str, str]]:
    n = len(xs)
    stride = max(1, math.ceil(n / most))
    kept = [i for i in range(n) if i == n - 1 or (i % stride == 0 and n - 1 - i >= stride)]
    return [
        (xs[i], labels[i], "end" if i == n - 1 and n > 1 else "start" if i == 0 and n > 1 else "middle") for i in kept
    ]


def trend_chart(points: Sequence[Point], labels: Sequence[str]) -> Chart | None:
    """Accuracy over the nights with its interval band, the judge's noise band, failed nights marked on
    the axis and served-build changes as vertical marks; None when no night has an accuracy."""
    values = [v for p in points for v in (p.accuracy, p.ci_low, p.ci_high, p.noise_low, p.noise_high) if v is not None]
    if not any(finite(p.accuracy) is not None for p in points):
        return None
    lo, hi = _zoom(values)
    plot_h = TREND_H - _TOP - _BOTTOM
    xs = _xs(len(points), TREND_W, _LEFT + 8, _RIGHT + 8)

    def y(v: float) -> int:
        return round(_TOP + (hi - max(lo, min(hi, v))) / (hi - lo) * plot_h)

    step = 0.05 if hi - lo <= 0.4 else 0.1
    ticks = [
        Tick(y=y(lo + k * step), label=f"{(lo + k * step) * 100:.0f}%") for k in range(round((hi - lo) / step) + 1)
    ]
    kept = _kept(len(points), LINE_NIGHTS, lambda i: points[i].alert in ("regressed", "improved"))
    marks = [
        Mark(x=xs[i], y=y(accuracy), cls=points[i].alert, title=points[i].title)
        for i in kept
        if (accuracy := points[i].accuracy) is not None
    ]
    failed = [
        Mark(x=x, y=TREND_H - _BOTTOM, cls="failed", title=p.title)
        for x, p in zip(xs, points, strict=True)
        if p.alert == "failed"
    ]
    return Chart(
        width=TREND_W,
        height=TREND_H,
        left=_LEFT,
        right=TREND_W - _RIGHT,
        top=_TOP,
        bottom=TREND_H - _BOTTOM,
        ticks=ticks,
        band=_band([xs[i] for i in kept], [points[i].ci_low for i in kept], [points[i].ci_high for i in kept], y),
        noise=_band(
            [xs[i] for i in kept], [points[i].noise_low for i in kept], [points[i].noise_high for i in kept], y
        ),
        series=[
            Series(
                name="accuracy",
                cls="acc",
                line=_line(marks),
                marks=_drawn(marks, lambda m: m.cls in ("regressed", "improved")),
            )
        ],
        x_labels=_x_labels(xs, labels, 8),
        changes=[
            Change(x=x, title=p.changed, anchor="end" if x > TREND_W - 80 else "start")
            for x, p in zip(xs, points, strict=True)
            if p.changed
        ],
        failed=failed,
    )


def bias_chart(points: Sequence[Point], labels: Sequence[str]) -> Chart | None:
    """Order consistency and the first-position rate on 0-100% (50% marked: an unbiased judge's
    first-position rate); None when no night has either."""
    if not any(p.order_consistency is not None or p.first_position_rate is not None for p in points):
        return None
    height = 120
    plot_h = height - _TOP - _BOTTOM
    xs = _xs(len(points), TREND_W, _LEFT + 8, _RIGHT + 8)

    def y(v: float) -> int:
        return round(_TOP + (1 - max(0.0, min(1.0, v))) * plot_h)

    series = []
    for key, name, cls in (
        ("order_consistency", "order consistency", "cons"),
        ("first_position_rate", "first-position rate", "first"),
    ):
        marks = []
        for i in _kept(len(points), LINE_NIGHTS, lambda i: False):
            value = getattr(points[i], key)
            if value is not None:
                marks.append(Mark(x=xs[i], y=y(value), cls=cls, title=f"{labels[i]} · {name} {percent(value)}"))
        series.append(Series(name=name, cls=cls, line=_line(marks), marks=_drawn(marks, lambda m: False)))
    return Chart(
        width=TREND_W,
        height=height,
        left=_LEFT,
        right=TREND_W - _RIGHT,
        top=_TOP,
        bottom=height - _BOTTOM,
        ticks=[Tick(y=y(t / 100), label=f"{t}%", chance=t == 50) for t in (0, 50, 100)],
        series=series,
        x_labels=_x_labels(xs, labels, 8),
    )


def small_chart(values: Sequence[float | None], labels: Sequence[str], name: str) -> Chart | None:
    """One category's accuracy over the nights, small, on its own zoomed axis; None without a value."""
    known = [v for v in values if v is not None]
    if not known:
        return None
    lo, hi = _zoom(known)
    xs = _xs(len(values), SMALL_W, 6, 6)
    top, bottom = 14, SMALL_H - 6

    def y(v: float) -> int:
        return round(top + (hi - v) / (hi - lo) * (bottom - top))

    marks = []
    for i in _kept(len(values), SMALL_NIGHTS, lambda i: False):
        value = values[i]
        if value is not None:
            marks.append(Mark(x=xs[i], y=y(value), cls="acc", title=f"{labels[i]} · {name} {percent(value)}"))
    return Chart(
        width=SMALL_W,
        height=SMALL_H,
        left=6,
        right=SMALL_W - 6,
        top=top,
        bottom=bottom,
        ticks=[Tick(y=y(lo), label=f"{lo * 100:.0f}%"), Tick(y=y(hi), label=f"{hi * 100:.0f}%")],
        series=[Series(name=name, cls="acc", line=_line(marks), marks=marks[-1:] if len(marks) > 1 else marks)],
        x_labels=[],
    )


__all__ = ["Chart", "Point", "bias_chart", "small_chart", "trend_chart"]

"""The team's morning page: every configuration, every night, on one self-contained HTML page.

Read from the results database alone (`judgebench dashboard`, and each night's flow beside its outputs):
a grid of configurations by night, each cell the night's accuracy marked by what its regression check
said (regressed, improved, within noise, no baseline, failed, not run: a symbol and a word as well as a
colour); per configuration its trend with the 95% interval and the judge's noise band, position bias,
served-build changes on the time axis and one small chart per category; tonight against each
configuration's baseline, the pairs that flipped, each linked to both verdicts; the night's cost,
budget, wall time and failed cells with their reasons.

A night is the runs that share an outermost flow run (`runs.root_flow_run_id`: a nightly flow's cells,
on its process or its pool); a run that is its own outermost flow run (a command-line or ad-hoc run) is
not a night's. Runs from before that column (NULL) are grouped by the UTC day they started.

The page loads nothing: CSS, SVG and its one script are inline, and its Content-Security-Policy allows
that script by its hash and no request at all. Sorting and filtering are that script's (`?sort=drop&q=
gpt&alert=regressed` preselects them); without it the page reads the same, unsorted. Names come from
files anyone can write, so the template runs sandboxed with autoescape on, as the run report's.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Any

from jinja2 import Template
from jinja2.sandbox import SandboxedEnvironment
from markupsafe import Markup, escape
from pydantic import BaseModel
from sqlalchemy.engine import Engine

from judgebench_flows.core.pricing import format_usd
from judgebench_flows.core.records import CATEGORIES, FINISHED
from judgebench_flows.core.run_names import run_name
from judgebench_flows.core.text import one_line, page_text, shorten
from judgebench_flows.data import queries
from judgebench_flows.scoring.formatting import finite, percent
from judgebench_flows.scoring.metrics import pair_scores
from judgebench_flows.scoring.published import FileVerdict
from judgebench_flows.views.dashboard_charts import Chart, Point, bias_chart, small_chart, trend_chart

TEMPLATE_NAME = "dashboard.html.jinja2"
SCRIPT_NAME = "dashboard.js"
PAGE_NAME = "dashboard.html"
DEFAULT_BENCHMARK = "judgebench"  # a run whose configuration names none: every run before LLMBar
# Per configuration and direction, the flipped pairs listed with both verdicts (the count says how many
# there were), and of each judgment's answer the characters shown: a night whose 48 judges each flipped
# dozens of pairs stays a page of a few MB.
FLIPS_SHOWN = 25
ANSWER_CHARS = 400
# Nights the grid has a column for, newest; the charts below it show every night of the page. A year's
# 17,520 table cells took Chromium seconds to lay out; 60 nights of 48 configurations open in under one.
GRID_NIGHTS = 60

# What a night's regression check said, in the order the legend lists it: symbol, word, what it means.
ALERTS: dict[str, tuple[str, str, str]] = {
    "regressed": ("▼", "regressed", "worse than its recent nights beyond the judge's noise"),
    "improved": ("▲", "improved", "better than its recent nights beyond the judge's noise"),
    "noise": ("≈", "within noise", "no change the judge's own noise would not explain"),
    "baseline": ("○", "no baseline", "measured, with no earlier night to compare with"),
    "failed": ("✗", "failed", "measured too little or stopped: see its reason"),
    "running": ("…", "running", "not finished when the page was written"),
    "none": ("·", "not run", "no run of this configuration that night"),
}
NEEDS_A_LOOK = ("regressed", "failed")


class DashboardFilter(BaseModel):
    """Which runs the page shows: the newest `nights`, of one benchmark, judge type or model."""

    nights: int = 30
    benchmark: str | None = None
    judge_type: str | None = None
    model: str | None = None


class NightFacts(BaseModel):
    """What only the night's own flow knows of tonight: its id (its flow run), its wall time and its
    budget (`max_cost`, spent, still held by cell runs). From the database alone the page shows a pool
    night's budget and the span from the first cell's start to the last one's end."""

    night_id: str | None = None
    wall_s: float | None = None
    max_cost: float | None = None
    spent: float | None = None
    held: float | None = None


@dataclass
class Night:
    key: str
    started: datetime
    finished: datetime | None = None
    runs: list[Any] = field(default_factory=list)

    @property
    def day(self) -> str:
        return self.started.date().isoformat()


def night_key(run: Any) -> str | None:
    """The night a run belongs to: its outermost flow run when that is another (a night's cell), the
    UTC day for runs from before that was recorded, None for a run of its own (command line, ad hoc)."""
    root = run.root_flow_run_id
    if root is None:
        return f"day {as_utc(run.started).date().isoformat()}"
    return None if root == run.flow_run_id else root


def as_utc(value: datetime) -> datetime:
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


def benchmark_of(run: Any) -> str:
    return (run.benchmark or DEFAULT_BENCHMARK).lower()


def alert_of(run: Any) -> str:
    """What the run's regression check said: regressed, improved (the same test the other way: the
    chance of a rise this large from noise below the alpha a drop needs), within noise, or no baseline;
    failed or running for a run that measured nothing to compare."""
    if run.status == "running":
        return "running"
    if run.status not in FINISHED:
        return "failed"
    if run.status == "regressed":
        return "regressed"
    p_drop, alpha = finite(run.p_drop), finite(run.alpha)
    if p_drop is None:
        return "baseline"
    if alpha is not None and 1 - p_drop < alpha:
        return "improved"
    return "noise"


def _since(engine: Engine, filters: DashboardFilter) -> datetime | None:
    """Where the newest `nights` nights start: a read of the small columns only."""
    rows = queries.dashboard_starts(engine, filters.judge_type, filters.model)
    firsts: dict[str, datetime] = {}
    for row in rows:
        key = night_key(row)
        if key is not None:
            started = as_utc(row.started)
            firsts[key] = min(firsts.get(key, started), started)
    if len(firsts) <= filters.nights:
        return None
    return sorted(firsts.values(), reverse=True)[filters.nights - 1]


def read_nights(engine: Engine, filters: DashboardFilter) -> list[Night]:
    """The newest `filters.nights` nights, oldest first, each with its runs (every attempt)."""
    since = _since(engine, filters)
    nights: dict[str, Night] = {}
    for run in queries.dashboard_runs(engine, since, filters.judge_type, filters.model):
        key = night_key(run)
        if key is None or (filters.benchmark and benchmark_of(run) != filters.benchmark.lower()):
            continue
        started = as_utc(run.started)
        night = nights.setdefault(key, Night(key, started))
        night.started = min(night.started, started)
        if run.finished is not None:
            end = as_utc(run.finished)
            night.finished = end if night.finished is None else max(night.finished, end)
        night.runs.append(run)
    ordered = sorted(nights.values(), key=lambda n: n.started)
    return ordered[-filters.nights :] if filters.nights > 0 else []


def _night_labels(nights: Sequence[Night]) -> list[str]:
    """`12-07`; with the minute, then the second, for nights that would read alike (two nights of one
    day); with the year when the page spans two."""
    day = "%Y-%m-%d" if len({n.started.year for n in nights}) > 1 else "%m-%d"
    by_day: dict[str, list[datetime]] = defaultdict(list)
    for night in nights:
        by_day[night.day].append(night.started)
    formats: dict[str, str] = {}
    for key, starts in by_day.items():
        formats[key] = next(
            (
                f
                for f in (day, f"{day} %H:%M", f"{day} %H:%M:%S")
                if len({t.strftime(f) for t in starts}) == len(starts)
            ),
            f"{day} %H:%M:%S",
        )
    return [night.started.strftime(formats[night.day]) for night in nights]


def _pts(value: float | None) -> str:
    number = finite(value)
    return "–" if number is None else f"{number * 100:+.1f} pts"


def _noise_text(sd: float | None) -> str:
    number = finite(sd)
    return "" if number is None else f"±{number * 100:.1f}"


def _duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "–"
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes:02d}m {secs:02d}s" if hours else f"{minutes}m {secs:02d}s"


def _cost(runs: Sequence[Any]) -> tuple[float | None, int]:
    """Dollars the runs paid (every attempt: a retry pays too) and how many were unpriced."""
    unpriced = sum(1 for r in runs if r.priced_as == "unpriced")
    paid = [r.cost_usd for r in runs if r.cost_usd is not None]
    return (sum(paid) if paid else None), unpriced


def anchor(run_id: str, pair_id: str) -> str:
    """A verdict's id on the page: its run (8 characters) and its pair, as URL fragments take them."""
    return f"v-{run_id[:8]}-{re.sub(r'[^A-Za-z0-9_-]', '_', pair_id)}"


@dataclass(slots=True)
class GridCell:
    alert: str
    text: str
    title: str


class Said(BaseModel):
    """One judgment of a verdict: the order shown (epoch e's are 2e and 2e + 1), what the judge said
    and what that means for the pair, its status, its answer cut to ANSWER_CHARS."""

    order: int
    decision: str
    decision_for_pair: str
    status: str
    answer: str


class Verdict(BaseModel):
    """A run's verdict on a pair (its anchor `id`): every judgment it made of it."""

    id: str
    pair_id: str
    run: str
    night: str
    label: str
    said: list[Said]


class Flip(BaseModel):
    pair_id: str
    category: str
    before: str  # the baseline's verdict anchor
    after: str  # tonight's


class Flips(BaseModel):
    baseline_run: str
    baseline_night: str
    tonight_run: str
    worse: list[Flip]
    better: list[Flip]
    worse_count: int
    better_count: int
    verdicts: list[Verdict]


class SmallChart(BaseModel):
    name: str
    latest: str  # the category's accuracy on the newest night that measured it
    chart: Chart | None


class ConfigView(BaseModel, arbitrary_types_allowed=True):
    id: str
    title: str
    judge_type: str
    model: str
    benchmark: str
    alert: str  # tonight's
    needs_look: bool
    sort_drop: float  # tonight's change against its baseline (missing: last)
    sort_noise: float
    sort_cost: float
    tonight_text: str
    delta_text: str
    noise_text: str
    detectable_text: str
    cost_text: str
    flips_text: str
    message: str
    cells: list[GridCell]
    cells_html: Markup
    trend: Chart | None
    bias: Chart | None
    small: list[SmallChart]
    flips: Flips | None


@dataclass
class _Config:
    key: str
    title: str
    first: Any
    by_night: dict[int, list[Any]] = field(default_factory=dict)

    def last_run(self, night: int) -> Any | None:
        runs = self.by_night.get(night)
        return runs[-1] if runs else None


def _configs(nights: Sequence[Night]) -> list[_Config]:
    """Each configuration seen in the nights, by title (a title two keys share gets its key's start)."""
    found: dict[str, _Config] = {}
    for index, night in enumerate(nights):
        for run in sorted(night.runs, key=lambda r: as_utc(r.started)):
            config = found.get(run.config_key)
            if config is None:
                title = run_name(run.judge_type, run.model, run.data_file)
                config = found[run.config_key] = _Config(run.config_key, title, run)
            config.by_night.setdefault(index, []).append(run)
    titles = defaultdict(list)
    for config in found.values():
        titles[config.title].append(config)
    for same in titles.values():
        if len(same) > 1:
            for config in same:
                config.title += f" ({config.key[:6]})"
    benchmarks = {benchmark_of(c.first) for c in found.values()}
    if len(benchmarks) > 1:
        for config in found.values():
            config.title = f"{benchmark_of(config.first)} · {config.title}"
    return sorted(found.values(), key=lambda c: c.title.lower())


def _cell(run: Any | None, label: str) -> GridCell:
    """A night's cell: its mark and accuracy, and in its title the word, the change, the noise, the drop
    the check could see and a failure's reason."""
    if run is None:
        return GridCell(alert="none", text=ALERTS["none"][0], title=f"{label}: not run")
    alert = alert_of(run)
    symbol, word, _ = ALERTS[alert]
    accuracy = finite(run.overall_accuracy)
    measured = accuracy is not None and alert != "failed"
    parts = [f"{label}: {word}"]
    if measured:
        parts.append(percent(accuracy))
    delta, sd, seen = finite(run.delta), finite(run.noise_sd), finite(run.detectable_drop)
    if delta is not None:
        parts.append(f"change {_pts(delta)}")
    if sd is not None:
        parts.append(f"noise {_noise_text(sd)}")
    if seen is not None and seen <= 1:
        parts.append(f"sees a drop of {seen * 100:.1f}")
    if alert == "failed" and run.message:
        parts.append(shorten(one_line(run.message), 160))
    return GridCell(
        alert=alert, text=symbol + (percent(accuracy, sign="") if measured else ""), title=" · ".join(parts)
    )


def _point(run: Any | None, cell: GridCell, label: str, previous_served: str | None) -> Point:
    """The night on the configuration's charts (`cell`: its grid cell, which says its alert)."""
    if run is None:
        return Point(title=cell.title)
    sd, base = finite(run.noise_sd), finite(run.baseline_accuracy)
    changed = None
    if run.drift:  # "the endpoint changed: ..." (results.json's drift.message)
        changed = f"{label}: {one_line(run.drift)}"
    elif run.served_as and previous_served and run.served_as != previous_served:
        changed = f"{label}: the endpoint said {one_line(run.served_as)} (before: {one_line(previous_served)})"
    measured = cell.alert != "failed"
    return Point(
        accuracy=finite(run.overall_accuracy) if measured else None,
        ci_low=finite(run.ci_low) if measured else None,
        ci_high=finite(run.ci_high) if measured else None,
        noise_low=None if sd is None or base is None else max(0.0, base - 1.96 * sd),
        noise_high=None if sd is None or base is None else min(1.0, base + 1.96 * sd),
        order_consistency=finite(run.order_consistency),
        first_position_rate=finite(run.first_position_rate),
        alert=cell.alert,
        title=cell.title,
        changed=changed,
    )


def _grid_cells(cells: Sequence[GridCell], words: dict[str, str]) -> Markup:
    """A configuration's night cells as markup (17,520 cells for a year of 48: written here, not by a
    template loop); tonight's, last, also says its word and is labelled for screen readers."""
    html = [f'<td class="a-{c.alert}" title="{escape(c.title)}">{escape(c.text)}</td>' for c in cells[:-1]]
    if cells:
        c = cells[-1]
        html.append(
            f'<td class="tonight a-{c.alert}" data-alert="{c.alert}" title="{escape(c.title)}" '
            f'aria-label="tonight: {escape(c.title)}">{escape(c.text)}<span class="word">{words[c.alert]}</span></td>'
        )
    return Markup("".join(html))


def _scored(verdicts: Iterable[tuple[Any, ...]]) -> dict[str, Any]:
    return pair_scores(
        FileVerdict(pair_id, order, source, category, label, status, decision or "", epoch)
        for pair_id, order, source, category, label, status, decision, epoch in verdicts
    )


@dataclass
class _FlipPlan:
    config: str
    tonight: Any
    baseline_run: str
    baseline_night: str


def _flip_plans(configs: Sequence[_Config], nights: Sequence[Night], labels: Sequence[str]) -> list[_FlipPlan]:
    """Tonight's run of each configuration and the run it was checked against: its regression check's
    newest baseline (found on the page or not), else its latest earlier finished run on the page."""
    tonight = len(nights) - 1
    plans = []
    for config in configs:
        run = config.last_run(tonight)
        if run is None or run.status not in FINISHED:
            continue
        earlier = [(i, r) for i in range(tonight) for r in config.by_night.get(i, []) if r.status in FINISHED]
        if run.baseline_run_id:
            night = next((labels[i] for i, r in earlier if r.run_id == run.baseline_run_id), "its baseline")
            plans.append(_FlipPlan(config.key, run, run.baseline_run_id, night))
        elif earlier:
            plans.append(_FlipPlan(config.key, run, earlier[-1][1].run_id, labels[earlier[-1][0]]))
    return plans


def _flips(engine: Engine, plans: Sequence[_FlipPlan]) -> dict[str, Flips]:
    """Per configuration, the pairs tonight judged the other way than its baseline did, and both
    verdicts of the ones shown (answers cut to ANSWER_CHARS)."""
    if not plans:
        return {}
    verdicts = queries.runs_verdicts(engine, [p.tonight.run_id for p in plans] + [p.baseline_run for p in plans])
    found: dict[str, Flips] = {}
    wanted: list[tuple[str, str]] = []
    for plan in plans:
        now, before = _scored(verdicts[plan.tonight.run_id]), _scored(verdicts.get(plan.baseline_run, []))
        worse: list[Flip] = []
        better: list[Flip] = []
        for pair_id in sorted(set(now) & set(before)):
            right_now, right_before = now[pair_id].correctness > 0.5, before[pair_id].correctness > 0.5
            if right_now != right_before:
                flip = Flip(
                    pair_id=pair_id,
                    category=now[pair_id].category,
                    before=anchor(plan.baseline_run, pair_id),
                    after=anchor(plan.tonight.run_id, pair_id),
                )
                (better if right_now else worse).append(flip)
        shown = worse[:FLIPS_SHOWN] + better[:FLIPS_SHOWN]
        wanted += [(run, f.pair_id) for f in shown for run in (plan.baseline_run, plan.tonight.run_id)]
        found[plan.config] = Flips(
            baseline_run=plan.baseline_run,
            baseline_night=plan.baseline_night,
            tonight_run=plan.tonight.run_id,
            worse=worse[:FLIPS_SHOWN],
            better=better[:FLIPS_SHOWN],
            worse_count=len(worse),
            better_count=len(better),
            verdicts=[],
        )
    nights_of = {p.tonight.run_id: "tonight" for p in plans} | {p.baseline_run: p.baseline_night for p in plans}
    by_config = {p.tonight.run_id: p.config for p in plans} | {p.baseline_run: p.config for p in plans}
    tonight_runs = {p.tonight.run_id for p in plans}
    rows = sorted(
        queries.pair_judgments(engine, wanted), key=lambda r: (r.pair_id, r.run_id in tonight_runs, r.order_index)
    )
    blocks: dict[str, Verdict] = {}
    for row in rows:
        config = by_config.get(row.run_id)
        if config is None:
            continue
        key = anchor(row.run_id, row.pair_id)
        if key not in blocks:
            blocks[key] = Verdict(
                id=key, pair_id=row.pair_id, run=row.run_id, night=nights_of[row.run_id], label=row.label, said=[]
            )
            found[config].verdicts.append(blocks[key])
        blocks[key].said.append(
            Said(
                order=row.order_index,
                decision=row.decision or "–",
                decision_for_pair=row.decision_for_pair or "–",
                status=row.status,
                answer=shorten(" ".join((row.response or row.error or "").split()), ANSWER_CHARS),
            )
        )
    return found


def _config_view(
    index: int,
    config: _Config,
    labels: Sequence[str],
    categories: dict[str, dict[str, tuple[float, float | None, float | None]]],
    flips: Flips | None,
) -> ConfigView:
    tonight = len(labels) - 1
    cells, points, served = [], [], None
    for night, label in enumerate(labels):
        run = config.last_run(night)
        cell = _cell(run, label)
        cells.append(cell)
        points.append(_point(run, cell, label, served))
        if run is not None and run.served_as:
            served = run.served_as
    run = config.last_run(tonight)
    alert = cells[-1].alert
    cost, unpriced = _cost(config.by_night.get(tonight, []))
    delta = finite(run.delta) if run is not None else None
    detectable = finite(run.detectable_drop) if run is not None else None
    seen = {name for runs in config.by_night.values() for r in runs for name in categories.get(r.run_id, {})}
    names = [c for c in CATEGORIES if c in seen] + sorted(seen - set(CATEGORIES))
    small = []
    for name in names:
        values = []
        for night in range(len(labels)):
            last = config.last_run(night)
            figure = categories.get(last.run_id, {}).get(name) if last is not None else None
            values.append(figure[0] if figure and cells[night].alert != "failed" else None)
        latest = next((v for v in reversed(values) if v is not None), None)
        small.append(SmallChart(name=name, latest=percent(latest), chart=small_chart(values, labels, name)))
    return ConfigView(
        id=f"cfg-{index}",
        title=config.title,
        judge_type=config.first.judge_type,
        model=config.first.model,
        benchmark=benchmark_of(config.first),
        alert=alert,
        needs_look=alert in NEEDS_A_LOOK,
        sort_drop=delta if delta is not None else math.inf,
        sort_noise=-(finite(run.noise_sd) or 0.0) if run is not None else 0.0,
        sort_cost=-(cost or 0.0),
        tonight_text=cells[-1].text,
        delta_text=_pts(delta) if delta is not None else "",
        noise_text=_noise_text(run.noise_sd) if run is not None else "",
        detectable_text=f"{detectable * 100:.1f} pts" if detectable is not None and detectable <= 1 else "",
        cost_text=(format_usd(cost) if cost is not None else "")
        + (f" +{unpriced} unpriced" if unpriced and cost is not None else "unpriced" if unpriced else ""),
        flips_text=f"−{flips.worse_count} / +{flips.better_count}" if flips else "",
        message=shorten(one_line(run.message), 300) if run is not None and run.message else "",
        cells=cells,
        cells_html=_grid_cells(cells[-GRID_NIGHTS:], {k: w for k, (_, w, _) in ALERTS.items()}),
        trend=trend_chart(points, labels),
        bias=bias_chart(points, labels),
        small=small,
        flips=flips,
    )


class TonightView(BaseModel):
    label: str
    started: str
    counts: list[tuple[str, str, int]]  # alert, its symbol and word, cells
    cost: str
    budget: str
    wall: str
    detectable: str
    failed: list[tuple[str, str, str]]  # config id, title, reason
    changed: list[tuple[str, str, str]]  # config id, title, what the endpoint said differently


def _tonight(
    night: Night, label: str, views: Sequence[ConfigView], facts: NightFacts | None, budget: tuple | None
) -> TonightView:
    counts: dict[str, int] = defaultdict(int)
    for view in views:
        counts[view.alert] += 1
    cost, unpriced = _cost(night.runs)
    runs = f"{unpriced} run{'s' if unpriced != 1 else ''}"
    if cost is None:
        cost_text = f"unpriced ({runs})" if unpriced else "–"
    else:
        cost_text = format_usd(cost) + (f" plus {runs} unpriced" if unpriced else "")
    if facts is not None and facts.max_cost is not None:
        held = f"; still held {format_usd(facts.held)}" if facts.held else ""
        budget_text = f"{format_usd(facts.max_cost)} (max_cost); spent {format_usd(facts.spent)}{held}"
    elif budget is not None:
        max_cost, spent, held = budget
        budget_text = f"{format_usd(max_cost)} (max_cost); spent {format_usd(spent)}" + (
            f"; still held {format_usd(held)}" if held else ""
        )
    else:
        budget_text = "none recorded"
    if facts is not None and facts.wall_s is not None:
        wall = _duration(facts.wall_s)
    else:
        span = (night.finished - night.started).total_seconds() if night.finished else None
        wall = _duration(span) + (" (first cell's start to last cell's end)" if span is not None else "")
    drops = sorted(
        r.detectable_drop for r in night.runs if finite(r.detectable_drop) is not None and r.detectable_drop <= 1
    )
    detectable = (
        "no regression check tonight"
        if not drops
        else f"each check detects a drop of {drops[0] * 100:.1f}"
        + (f" to {drops[-1] * 100:.1f}" if drops[-1] != drops[0] else "")
        + " points 80% of the time"
    )
    by_alert = {v.id: v for v in views}
    return TonightView(
        label=label,
        started=night.started.strftime("%Y-%m-%d %H:%M UTC"),
        counts=[(alert, f"{ALERTS[alert][0]} {ALERTS[alert][1]}", counts[alert]) for alert in ALERTS if counts[alert]],
        cost=cost_text,
        budget=budget_text,
        wall=wall,
        detectable=detectable,
        failed=[(v.id, v.title, v.message or "no reason recorded") for v in by_alert.values() if v.alert == "failed"],
        changed=[
            (v.id, v.title, v.trend.changes[-1].title)
            for v in views
            if v.trend and v.trend.changes and v.cells and v.trend.changes[-1].x == _last_x(v.trend)
        ],
    )


def _last_x(chart: Chart) -> int:
    return chart.x_labels[-1][0] if chart.x_labels else -1


def build_context(engine: Engine, filters: DashboardFilter, facts: NightFacts | None = None) -> dict[str, object]:
    """Everything the template shows, already formatted (its variables by name: only the template reads them)."""
    nights = read_nights(engine, filters)
    labels = _night_labels(nights)
    configs = _configs(nights)
    run_ids = [r.run_id for n in nights for r in n.runs]
    categories = queries.category_metrics(engine, run_ids)
    flips = _flips(engine, _flip_plans(configs, nights, labels)) if nights else {}
    views = [_config_view(i, c, labels, categories, flips.get(c.key)) for i, c in enumerate(configs)]
    tonight = None
    if nights:
        budgets = queries.night_budgets(engine, [nights[-1].key])
        if facts is not None and facts.night_id not in (None, nights[-1].key):
            facts = None  # another night's figures: the newest night here is not the one that knew them
        tonight = _tonight(nights[-1], labels[-1], views, facts, budgets.get(nights[-1].key))
    shown = [
        f"{name} {value}"
        for name, value in filters.model_dump().items()
        if value not in (None, "") and name != "nights"
    ]
    return {
        "generated": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "filters": ", ".join(shown),
        "grid_nights": [
            {"label": label, "title": f"{n.started:%Y-%m-%d %H:%M} UTC · {len(n.runs)} runs"}
            for n, label in list(zip(nights, labels, strict=True))[-GRID_NIGHTS:]
        ],
        "nights": [
            {"label": label, "title": f"{n.started:%Y-%m-%d %H:%M} UTC · {len(n.runs)} runs"}
            for n, label in zip(nights, labels, strict=True)
        ],
        "alerts": [{"key": k, "symbol": s, "word": w, "means": m} for k, (s, w, m) in ALERTS.items()],
        "alerts_words": {k: w for k, (_, w, _) in ALERTS.items()},
        "configs": views,
        "tonight": tonight,
        "categories": list(CATEGORIES),
    }


@lru_cache(maxsize=1)
def _template() -> Template:
    source = files("judgebench_flows.templates").joinpath(TEMPLATE_NAME).read_text(encoding="utf-8")
    env = SandboxedEnvironment(autoescape=True, trim_blocks=True, lstrip_blocks=True, finalize=page_text)
    return env.from_string(source)


@lru_cache(maxsize=1)
def _script() -> tuple[str, str]:
    """The page's one script and its CSP source (`'sha256-…'`): the only script the page may run."""
    script = files("judgebench_flows.templates").joinpath(SCRIPT_NAME).read_text(encoding="utf-8")
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    return script, f"'sha256-{digest}'"


def render_dashboard(context: dict[str, object]) -> str:
    script, source = _script()
    return _template().render(**context, script=Markup(script), script_source=Markup(source))


def dashboard_html(engine: Engine, filters: DashboardFilter, facts: NightFacts | None = None) -> str:
    """The page as one HTML string."""
    return render_dashboard(build_context(engine, filters, facts))


def write_dashboard(
    path: str | Path,
    engine: Engine,
    filters: DashboardFilter,
    facts: NightFacts | None = None,
    option: str = "--output",
) -> str | Path:
    """Render and write the page (a path or an object-store URL); returns where it was written."""
    from judgebench_flows.scoring.results import write_atomic

    return write_atomic(path, dashboard_html(engine, filters, facts), option)


__all__ = [
    "ALERTS",
    "PAGE_NAME",
    "DashboardFilter",
    "NightFacts",
    "alert_of",
    "anchor",
    "build_context",
    "dashboard_html",
    "night_key",
    "read_nights",
    "render_dashboard",
    "write_dashboard",
]

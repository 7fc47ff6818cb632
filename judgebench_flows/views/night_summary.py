"""What a person reads of a night: its summary artifact's Markdown (each configuration's status, accuracy,
judgments and cost, the night's cost and budget, what drifted, what its regression checks could see, why
each cell needing a look does) and its timing tables (each endpoint's calls and busy share, each cell's wait).

Plain text from plain data: the cells' outcomes (scoring/cell_outcome.py), what each endpoint saw
(calls/limits.py) and the night's spend; flows/nightly.py writes it as the night's artifact.
"""

from __future__ import annotations

from judgebench_flows.calls.limits import EndpointUse
from judgebench_flows.core.pricing import NightSpend, format_usd
from judgebench_flows.data import storage
from judgebench_flows.data.night_budget import NightTotals
from judgebench_flows.scoring.cell_outcome import CellOutcome
from judgebench_flows.scoring.formatting import percent as _pct


def _cell_cost(outcome: CellOutcome) -> str:
    """A cell's cost: dollars, `unpriced` (never $0 for a model without a price) or `-` before any count."""
    if outcome.unpriced:
        return "unpriced"
    return format_usd(outcome.cost_usd) if outcome.cost_usd is not None else "-"


def _night_cost(outcomes: list[CellOutcome]) -> str:
    """The night's total in dollars; unpriced configurations are named as such, never added as $0."""
    total = sum(o.cost_usd or 0.0 for o in outcomes)
    unpriced = sum(o.unpriced for o in outcomes)
    return f"Tonight's cost: {format_usd(total)}" + (
        f" plus {unpriced} unpriced configuration{'s' if unpriced != 1 else ''}" if unpriced else ""
    )


def _night_budget(budget: NightSpend | NightTotals | None) -> list[str]:
    """The night's budget beside its cost: `max_cost`, what its calls spent and, on a pool night, what
    cell runs still hold (a cell that died holding its reservation shows here); nothing without a budget."""
    if budget is None:
        return []
    held = f"; still held {format_usd(budget.held)}" if isinstance(budget, NightTotals) else ""
    return [f"Night budget (max_cost): {format_usd(budget.max_cost)}; spent {format_usd(budget.spent)}{held}", ""]


def night_markdown(wall_s: float, endpoints: dict[str, EndpointUse], outcomes: list[CellOutcome]) -> str:
    """The night's timing: its wall time, each endpoint's calls and busy time, each cell's wait."""
    lines = [
        "",
        f"Night: {wall_s:.1f} s wall time.",
        "",
        "| endpoint | concurrency | calls | busy | busy share | most in flight |",
        "|---|---|---|---|---|---|",
    ]
    for name, usage in sorted(endpoints.items()):
        share = f"{usage['busy_share']:.0%}" if "busy_share" in usage else "-"
        lines.append(
            f"| {name} | {usage['concurrency']} | {usage['calls']} | {usage['busy_s']:.1f} s | {share} | {usage['max_in_flight']} |"
        )
    lines += ["", "| configuration | run | pairs | endpoint | waited | took |", "|---|---|---|---|---|---|"]
    for o in outcomes:
        wait, took = (f"{v:.1f} s" if v is not None else "-" for v in (o.wait_s, o.duration_s))
        run = (o.run_id or "-")[:8]
        lines.append(f"| {o.title or o.name} | {run} | {o.n_pairs or '-'} | {o.endpoint} | {wait} | {took} |")
    return "\n".join(lines)


def _alert_power(outcomes: list[CellOutcome]) -> list[str]:
    """What the night's regression checks could see: each held its share of the night's false-alarm rate
    and detects drops of these sizes 80% of the time (docs/alerts.md); nothing before a cell has history."""
    checked = [o for o in outcomes if o.detectable_drop is not None]
    if not checked:
        return []
    drops = sorted(o.detectable_drop for o in checked if o.detectable_drop is not None)
    rate = max(o.alert_rate or 0 for o in checked)  # the night's, which each cell holds a share of
    head = f"Regression checks: {len(checked)} cells, a false-alarm rate of {rate:.2g} for the night together; "
    seen = [d for d in drops if d <= 1]  # above 100 points: too few pairs to see any drop
    if not seen:
        return [head + "too few pairs in each for any drop to be detected 80% of the time.", ""]
    span = f"{seen[0] * 100:.1f}" if seen[0] == seen[-1] else f"{seen[0] * 100:.1f} to {seen[-1] * 100:.1f}"
    blind = f" ({len(drops) - len(seen)} with too few pairs to see any)" if len(seen) < len(drops) else ""
    return [head + f"each detects an accuracy drop of {span} points 80% of the time{blind}.", ""]


def _sequential_lines(outcomes: list[CellOutcome]) -> list[str]:
    """Each cell's sequential test: what it is flagged for, and the nights a persistent 5-point drop takes
    to be caught 90% of the time at its epochs and noise (docs/alerts.md)."""
    flagged = [o for o in outcomes if o.flagged]
    lines = [f"**Flagged** (until `judgebench alerts reset`): {len(flagged)} configurations:", ""] if flagged else []
    lines += [f"- {o.title or o.name}: {o.flagged}" for o in flagged] + ([""] if flagged else [])
    planned = [o for o in outcomes if o.detectable_drop is not None and not o.flagged]
    if planned:
        nights = ", ".join(
            f"{o.title or o.name} {o.nights_to_detect if o.nights_to_detect is not None else '60+'}" for o in planned
        )
        lines += [
            f"Sequential test: a persistent 5-point drop is caught 90% of the time within (nights): {nights}.",
            "",
        ]
    return lines


def summary_markdown(
    outcomes: list[CellOutcome], budget: NightSpend | NightTotals | None = None, page: str | None = None
) -> str:
    """The night's summary: how many configurations completed, regressed or failed, the night's cost and
    budget, then one row per configuration, so a red night's page says which cells need a look and why;
    `page`: the night's dashboard (flows/night_page.py), linked below the counts."""
    bad = [o for o in outcomes if o.status != "completed"]
    lines = [
        "# JudgeBench nightly",
        "",
        f"{len(outcomes)} configurations: {len(outcomes) - len(bad)} completed, "
        f"{sum(o.status == 'regressed' for o in outcomes)} regressed, {sum(o.status == 'failed' for o in outcomes)} failed.",
        "",
        *([f"Every configuration's nights on one page: {storage.markdown_link(page)}", ""] if page else []),
        _night_cost(outcomes),
        "",
        *_night_budget(budget),
        *drift_lines(outcomes),
        *_alert_power(outcomes),
        *_sequential_lines(outcomes),
        # Fits a 1400 px page beside Prefect's side panels: short names, the interval with the accuracy,
        # failed and invalid judgments in one column; each failure's reason below the table, whole.
        "| configuration | status | accuracy (95% CI) | failed / invalid | cost |",
        "|---|---|---|---|---|",
    ]
    for o in outcomes:
        ci = f" ({_pct(o.ci_low)}–{_pct(o.ci_high)})" if o.ci_low is not None else ""
        status = o.status if o.status == "completed" else f"**{o.status.upper()}**"
        judged = "-" if o.failed_judgments is None else f"{o.failed_judgments} / {o.invalid_judgments or 0}"
        judged += f" of {o.judgments}" if o.judgments is not None and o.failed_judgments is not None else ""
        accuracy = "n/a" if _measured_nothing(o) else f"{_pct(o.accuracy)}{ci}"
        lines.append(f"| {o.title or o.name} | {status} | {accuracy} | {judged} | {_cell_cost(o)} |")
    noted = [o for o in outcomes if o.message]
    if noted:
        lines += ["", "Why:", ""]
        lines += [f"- **{o.title or o.name}** ({o.status}): {' '.join(o.message.split())}" for o in noted if o.message]
    cached = [o for o in outcomes if o.from_cache]
    if cached:
        lines += ["", "Where each configuration's answers came from:", ""]
        lines += [f"- {o.title or o.name}: {o.from_cache}" for o in cached]
    return "\n".join(lines)


def _measured_nothing(outcome: CellOutcome) -> bool:
    """Every judgment failed or invalid: JudgeBench's metric scores that 0.00%, which reads as a measurement;
    the table says n/a, as the run's own summary does."""
    if outcome.status == "completed" or not outcome.judgments:
        return False
    return (outcome.failed_judgments or 0) + (outcome.invalid_judgments or 0) >= outcome.judgments


def drift_lines(outcomes: list[CellOutcome]) -> list[str]:
    """The configurations whose endpoint said another model or fingerprint than at their baseline run,
    whatever their accuracy did (a drift with unchanged accuracy is news too)."""
    drifted = [o for o in outcomes if o.drift]
    if not drifted:
        return []
    lines = [f"**Endpoint changed** under {len(drifted)} configuration{'s' if len(drifted) > 1 else ''}:", ""]
    lines += [f"- {o.title or o.name} ({o.status}): {o.drift}" for o in drifted]
    return [*lines, ""]


__all__ = ["drift_lines", "night_markdown", "summary_markdown"]

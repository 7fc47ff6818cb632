"""The leaderboard as text: a row's labels (its model with any shutdown date, who ran it, its coverage)
and the Markdown tables the flow's artifact and `--format markdown` show. The ranking is
`scoring.leaderboard`; the HTML page `scoring.leaderboard_report`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import partial

from judgebench_flows.scoring.formatting import percent
from judgebench_flows.scoring.leaderboard import (
    Entry,
    Leaderboard,
    distinct_pairs,
    group_key,
)
from judgebench_flows.scoring.result_types import SliceAccuracy


def model_label(entry: Entry) -> str:
    """The judge model as the tables show it: with "(shut down DATE)" or "(shuts down DATE)" when marked."""
    retirement = entry.retirement
    if not retirement:
        return entry.judge_model
    verb = "shut down" if retirement.retired else "shuts down"
    return f"{entry.judge_model} ({verb} {retirement.shutdown_date})"


_pct = partial(percent, sign="")


def _interval(acc: SliceAccuracy) -> str:
    low, high = acc.ci_low, acc.ci_high
    return f"{_pct(low)}-{_pct(high)}" if low is not None and high is not None else ""


def coverage(entry: Entry) -> str:
    """ ", 20 of 350 pairs" for a run on a subset or a published file with missing lines, else ""."""
    full = entry.benchmark_pairs
    return f", {distinct_pairs(entry)} of {full} pairs" if full and distinct_pairs(entry) < full else ""


def who(entry: Entry) -> str:
    """How a row is labelled: published rows by file, ours with the whole run id (what `compare` takes) and
    date; either with its pair count when it covers less than the benchmark."""
    if entry.origin == "run":
        cost = f", {entry.cost}" if entry.cost else ""
        changed = f", endpoint CHANGED: {entry.drift}" if entry.drift else ""
        return f"ours, run {entry.run_id} {(entry.date or '')[:10]}".rstrip() + coverage(entry) + cost + changed
    return "published" + coverage(entry)


def groups_of(entries: Sequence[Entry]) -> dict[str, list[Entry]]:
    grouped: dict[str, list[Entry]] = {}
    for entry in entries:
        grouped.setdefault(entry.group or group_key(entry), []).append(entry)
    return grouped


def markdown(board: Leaderboard, highlight: Iterable[str] = ()) -> str:
    """Markdown tables per response-model dataset (for Prefect artifacts); rows of `highlight` run ids in bold."""
    marked = set(highlight)
    categories = tuple(board.categories)
    llmbar = board.benchmark == "llmbar"
    lines = [
        f"LLMBar {board.dataset.repo_url} at {board.dataset.commit[:12]}; accuracy in % (LLMBar's correct_average), "
        "95% bootstrap interval; tier: not significantly worse than the tier's best row (exact sign test, Bonferroni)."
        if llmbar
        else f"JudgeBench {board.dataset.repo_url} at {board.dataset.commit[:12]}; accuracy in %, 95% bootstrap interval; "
        "tier: not significantly worse than the tier's best row (exact McNemar, Bonferroni)."
    ]
    for note in board.notes:
        lines += ["", f"_{note}_"]
    for group, members in groups_of(board.entries).items():
        lines += [
            "",
            f"### {'Subset' if llmbar else 'Responses by'} {group}",
            "",
            "| # | tier | judge | model | origin | pairs | overall | 95% CI | " + " | ".join(categories) + " |",
            "|---|---|---|---|---|---|---|---|" + "---|" * len(categories),
        ]
        for e in members:
            bold = "**" if e.run_id in marked else ""
            cats = " | ".join(_pct(_category(e, c).accuracy) for c in categories)
            lines.append(
                f"| {e.rank or '-'} | {e.tier or '-'} | {bold}{e.judge_name}{bold} | {bold}{model_label(e)}{bold} | {who(e)} | {e.pairs} | "
                f"{bold}{_pct(e.overall_accuracy.accuracy)}{bold} | {_interval(e.overall_accuracy)} | {cats} |"
            )
    return "\n".join(lines + _averages_markdown(board))


def _averages_markdown(board: Leaderboard) -> list[str]:
    """LLMBar's averages per judge as its paper reports them (no lines for a board without them)."""
    if not board.averages:
        return []
    subsets = list(board.averages[0].subsets)
    lines = [
        "",
        "### Averages as LLMBar's paper reports them (Adversarial: mean of its four subsets)",
        "",
        "| judge | model | origin | " + " | ".join(subsets) + " | Natural | Adversarial |",
        "|---|---|---|" + "---|" * (len(subsets) + 2),
    ]
    for row in board.averages:
        figures = [_pct(row.subsets.get(s)) for s in subsets]
        figures += [_pct(row.averages.get("Natural")), _pct(row.averages.get("Adversarial"))]
        lines.append(f"| {row.judge_name} | {row.judge_model} | {row.origin} | " + " | ".join(figures) + " |")
    return lines


def _category(entry: Entry, category: str) -> SliceAccuracy:
    """An entry's accuracy in a category (an empty one when it has none)."""
    return entry.category_accuracy.get(category) or SliceAccuracy()


__all__ = ["coverage", "groups_of", "markdown", "model_label", "who"]

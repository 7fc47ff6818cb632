"""The leaderboard as one self-contained HTML page: sortable tables with interval whiskers, no JavaScript.

Like the run report, the page loads nothing external and runs no script (it is opened from disk, mailed,
attached to artifacts). Sorting is done without script: each table holds one pre-sorted body per sort
key, and the column headers are labels of radio buttons whose `:checked` state shows that body. The
whisker geometry is computed here; the template only draws. Judge and model names come from files
anyone can publish, so the template runs sandboxed with autoescape on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Any

from jinja2 import Template
from jinja2.sandbox import SandboxedEnvironment
from pydantic import BaseModel

from judgebench_flows.core.records import CATEGORIES
from judgebench_flows.core.text import page_text
from judgebench_flows.data import storage
from judgebench_flows.scoring.leaderboard import HTML_NAME, Entry, Leaderboard
from judgebench_flows.scoring.leaderboard_text import groups_of, model_label, who
from judgebench_flows.scoring.result_types import SliceAccuracy

TEMPLATE_NAME = "leaderboard.html.jinja2"
_WHISKER_W, _WHISKER_H = 120, 14


@lru_cache(maxsize=1)
def _template() -> Template:
    source = files("judgebench_flows.templates").joinpath(TEMPLATE_NAME).read_text(encoding="utf-8")
    return SandboxedEnvironment(autoescape=True, trim_blocks=True, lstrip_blocks=True, finalize=page_text).from_string(
        source
    )


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _x(fraction: float) -> str:
    return f"{2 + max(0.0, min(1.0, fraction)) * (_WHISKER_W - 4):.1f}"


class Cell(BaseModel):
    """One accuracy cell: the figure, its interval as text, and the whisker's x positions."""

    text: str
    title: str
    point: str | None
    low: str | None
    high: str | None


def _cell(acc: SliceAccuracy | None) -> Cell:
    acc = acc or SliceAccuracy()
    value, low, high = _num(acc.accuracy), _num(acc.ci_low), _num(acc.ci_high)
    total = acc.total_samples
    interval = f"{low * 100:.1f}–{high * 100:.1f}%" if low is not None and high is not None else ""
    return Cell(
        text="–" if value is None else f"{value * 100:.1f}",
        title=(
            "no pairs"
            if value is None
            else f"{value * 100:.2f}% of {total} pairs" + (f", 95% CI {interval}" if interval else "")
        ),
        point=None if value is None else _x(value),
        low=None if low is None else _x(low),
        high=None if high is None else _x(high),
    )


def _sort_keys(categories: Sequence[str] = CATEGORIES) -> list[dict[str, str]]:
    keys = [{"id": "k0", "name": "overall"}]
    keys += [{"id": f"k{i + 1}", "name": category} for i, category in enumerate(categories)]
    keys += [{"id": f"k{len(categories) + 1}", "name": "judge"}, {"id": f"k{len(categories) + 2}", "name": "pairs"}]
    return keys


def _sorted(members: Sequence[Entry], key: str) -> list[Entry]:
    def accuracy(entry: Entry) -> float:
        acc = entry.overall_accuracy if key == "overall" else entry.category_accuracy.get(key)
        value = _num(acc.accuracy) if acc else None
        return -1.0 if value is None else value

    if key == "judge":
        return sorted(members, key=lambda e: (e.judge_name.lower(), e.judge_model.lower()))
    if key == "pairs":
        return sorted(members, key=lambda e: -e.pairs)
    return sorted(members, key=lambda e: -accuracy(e))  # stable: ties keep the overall ranking


class Row(BaseModel):
    """One entry as the page shows it."""

    rank: int | str  # "" for a run on a subset (none)
    tier: int | str  # "": not compared (a subset, other pairs)
    judge: str
    model: str
    model_shown: str  # with its shutdown date when retired or retiring
    ours: bool
    origin: str
    origin_title: str
    mode: str
    pairs: int
    overall: Cell
    categories: list[Cell]


def _row(entry: Entry, categories: Sequence[str] = CATEGORIES) -> Row:
    return Row(
        rank=entry.rank or "",
        tier=entry.tier or "",
        judge=entry.judge_name,
        model=entry.judge_model,
        model_shown=model_label(entry),
        ours=entry.origin == "run",
        origin=who(entry),
        origin_title=entry.file
        or f"run {entry.run_id} ({entry.status}, {entry.date})"
        + (f"; the endpoint said {entry.served}" if entry.served else ""),
        mode=entry.mode or "",
        pairs=entry.pairs,
        overall=_cell(entry.overall_accuracy),
        categories=[_cell(entry.category_accuracy.get(c)) for c in categories],
    )


def build_context(board: Leaderboard) -> dict[str, object]:
    """The leaderboard template's variables by name (only the template reads them)."""
    categories = list(board.categories)
    keys = _sort_keys(categories)
    groups = []
    for index, (name, members) in enumerate(groups_of(board.entries).items()):
        groups.append(
            {
                "id": f"g{index}",
                "name": name,
                "count": len(members),
                "ours": sum(1 for m in members if m.origin == "run"),
                "bodies": [
                    {"key": k["id"], "rows": [_row(e, categories) for e in _sorted(members, k["name"])]} for k in keys
                ],
            }
        )
    return {
        "repo_url": board.dataset.repo_url,
        "commit": board.dataset.commit,
        "generated": board.generated[:16].replace("T", " "),
        "notes": board.notes,
        "seed": board.seed,
        "resamples": board.bootstrap_resamples,
        "categories": categories,
        "title": "LLMBar" if board.benchmark == "llmbar" else "JudgeBench",
        "rule": board.benchmark or "judgebench",
        "group_label": "Subset" if board.benchmark == "llmbar" else "Responses by",
        "averages": _averages(board),
        "keys": keys,
        "groups": groups,
        "whisker": {
            "w": _WHISKER_W,
            "h": _WHISKER_H,
            "mid": _WHISKER_H / 2,
            "chance": _x(0.5),
            "end": _x(1.0),
            "start": _x(0.0),
        },
    }


def _averages(board: Leaderboard) -> dict[str, object] | None:
    """LLMBar's averages per judge for the page: the subsets' and the two headline figures as cells."""
    if not board.averages:
        return None
    subsets = list(board.averages[0].subsets)
    rows = [
        {
            "judge": row.judge_name,
            "model": row.judge_model,
            "origin": row.origin,
            "cells": [_percent_text(row.subsets.get(s)) for s in subsets]
            + [_percent_text(row.averages.get("Natural")), _percent_text(row.averages.get("Adversarial"))],
        }
        for row in board.averages
    ]
    return {"columns": [*subsets, "Natural", "Adversarial"], "rows": rows}


def _percent_text(value: float | None) -> str:
    number = _num(value)
    return "–" if number is None else f"{number * 100:.1f}"


def render_leaderboard(board: Leaderboard) -> str:
    """The leaderboard JSON document (see `leaderboard.build_leaderboard`) as one HTML string."""
    return _template().render(**build_context(board))


def write_outputs(board: Leaderboard, result_path: str | Path, output_dir: str | Path) -> dict[str, str]:
    """The JSON document and the HTML page; returns their paths."""
    from judgebench_flows.scoring.results import write_atomic, write_json

    json_path = write_json(result_path, board)
    html_path = write_atomic(storage.join(output_dir, HTML_NAME), render_leaderboard(board))
    return {"results": str(json_path), "html": str(html_path)}


__all__ = ["render_leaderboard", "build_context", "write_outputs"]

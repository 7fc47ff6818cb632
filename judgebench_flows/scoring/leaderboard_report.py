"""The leaderboard as one self-contained HTML page: sortable tables with interval whiskers, no JavaScript.

Like the run report, the page loads nothing external and runs no script (it is opened from disk, mailed,
attached to artifacts). Sorting is done without script: each table holds one pre-sorted body per sort
key, and the column headers are labels of radio buttons whose `:checked` state shows that body. The
whisker geometry is computed here; the template only draws. Judge and model names come from files
anyone can publish, so the template runs sandboxed with autoescape on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Any

from jinja2 import Template
from jinja2.sandbox import SandboxedEnvironment

from judgebench_flows.core.records import CATEGORIES
from judgebench_flows.scoring.leaderboard import HTML_NAME, groups_of, model_label, who

TEMPLATE_NAME = "leaderboard.html.jinja2"
_WHISKER_W, _WHISKER_H = 120, 14


@lru_cache(maxsize=1)
def _template() -> Template:
    source = files("judgebench_flows.templates").joinpath(TEMPLATE_NAME).read_text(encoding="utf-8")
    return SandboxedEnvironment(autoescape=True, trim_blocks=True, lstrip_blocks=True).from_string(source)


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _x(fraction: float) -> str:
    return f"{2 + max(0.0, min(1.0, fraction)) * (_WHISKER_W - 4):.1f}"


def _cell(acc: Mapping[str, Any] | None) -> dict[str, Any]:
    """One accuracy cell: the figure, its interval as text, and the whisker's geometry."""
    acc = acc or {}
    value, low, high = _num(acc.get("accuracy")), _num(acc.get("ci_low")), _num(acc.get("ci_high"))
    total = acc.get("total_samples")
    interval = f"{low * 100:.1f}–{high * 100:.1f}%" if low is not None and high is not None else ""
    return {
        "text": "–" if value is None else f"{value * 100:.1f}",
        "title": (
            "no pairs"
            if value is None
            else f"{value * 100:.2f}% of {total} pairs" + (f", 95% CI {interval}" if interval else "")
        ),
        "point": None if value is None else _x(value),
        "low": None if low is None else _x(low),
        "high": None if high is None else _x(high),
    }


def _sort_keys() -> list[dict[str, str]]:
    keys = [{"id": "k0", "name": "overall"}]
    keys += [{"id": f"k{i + 1}", "name": category} for i, category in enumerate(CATEGORIES)]
    keys += [{"id": f"k{len(CATEGORIES) + 1}", "name": "judge"}, {"id": f"k{len(CATEGORIES) + 2}", "name": "pairs"}]
    return keys


def _sorted(members: Sequence[Mapping[str, Any]], key: str) -> list[Mapping[str, Any]]:
    def accuracy(entry: Mapping[str, Any]) -> float:
        acc = entry["overall_accuracy"] if key == "overall" else (entry["category_accuracy"].get(key) or {})
        value = _num(acc.get("accuracy"))
        return -1.0 if value is None else value

    if key == "judge":
        return sorted(members, key=lambda e: (str(e["judge_name"]).lower(), str(e["judge_model"]).lower()))
    if key == "pairs":
        return sorted(members, key=lambda e: -int(e.get("pairs") or 0))
    return sorted(members, key=lambda e: -accuracy(e))  # stable: ties keep the overall ranking


def _row(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "rank": entry.get("rank") or "",  # a run on a subset has none
        "tier": entry.get("tier") or "",  # none: not compared (a subset, other pairs)
        "judge": entry["judge_name"],
        "model": entry["judge_model"],
        "model_shown": model_label(entry),  # with its shutdown date when retired or retiring
        "ours": entry["origin"] == "run",
        "origin": who(entry),
        "origin_title": entry.get("file") or f"run {entry.get('run_id')} ({entry.get('status')}, {entry.get('date')})",
        "mode": entry.get("mode") or "",
        "pairs": entry.get("pairs", ""),
        "overall": _cell(entry.get("overall_accuracy")),
        "categories": [_cell((entry.get("category_accuracy") or {}).get(c)) for c in CATEGORIES],
    }


def build_context(board: Mapping[str, Any]) -> dict[str, Any]:
    keys = _sort_keys()
    groups = []
    for index, (name, members) in enumerate(groups_of(board["entries"]).items()):
        groups.append(
            {
                "id": f"g{index}",
                "name": name,
                "count": len(members),
                "ours": sum(1 for m in members if m["origin"] == "run"),
                "bodies": [{"key": k["id"], "rows": [_row(e) for e in _sorted(members, k["name"])]} for k in keys],
            }
        )
    dataset = board.get("dataset") or {}
    return {
        "repo_url": dataset.get("repo_url") or "",
        "commit": str(dataset.get("commit") or ""),
        "generated": str(board.get("generated") or "")[:16].replace("T", " "),
        "notes": board.get("notes") or [],
        "seed": board.get("seed"),
        "resamples": board.get("bootstrap_resamples"),
        "categories": list(CATEGORIES),
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


def render_leaderboard(board: Mapping[str, Any]) -> str:
    """The leaderboard JSON document (see `leaderboard.build_leaderboard`) as one HTML string."""
    return _template().render(**build_context(board))


def write_outputs(board: Mapping[str, Any], result_path: str | Path, output_dir: str | Path) -> dict[str, str]:
    """The JSON document and the HTML page; returns their paths."""
    from judgebench_flows.scoring.results import write_atomic, write_json

    json_path = write_json(result_path, dict(board))
    html_path = write_atomic(Path(output_dir) / HTML_NAME, render_leaderboard(board))
    return {"results": str(json_path), "html": str(html_path)}


__all__ = ["render_leaderboard", "build_context", "write_outputs"]

"""The view across benchmarks (`leaderboard --across`) as a terminal table, or CSV rows for scripts."""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import Console

from judgebench_flows.scoring.leaderboard_across import Across
from judgebench_flows.views.tables import Cell, _pct, _shown, _table, stdout_console

FIELDS = ("judge_name", "judge_model", "benchmark", "place", "of", "score", "origin", "run_ids")


def rows(view: Across) -> Iterable[dict[str, Cell]]:
    """One row per judge and benchmark it is placed on (scores as fractions)."""
    for judge in view.judges:
        for name, place in judge.places.items():
            yield {
                "judge_name": judge.judge_name,
                "judge_model": judge.judge_model,
                "benchmark": name,
                "place": place.place,
                "of": place.of,
                "score": place.score,
                "origin": place.origin,
                "run_ids": " ".join(place.run_ids),
            }


def print_across(view: Across, console: Console | None = None) -> None:
    """Each judge's place and score per benchmark, then each pair of benchmarks' rank agreement."""
    console = console or stdout_console()
    names = list(view.boards)
    for name, source in view.boards.items():
        console.print(
            f"{name}: {_shown(source.repo_url)} @ {source.commit[:12]}, {source.judges} judges placed by {source.headline}"
        )
    for note in view.notes:
        console.print(f"[dim]{_shown(note)}[/]")
    table = _table("each judge's place per benchmark (score in %)", console.width >= 120)
    table.add_column("judge", overflow="fold")
    table.add_column("model", overflow="fold")
    for name in names:
        table.add_column(name, justify="right", no_wrap=True)
    for judge in view.judges:
        cells = []
        for name in names:
            place = judge.places.get(name)
            cells.append(f"{place.place}/{place.of} ({_pct(place.score)})" if place else "-")
        ours = any(p.origin == "run" for p in judge.places.values())
        table.add_row(_shown(judge.judge_name), _shown(judge.judge_model), *cells, style="bold" if ours else None)
    console.print(table)
    for agreement in view.agreements:
        pair = " vs ".join(agreement.benchmarks)
        if agreement.tau is None:
            console.print(f"{pair}: {agreement.note}")
            continue
        interval = (
            f", 95% CI {agreement.ci_low:+.2f} to {agreement.ci_high:+.2f}"
            if agreement.ci_low is not None and agreement.ci_high is not None
            else ""
        )
        console.print(
            f"{pair}: Kendall's tau-b {agreement.tau:+.2f}{interval} over {agreement.shared_judges} shared judges "
            f"(bootstrap over pairs, seed {view.seed}, {view.bootstrap_resamples} resamples)"
        )


__all__ = ["FIELDS", "print_across", "rows"]

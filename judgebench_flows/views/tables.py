"""The listing commands' output: tables that fit the terminal they are printed in, or JSON/CSV for scripts.

A terminal narrower than a table's columns gets the same rows stacked (a row's names on lines of their
own) rather than cut with "…"; run ids are always printed whole, since `compare` and `report` take them.
Piped output without COLUMNS keeps the wide layout, so a script reading the text gets whole names.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING

from pydantic import BaseModel
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from judgebench_flows.core import benchmarks
from judgebench_flows.core.pricing import run_cost_text
from judgebench_flows.core.records import CATEGORIES
from judgebench_flows.core.text import printable
from judgebench_flows.scoring.formatting import percent
from judgebench_flows.scoring.leaderboard import Entry, Leaderboard
from judgebench_flows.scoring.leaderboard_text import groups_of, model_label, who
from judgebench_flows.scoring.noise import stored_noise_sd
from judgebench_flows.scoring.published import data_file_parts

if TYPE_CHECKING:
    from judgebench_flows.data.db import RunRow

FORMATS = ("table", "json", "csv")
PIPED_WIDTH = 200  # no terminal and no COLUMNS: wide enough for every column
WIDE_LEADERBOARD = 160  # every column side by side from this width on; stacked below it
WIDE_HISTORY = 150
SHORT_CATEGORY = {
    "mmlu-pro": "mmlu",
    "livebench-reasoning": "reason",
    "livebench-math": "math",
    "livecodebench": "code",
}

_pct = partial(percent, sign="")
Cell = str | float | None  # one value of a CSV or JSON row (ints are floats to the type checker)


def stdout_console() -> Console:
    """A console for standard output at the terminal's width (COLUMNS wins, as for any program)."""
    piped = not sys.stdout.isatty() and not os.environ.get("COLUMNS")
    return Console(width=PIPED_WIDTH if piped else None)


def _table(title: str | None, wide: bool) -> Table:
    """Wide: rich's boxed table. Narrow: no box, so the columns get the characters the borders would take."""
    return Table(title=title, box=box.HEAVY_HEAD if wide else box.SIMPLE_HEAD, pad_edge=wide, expand=False)


def _interval(low: float | None, high: float | None) -> str:
    return f"{_pct(low)}-{_pct(high)}" if low is not None and high is not None else ""


def print_leaderboard(board: Leaderboard, console: Console | None = None) -> None:
    """One table per response-model dataset (another benchmark's: per subset; runs on a subset in tables
    of their own, unranked); LLMBar's board then each judge's averages as its paper reports them."""
    console = console or stdout_console()
    llmbar = board.benchmark == "llmbar"
    source = f"{_shown(_short_source(board.dataset.repo_url))} @ {board.dataset.commit[:12]}"
    if llmbar:
        console.print(
            f"LLMBar {source}: accuracy in % (LLMBar's correct_average: each order's verdict scored apart), "
            "95% bootstrap interval over pairs; tier: not significantly worse than the tier's best row (exact "
            "sign test on the same pairs, Bonferroni-corrected)"
        )
    else:
        console.print(
            f"JudgeBench {source}: "
            "accuracy in % (JudgeBench's metric), 95% bootstrap interval; tier: not significantly worse than "
            "the tier's best row (exact McNemar test on the same pairs, Bonferroni-corrected)"
        )
    for note in board.notes:
        console.print(f"[dim]{_shown(note)}[/]")  # a note may quote a file of the cloned repository
    wide = console.width >= WIDE_LEADERBOARD
    categories = tuple(board.categories)
    for group, members in groups_of(board.entries).items():
        full = board.benchmark_pairs.get(group)
        title = f"{'subset' if llmbar else 'responses by'} {group}" + (f" ({full} pairs)" if full else "")
        console.print(_leaderboard_table(title, members, wide, console.width, categories))
    if board.averages is not None:
        console.print(_averages_table(board, wide))
    if not wide:
        console.print(
            (
                "[dim]columns in %: overall and per category (Natural, Adversarial); "
                if llmbar
                else "[dim]columns in %: overall and per category (mmlu-pro, livebench reasoning and math, livecodebench); "
            )
            + "--format csv or leaderboard.html for every column[/]"
        )


def _averages_table(board: Leaderboard, wide: bool) -> Table:
    """LLMBar's figures per judge as its paper reports them: Natural, each adversarial subset, and
    Adversarial, the mean of the four."""
    table = _table("averages as LLMBar's paper reports them (Adversarial: mean of its four subsets)", wide)
    table.add_column("judge / model / origin" if not wide else "judge", overflow="fold")
    if wide:
        table.add_column("model", overflow="fold")
        table.add_column("origin", overflow="fold")
    subsets = list(board.averages[0].subsets) if board.averages else []
    shown = [s.rsplit("/", 1)[-1] for s in subsets]
    for name in (*shown, "Natural avg" if not wide else "Natural", "Adversarial"):
        table.add_column(name, justify="right", no_wrap=True)
    for row in board.averages or []:
        names = (
            [_shown(row.judge_name), _shown(row.judge_model), row.origin]
            if wide
            else [f"{_shown(row.judge_name)} / {_shown(row.judge_model)} / {row.origin}"]
        )
        figures = [_pct(row.subsets.get(s)) for s in subsets]
        figures += [_pct(row.averages.get("Natural")), _pct(row.averages.get("Adversarial"))]
        table.add_row(*names, *figures, style="bold" if row.origin == "run" else None)
    return table


def _leaderboard_table(
    title: str, members: Sequence[Entry], wide: bool, width: int, all_categories: Sequence[str] = CATEGORIES
) -> Table:
    table = _table(title, wide)
    categories = [SHORT_CATEGORY.get(c, c) for c in all_categories] if wide or width >= 92 else []
    if wide:
        for name in ("#", "tier", "judge", "model", "origin", "pairs"):
            table.add_column(name, justify="right" if name in ("#", "tier", "pairs") else "left", overflow="fold")
    else:
        table.add_column("#", justify="right")
        table.add_column("tier", justify="right")
        table.add_column("judge / model / origin", overflow="fold", min_width=24)
    for name in ("overall", "95% CI", *categories):
        table.add_column(name, justify="right", no_wrap=True)
    for e in members:
        scores = [_pct(e.overall_accuracy.accuracy), _interval(e.overall_accuracy.ci_low, e.overall_accuracy.ci_high)]
        if categories:
            scores += [_pct(_accuracy_in(e, c)) for c in all_categories]
        rank = str(e.rank) if e.rank else "-"
        tier = str(e.tier) if e.tier else "-"
        judge, model, origin = _shown(e.judge_name), _shown(model_label(e)), _shown(who(e))
        names = (
            [judge, model, origin, str(e.pairs)]
            if wide
            else [f"{judge} / {model}" + ("" if who(e) == "published" else f"\n{origin}")]
        )
        table.add_row(rank, tier, *names, *scores, style="bold" if e.origin == "run" else None)
    return table


def _shown(text: object) -> str:
    """A name from a file or a database (a cloned repository's judge names, a run's model) as a table cell:
    control characters escaped (`printable`), and never read as Rich markup."""
    return escape(printable(text))


def _short_source(url: str) -> str:
    """A repository as a reader recognises it: the home directory as ~ (a long temporary path says nothing more)."""
    home = os.path.expanduser("~")
    return "~" + url[len(home) :] if home != "/" and url.startswith(home) else url


def short_path(path: str | os.PathLike[str]) -> str:
    """A path as short as it is unambiguous: relative to the working directory when under it, else from ~.
    An object-store URL as it is (without anything secret)."""
    if isinstance(path, str) and "://" in path:
        from judgebench_flows.data.storage import shown

        return shown(path)
    absolute = os.path.abspath(path)
    relative = os.path.relpath(absolute)
    return relative if not relative.startswith("..") else _short_source(absolute)


LEADERBOARD_FIELDS = (
    "group",
    "rank",
    "tier",
    "judge_name",
    "judge_model",
    "origin",
    "run_id",
    "date",
    "pairs",
    "benchmark_pairs",
    "accuracy",
    "ci_low",
    "ci_high",
    "noise_sd",
    *CATEGORIES,
    "cost",
    "shutdown_date",
    "drift",
)


def _accuracy_in(entry: Entry, category: str) -> float | None:
    acc = entry.category_accuracy.get(category)
    return acc.accuracy if acc else None


def leaderboard_fields(board: Leaderboard) -> tuple[str, ...]:
    """The CSV's columns: LEADERBOARD_FIELDS with the board's own categories in JudgeBench's place."""
    if list(board.categories) == list(CATEGORIES):
        return LEADERBOARD_FIELDS
    start = LEADERBOARD_FIELDS.index(CATEGORIES[0])
    return (*LEADERBOARD_FIELDS[:start], *board.categories, *LEADERBOARD_FIELDS[start + len(CATEGORIES) :])


def leaderboard_rows(board: Leaderboard) -> Iterable[dict[str, Cell]]:
    """One flat row per entry, accuracies as fractions (the CSV's rows, keyed by `leaderboard_fields`)."""
    for e in board.entries:
        overall = e.overall_accuracy
        yield {
            "group": e.group,
            "rank": e.rank,
            "tier": e.tier,
            "judge_name": e.judge_name,
            "judge_model": e.judge_model,
            "origin": e.origin,
            "run_id": e.run_id,
            "date": e.date,
            "pairs": e.pairs,
            "benchmark_pairs": e.benchmark_pairs,
            "accuracy": overall.accuracy,
            "ci_low": overall.ci_low,
            "ci_high": overall.ci_high,
            "noise_sd": e.noise_sd,
            **{c: _accuracy_in(e, c) for c in board.categories},
            "cost": e.cost,
            "shutdown_date": e.retirement.shutdown_date if e.retirement else None,
            "drift": e.drift,
        }


def to_csv(fields: Sequence[str], rows: Iterable[Mapping[str, Cell]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(fields), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if row.get(k) is None else _csv_cell(row.get(k)) for k in fields})
    return out.getvalue()


def _csv_cell(value: Cell) -> Cell:
    """A text cell with its control characters escaped: a CSV is read on terminals too (numbers as they are)."""
    return printable(value) if isinstance(value, str) else value


def to_json(value: object) -> str:
    """A model (by its fields, in their order) or plain data as indented JSON for scripts."""
    data = value.model_dump() if isinstance(value, BaseModel) else value
    return json.dumps(data, indent=2, default=str)


HISTORY_FIELDS = (
    "run_id",
    "started",
    "judge_type",
    "model",
    "data_file",
    "commit",
    "status",
    "n_pairs",
    "overall_accuracy",
    "ci_low",
    "ci_high",
    "cost_usd",
    "priced_as",
    "order_consistency",
    "first_position_rate",
    "served_as",
    "drift",
)


def history_rows(runs: Iterable[RunRow]) -> list[dict[str, Cell]]:
    """Each run's HISTORY_FIELDS, and `noise_sd`: its judge's run-to-run SD (None: not measured)."""
    return [
        {
            **{
                field: getattr(run, field).isoformat() if field == "started" else getattr(run, field)
                for field in HISTORY_FIELDS
            },
            "noise_sd": noise_sd(run),
        }
        for run in runs
    ]


def noise_sd(run: RunRow) -> float | None:
    """The run's judge noise as its results.json measured it (`noise.run_to_run_sd`), else None."""
    return stored_noise_sd(getattr(run, "results_json", None))


def _accuracy_cell(run: RunRow) -> str:
    """The accuracy, and the judge's run-to-run SD beside it when measured ("65.7% ±2.1")."""
    sd = noise_sd(run)
    return _pct(run.overall_accuracy) + (f" ±{sd * 100:.1f}" if sd is not None else "")


def _data_label(data_file: str | None, config_json: str | None = None) -> str:
    """A JudgeBench data file by its response model (the part that differs), another benchmark's subset
    with its benchmark's name (`LLMBar Adversarial/GPTOut`), any other by its name."""
    dataset, response_model = data_file_parts(data_file)
    if response_model and dataset == "judgebench":
        return f"{response_model} pairs"
    benchmark = benchmarks.of_stored_config(config_json)
    return data_file or "" if benchmark.name == benchmarks.DEFAULT else f"{benchmark.title} {data_file or ''}".strip()


def _bias(run: RunRow) -> str:
    """Position bias in a stacked history row: order consistency and first-position rate ("" before they were kept)."""
    consistent, first = getattr(run, "order_consistency", None), getattr(run, "first_position_rate", None)
    if consistent is None and first is None:
        return ""
    return f"consistent {_pct(consistent)}\n1st pos {_pct(first)}"


def _served(run: RunRow) -> str:
    """What the endpoint said about the model that answered, and, when that changed against the run's
    baseline, what changed ("" for runs without it)."""
    served, drift = getattr(run, "served_as", None) or "", getattr(run, "drift", None)
    return _shown(served) + (f"\nCHANGED: {_shown(drift)}" if drift else "")


def print_history(runs: Sequence[RunRow], console: Console | None = None) -> None:
    """Whole run ids, in a table when it fits, else one stacked block per run."""
    console = console or stdout_console()
    wide = console.width >= WIDE_HISTORY
    table = _table("JudgeBench runs", wide)
    table.show_lines = not wide  # stacked rows need a rule between them
    if wide:
        for column in ("run", "started (UTC)", "judge", "model", "data", "commit", "status", "accuracy", "95% CI"):
            table.add_column(column, no_wrap=column == "run", overflow="fold")
        table.add_column("pairs", justify="right")
        table.add_column("cost", justify="right", no_wrap=True)
        table.add_column("consistent", justify="right")
        table.add_column("1st pos", justify="right")
        table.add_column("endpoint said", overflow="fold")
    else:
        table.add_column("run / judge / model / data", overflow="fold", min_width=32)
        table.add_column("started (UTC)", overflow="fold", max_width=10)
        table.add_column("status", overflow="fold")
        table.add_column("accuracy", justify="right", overflow="fold")
    for run in runs:
        ci = _interval(run.ci_low, run.ci_high)
        started = run.started.strftime("%Y-%m-%d %H:%M")
        if wide:
            table.add_row(
                run.run_id,
                started,
                _shown(run.judge_type),
                _shown(run.model),
                _shown(_data_label(run.data_file, run.config_json)),
                _shown((run.commit or "")[:8]),
                run.status,
                _accuracy_cell(run),
                ci,
                str(run.n_pairs or ""),
                run_cost_text(run.cost_usd, run.priced_as),
                _pct(getattr(run, "order_consistency", None)),
                _pct(getattr(run, "first_position_rate", None)),
                _served(run),
            )
        else:
            pairs = f"{run.n_pairs} pairs" if run.n_pairs else ""
            cost = run_cost_text(run.cost_usd, run.priced_as)
            served = _served(run)
            table.add_row(
                f"{run.run_id}\n{_shown(run.judge_type)} / {_shown(run.model)}\n{_shown(_data_label(run.data_file, run.config_json))}"
                + (f"\nendpoint said: {served}" if served else ""),
                started,
                run.status + (f"\ncommit\n{_shown(run.commit[:8])}" if run.commit else ""),
                "\n".join(part for part in (_accuracy_cell(run), ci, pairs, cost, _bias(run)) if part),
            )
    console.print(table)


__all__ = [
    "FORMATS",
    "HISTORY_FIELDS",
    "LEADERBOARD_FIELDS",
    "history_rows",
    "leaderboard_fields",
    "leaderboard_rows",
    "print_history",
    "print_leaderboard",
    "short_path",
    "stdout_console",
    "to_csv",
    "to_json",
]

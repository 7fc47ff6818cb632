"""What the CLI shows a person: a progress bar while judging and rich tables for results and history."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from judgebench_flows.config import RunConfig
from judgebench_flows.prefect_server import PrefectStart

err = Console(stderr=True)
out = Console()


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}%"


def run_with_progress(config: RunConfig, prefect: PrefectStart, show_progress: bool = True,
                      with_prefect: Callable[[], object] = lambda: None) -> int:
    from judgebench_flows.head_start import judge_with_head_start
    from judgebench_flows.judging import add_progress_hook, add_total_hook, clear_progress_hooks

    err.print(f"[bold]judgebench[/] {config.judge_template or config.judge_type} / {config.model}; "
              f"dataset {config.data_path or config.repo_url} @ {config.ref or 'default branch'}")
    progress = Progress(TextColumn("judging"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
                        console=err, disable=not show_progress)
    with progress:
        bar = progress.add_task("judging", total=None)
        add_total_hook(lambda n: progress.update(bar, total=n))
        add_progress_hook(lambda n: progress.advance(bar, n))
        try:
            results = asyncio.run(judge_with_head_start(config, prefect, with_prefect))
        finally:
            clear_progress_hooks()
    print_results(results)
    regression = results.get("regression") or {}
    return 1 if regression.get("regressed") else 0


def print_results(results: dict[str, Any]) -> None:
    table = Table(title=f"JudgeBench: {results['judge_type']} / {results['model']}")
    for column in ("slice", "accuracy", "95% CI", "correct", "valid", "total"):
        table.add_column(column, justify="left" if column == "slice" else "right")
    rows = [("overall", results["overall_accuracy"])] + [(c, results["category_accuracy"][c]) for c in results["category_accuracy"]]
    for name, acc in rows:
        ci = f"{_pct(acc.get('ci_low'))} - {_pct(acc.get('ci_high'))}" if acc.get("ci_low") is not None else ""
        table.add_row(name, _pct(acc["accuracy"]), ci, str(acc["correct_count"]), str(acc["valid_samples"]), str(acc["total_samples"]))
    out.print(table)
    dataset, invalid, usage = results["dataset"], results["invalid"], results["usage"]
    where = f"commit {str(dataset['commit'])[:12]}" if dataset.get("commit") else "local file"
    out.print(f"dataset {dataset.get('data_file')} ({where}): {dataset.get('n_pairs')} pairs, "
              f"{dataset.get('skipped_rows', 0)} rows skipped")
    out.print(f"consistency {_pct(results['consistency'].get('consistency'))}; invalid verdicts {invalid['invalid_judgments']}, "
              f"failed calls {invalid['failed_judgments']}; calls {usage['calls']} ({usage['cached_calls']} from cache), "
              f"tokens {usage['prompt_tokens']} in / {usage['completion_tokens']} out")
    if results.get("regression"):
        style = "bold red" if results["regression"].get("regressed") else "green"
        out.print(f"[{style}]{results['regression']['message']}[/]")
    for name, path in (results.get("outputs") or {}).items():
        out.print(f"{name}: {path}")


def print_history(runs: list) -> None:
    table = Table(title="JudgeBench runs")
    for column in ("run", "started (UTC)", "judge", "model", "data", "commit", "status", "accuracy", "95% CI", "pairs"):
        table.add_column(column)
    for run in runs:
        ci = f"{_pct(run.ci_low)} - {_pct(run.ci_high)}" if run.ci_low is not None else ""
        table.add_row(run.run_id[:8], run.started.strftime("%Y-%m-%d %H:%M"), run.judge_type, run.model,
                      (run.data_file or "")[-40:], (run.commit or "")[:8], run.status, _pct(run.overall_accuracy), ci, str(run.n_pairs or ""))
    out.print(table)


def print_comparison(comparison: dict[str, Any]) -> None:
    a, b = comparison["run_a"], comparison["run_b"]
    table = Table(title=f"{a[:8]} -> {b[:8]}")
    for column in ("slice", "A", "B", "delta", "pairs"):
        table.add_column(column, justify="left" if column == "slice" else "right")
    for row in comparison["slices"]:
        delta = row["delta"]
        table.add_row(row["name"], _pct(row["a"]), _pct(row["b"]), "-" if delta is None else f"{100 * delta:+.2f}", str(row["n"]))
    out.print(table)
    test = comparison.get("bootstrap")
    if test:
        out.print(f"paired bootstrap over {test['n_pairs']} pairs: change {100 * test['delta']:+.2f} points, "
                  f"95% CI {100 * test['ci_low']:+.2f} to {100 * test['ci_high']:+.2f}" + (" [bold red](regression)[/]" if test["regressed"] else ""))
    flipped = comparison["flipped"]
    out.print(f"{len(flipped)} pairs changed verdict ({sum(1 for f in flipped if f['now_correct'])} fixed, "
              f"{sum(1 for f in flipped if not f['now_correct'])} broken)")
    if flipped:
        pairs = Table()
        for column in ("pair_id", "source", "label", "A verdicts", "B verdicts", "now"):
            pairs.add_column(column)
        for f in flipped[:200]:
            pairs.add_row(f["pair_id"], f["source"], f["label"], f["a"], f["b"], "correct" if f["now_correct"] else "wrong")
        out.print(pairs)


__all__ = ["run_with_progress", "print_results", "print_history", "print_comparison"]

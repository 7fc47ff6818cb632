"""What the CLI shows a person: a progress bar while judging and rich tables for results and history."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from judgebench_flows.core.config import RunConfig
from judgebench_flows.core.errors import RunFailed
from judgebench_flows.core.pricing import format_usd

if TYPE_CHECKING:
    from judgebench_flows.judging.estimate import Estimate
from judgebench_flows.scoring.formatting import percent as _pct

err = Console(stderr=True)
out = Console()


def run_with_progress(config: RunConfig, show_progress: bool = True) -> int:
    """The JudgeBench flow under a progress bar, then its results as tables; 1 when it found a regression."""
    from judgebench_flows.flows.judgebench_flow import judgebench_flow
    from judgebench_flows.judging.shards import add_progress_hook, add_total_hook, clear_progress_hooks

    err.print(
        f"[bold]judgebench[/] {config.judge_template or config.judge_type} / {config.model}; "
        f"dataset {config.data_path or config.repo_url} @ {config.ref or 'default branch'}"
    )
    progress = Progress(
        TextColumn("judging"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
        disable=not show_progress,
    )
    with progress:
        bar = progress.add_task("judging", total=None)
        counter = JudgmentCounter(lambda done: progress.update(bar, completed=done))
        add_total_hook(lambda n: progress.update(bar, total=n))
        add_progress_hook(counter.advance, counter.settle)
        try:
            results = asyncio.run(judgebench_flow(config))
        except RunFailed as exc:  # published but not a measurement: show what there is, then exit 4
            if exc.results:
                progress.stop()
                print_results(exc.results)
            raise
        finally:
            clear_progress_hooks()
    print_results(results)
    regression = results.get("regression") or {}
    return 1 if regression.get("regressed") else 0


class JudgmentCounter:
    """Judgments done out of judgments planned, each counted once: a retried shard does not count its
    judgments again, and a shard served whole from Prefect's cache (no judgment ticked) counts when the
    flow settles it. Memory: one number per shard."""

    def __init__(self, show: Callable[[int], None]):
        self._show = show
        self._per_shard: dict[int, int] = {}
        self._settled: set[int] = set()
        self.done = 0
        self._lock = threading.Lock()  # ticks come from the event loop, settles from a worker thread

    def advance(self, shard: int, judgments: int, planned: int) -> None:
        with self._lock:
            if shard in self._settled:
                return
            before = self._per_shard.get(shard, 0)
            after = min(planned, before + judgments)
            self._per_shard[shard] = after
            self.done += after - before
            done = self.done
        self._show(done)

    def settle(self, shard: int, judgments: int) -> None:
        with self._lock:
            self._settled.add(shard)
            self.done += judgments - self._per_shard.get(shard, 0)
            self._per_shard[shard] = judgments
            done = self.done
        self._show(done)


def _problems(results: dict[str, Any]) -> str | None:
    """Failed and invalid judgments in words, with their top reasons (None when there are none)."""
    invalid, judgments = results["invalid"], results["usage"].get("judgments") or 0
    failed, unparsed = invalid["failed_judgments"], invalid["invalid_judgments"]
    if not failed and not unparsed:
        return None
    reasons = "; ".join(f"{reason} x{count}" for reason, count in list((invalid.get("reasons") or {}).items())[:3])
    return f"{failed} failed and {unparsed} invalid of {judgments} judgments; top reasons: {reasons}"


def print_results(results: dict[str, Any]) -> None:
    table = Table(title=f"JudgeBench: {results['judge_type']} / {results['model']}")
    for column in ("slice", "accuracy", "95% CI", "correct", "valid", "total"):
        table.add_column(column, justify="left" if column == "slice" else "right")
    rows = [("overall", results["overall_accuracy"])] + [
        (c, results["category_accuracy"][c]) for c in results["category_accuracy"]
    ]
    for name, acc in rows:
        # An accuracy over pairs none of which got a valid verdict measures the failures, not the judge.
        measured = bool(acc.get("valid_samples")) or not acc.get("total_samples")
        ci = (
            f"{_pct(acc.get('ci_low'))} - {_pct(acc.get('ci_high'))}"
            if measured and acc.get("ci_low") is not None
            else ""
        )
        shown = _pct(acc["accuracy"]) if measured else "n/a"
        table.add_row(name, shown, ci, str(acc["correct_count"]), str(acc["valid_samples"]), str(acc["total_samples"]))
    out.print(table)
    problems = _problems(results)
    if problems:
        out.print(f"[bold yellow]{problems}[/]")
    failure = (results.get("run") or {}).get("failure")
    if failure:
        out.print(f"[bold red]run failed: {failure}[/]")
    adjusted = ((results.get("run") or {}).get("requests") or {}).get("adjustments") or []
    for change in adjusted:
        out.print(
            f"request adjusted for {results['model']}: {change['param']} {change['action']} (the endpoint said: {change['endpoint_said'][:120]})"
        )
    dataset, invalid, usage = results["dataset"], results["invalid"], results["usage"]
    where = f"commit {str(dataset['commit'])[:12]}" if dataset.get("commit") else "local file"
    out.print(
        f"dataset {dataset.get('data_file')} ({where}): {dataset.get('n_pairs')} pairs, "
        f"{dataset.get('skipped_rows', 0)} rows skipped"
    )
    out.print(
        f"consistency {_pct(results['consistency'].get('consistency'))}; invalid verdicts {invalid['invalid_judgments']}, "
        f"failed calls {invalid['failed_judgments']}; calls {usage['calls']} ({usage['cached_calls']} from cache), "
        f"paid {usage.get('paid_calls')}"
        + (f" ({usage['attempts']} requests, {usage['errors']} errors)" if usage.get("attempts") is not None else "")
        + ", "
        f"tokens {usage['prompt_tokens']} in / {usage['completion_tokens']} out, cost {cost_text(usage)}"
    )
    if results.get("regression"):
        style = "bold red" if results["regression"].get("regressed") else "green"
        out.print(f"[{style}]{results['regression']['message']}[/]")
    from judgebench_flows.cli.tables import short_path

    for name, path in (results.get("outputs") or {}).items():
        out.print(f"{name}: {short_path(path)}")


def print_external_summary(summary: dict[str, Any]) -> None:
    """An external-judge run in a few lines (the whole summary is the JSON at `result_path`)."""
    from judgebench_flows.cli.tables import short_path

    mean = summary.get("mean_score")
    out.print(
        f"external judge {summary['judge_function']} ({short_path(summary['judge_path'])}) on {short_path(summary['data_path'])}"
    )
    out.print(
        f"rows {summary['total']}: scored {summary['scored']}, NA {summary['na']}, errors {summary['errors']}; "
        f"mean score {'n/a' if mean is None else f'{mean:.4f}'}"
    )
    for example in (summary.get("error_examples") or [])[:3]:
        out.print(f"error in row {example.get('qid')}: {example.get('error')}")
    out.print(f"summary: {short_path(summary['result_path'])}")
    for path in summary.get("output_files") or []:
        out.print(f"scores: {short_path(path)}")


def print_comparison(comparison: dict[str, Any]) -> None:
    """Whole run ids (the title stacks them when the terminal is narrow); pair ids fold, never cut."""
    a, b = comparison["run_a"], comparison["run_b"]
    out.print(f"A: run {a}\nB: run {b}")
    table = Table()
    for column in ("slice", "A", "B", "delta", "pairs"):
        table.add_column(column, justify="left" if column == "slice" else "right", overflow="fold")
    for row in comparison["slices"]:
        delta = row["delta"]
        table.add_row(
            row["name"], _pct(row["a"]), _pct(row["b"]), "-" if delta is None else f"{100 * delta:+.2f}", str(row["n"])
        )
    out.print(table)
    test = comparison.get("bootstrap")
    if test:
        out.print(
            f"paired bootstrap over {test['n_pairs']} pairs: change {100 * test['delta']:+.2f} points, "
            f"95% CI {100 * test['ci_low']:+.2f} to {100 * test['ci_high']:+.2f}"
            + (" [bold red](regression)[/]" if test["regressed"] else "")
        )
    cost = comparison.get("cost") or {}
    if cost.get("a") or cost.get("b"):
        out.print(f"cost: A {cost.get('a') or 'not recorded'}, B {cost.get('b') or 'not recorded'}")
    flipped = comparison["flipped"]
    out.print(
        f"{len(flipped)} pairs changed verdict ({sum(1 for f in flipped if f['now_correct'])} fixed, "
        f"{sum(1 for f in flipped if not f['now_correct'])} broken)"
    )
    if flipped:
        out.print(_flipped_table(flipped[:200], narrow=out.width < 110))


def cost_text(usage: dict[str, Any]) -> str:
    """results.json's cost for people: dollars and the price entry's date, or "unpriced"."""
    if "cost_usd" not in usage:
        return "not recorded"
    prices = usage.get("prices") or {}
    when = (
        f" (prices of {prices['read_on']}{', batch' if prices.get('batch') else ''})" if prices.get("read_on") else ""
    )
    return format_usd(usage["cost_usd"]) + (when if usage["cost_usd"] is not None else "")


def print_estimate(estimate: Estimate) -> None:
    """`judgebench estimate`: the worst case, and the expected cost when an earlier run gives one."""
    out.print(f"{estimate.model}: {estimate.describe()}")
    price = estimate.price
    if price is None:
        out.print("cost: unpriced (no price for this model: give one with --prices FILE)")
        return
    batch = ", batch" if price.batch else ""
    out.print(
        f"prices: ${price.input_per_mtok:g} / ${price.output_per_mtok:g} per million tokens in / out{batch} "
        f"({price.table}, read {price.read_on or '?'})"
    )
    worst = estimate.worst_usd
    out.print(f"worst case: {format_usd(worst) if worst is not None else 'unbounded (no output-token cap)'}")
    if estimate.expected_usd is not None:
        out.print(f"expected: {format_usd(estimate.expected_usd)} (from run {str(estimate.expected_from)[:8]})")
    else:
        out.print("expected: no finished run of this configuration yet")


def _flipped_table(flipped: list[dict[str, Any]], narrow: bool) -> Table:
    """The pairs whose verdict changed; on a narrow terminal the pair id and its source share a column, so
    the id stays on one line."""
    table = Table(box=box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD, pad_edge=not narrow)
    columns = ["pair / source"] if narrow else ["pair_id", "source"]
    verdicts = ("A", "B") if narrow else ("A verdicts", "B verdicts")
    for column in (*columns, "label", *verdicts, "now"):
        table.add_column(column, overflow="fold", min_width=36 if column == "pair / source" else None)
    for f in flipped:
        where = [f"{f['pair_id']}\n{f['source']}"] if narrow else [f["pair_id"], f["source"]]
        table.add_row(*where, f["label"], f["a"], f["b"], "correct" if f["now_correct"] else "wrong")
    return table


__all__ = ["run_with_progress", "print_results", "print_comparison", "print_external_summary", "print_estimate"]

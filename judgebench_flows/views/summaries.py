"""What a person reads after a command: a run's results, a comparison, an estimate, an external run.

Rich renders them at the terminal's width; the listing commands' tables are in views/tables.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from judgebench_flows.core import benchmarks
from judgebench_flows.core.pricing import format_usd
from judgebench_flows.core.text import printable
from judgebench_flows.scoring.compare import verdict_in_words
from judgebench_flows.scoring.formatting import percent as _pct
from judgebench_flows.scoring.result_types import Comparison, Consistency, FlippedPair, SliceAccuracy, Usage
from judgebench_flows.scoring.run_results import RunResults

if TYPE_CHECKING:
    from judgebench_flows.judging.estimate import Estimate
    from judgebench_flows.judging.rescore import DecisionChange, Rescore

err = Console(stderr=True)
out = Console()


def _problems(results: RunResults) -> str | None:
    """Failed and invalid judgments in words, with their top reasons (None when there are none)."""
    invalid, judgments = results.invalid, (results.usage.judgments if results.usage else 0) or 0
    failed, unparsed = invalid.failed_judgments, invalid.invalid_judgments
    if not failed and not unparsed:
        return None
    reasons = "; ".join(f"{reason} x{count}" for reason, count in list(invalid.reasons.items())[:3])
    return f"{failed} failed and {unparsed} invalid of {judgments} judgments; top reasons: {reasons}"


def official_line(official: dict[str, str | float]) -> str:
    """A benchmark's own statistics in one line, its keys and values as its code writes them."""
    shown = (f"{key} {value:.4f}" if isinstance(value, float) else f"{key} {value}" for key, value in official.items())
    return "official: " + "; ".join(shown)


def print_results(results: RunResults) -> None:
    # names from the command line or a stored run: their control characters escaped, never markup
    epochs = f", mean of {results.epoch_count} epochs" if results.epoch_count > 1 else ""
    title = benchmarks.get(results.benchmark).title if results.benchmark in benchmarks.BENCHMARKS else "JudgeBench"
    table = Table(
        title=f"{title}: {escape(printable(results.judge_type))} / {escape(printable(results.model))}{epochs}"
    )
    # with epochs, "correct" counts pair-epochs: correct / (total x epochs) is the accuracy; under LLMBar's
    # rule it counts right verdicts (each order scored apart)
    units = "verdicts" if results.official is not None else ""
    correct = "correct" if results.epoch_count == 1 else f"correct of {results.epoch_count}x"
    correct = f"{correct} {units}".strip()
    for column in ("slice", "accuracy", "95% CI", correct, "valid", "total"):
        table.add_column(column, justify="left" if column == "slice" else "right")
    rows = [("overall", results.overall_accuracy), *results.category_accuracy.items()]
    for name, acc in rows:
        # An accuracy over pairs none of which got a valid verdict measures the failures, not the judge.
        measured = bool(acc.valid_samples) or not acc.total_samples
        ci = f"{_pct(acc.ci_low)} - {_pct(acc.ci_high)}" if measured and acc.ci_low is not None else ""
        shown = _pct(acc.accuracy) if measured else "n/a"
        table.add_row(name, shown, ci, str(acc.correct_count), str(acc.valid_samples), str(acc.total_samples))
    out.print(table)
    if results.scoring:
        out.print(printable(f"scored by {results.scoring}"), markup=False)
    if results.official:
        out.print(printable(official_line(results.official)), markup=False)
    problems = _problems(results)
    if problems:
        out.print(f"[bold yellow]{escape(printable(problems))}[/]")  # reasons quote the endpoint's words
    run = results.run
    if run.failure:
        out.print(f"[bold red]run failed: {escape(printable(run.failure))}[/]")
    for change in run.requests.adjustments() if run.requests else []:
        # whole, wrapped at words by the console; the server's words are not markup
        said = f" (the endpoint said: {change.endpoint_said})" if change.endpoint_said else ""  # none: our rule's
        out.print(
            printable(f"request adjusted for {results.model}: {change.param} {change.action}{said}"), markup=False
        )
    dataset, invalid, usage = results.dataset, results.invalid, results.usage or Usage()
    consistency = results.consistency or Consistency()
    where = f"commit {str(dataset.commit)[:12]}" if dataset.commit else "local file"
    out.print(
        f"dataset {escape(printable(dataset.data_file))} ({where}): {dataset.n_pairs} pairs, "
        f"{dataset.skipped_rows} rows skipped"
    )
    attempts = usage.extra("attempts")
    out.print(
        f"consistency {_pct(consistency.consistency)}, "
        f"first-position rate {_pct(consistency.first_position_rate)}; invalid verdicts {invalid.invalid_judgments}, "
        f"failed calls {invalid.failed_judgments}; calls {usage.calls} ({usage.cached_calls} from cache), "
        f"paid {usage.paid_calls}"
        + (f" ({attempts} requests, {usage.extra('errors')} errors)" if attempts is not None else "")
        + ", "
        f"tokens {usage.prompt_tokens} in / {usage.completion_tokens} out, cost {cost_text(usage)}"
    )
    if run.cache:
        out.print(run.cache.line(), markup=False)
    if results.epoch_accuracy:
        out.print("epochs: " + ", ".join(_pct(a) for a in results.epoch_accuracy))
    if results.noise:
        noise = results.noise
        interval = (
            f"; accuracy {_pct(noise.ci_low)} - {_pct(noise.ci_high)} with it" if noise.ci_low is not None else ""
        )
        out.print(printable(noise.message + interval), markup=False)
    if results.regression:
        style = "bold red" if results.regression.regressed else "green"
        out.print(f"[{style}]{results.regression.message}[/]")
    from judgebench_flows.views.tables import short_path

    paths = {name: short_path(path) for name, path in (results.outputs or {}).items()}
    for name, path in paths.items():
        out.print(printable(f"{name}: {_fitting_path(name, path, paths.values())}"), markup=False, soft_wrap=True)


def _fitting_path(name: str, path: str, every: Iterable[str]) -> str:
    """`path`, or when `name: path` is wider than the terminal, its folder and a pattern naming only it
    (`results/<run id>/*.jsonl`): a data file's long name would be cut mid-word by the terminal."""
    folder, _, file = path.rpartition("/")
    suffix = "." + file.rpartition(".")[2] if "." in file else ""
    alike = [other for other in every if other.startswith(folder + "/") and other.endswith(suffix)]
    if len(name) + 2 + len(path) <= out.width or not folder or not suffix or len(alike) > 1:
        return path
    return f"{folder}/*{suffix}"


def print_external_summary(summary: dict[str, Any]) -> None:
    """An external-judge run in a few lines (the whole summary is the JSON at `result_path`)."""
    from judgebench_flows.views.tables import short_path

    mean = summary.get("mean_score")
    out.print(  # names and paths from the user's files: control characters escaped, never markup
        printable(
            f"external judge {summary['judge_function']} ({short_path(summary['judge_path'])}) "
            f"on {short_path(summary['data_path'])}"
        ),
        markup=False,
    )
    out.print(
        f"rows {summary['total']}: scored {summary['scored']}, NA {summary['na']}, errors {summary['errors']}; "
        f"mean score {'n/a' if mean is None else f'{mean:.4f}'}"
    )
    for example in (summary.get("error_examples") or [])[:3]:
        out.print(printable(f"error in row {example.get('qid')}: {example.get('error')}"), markup=False)
    out.print(printable(f"summary: {short_path(summary['result_path'])}"), markup=False)
    for path in summary.get("output_files") or []:
        out.print(printable(f"scores: {short_path(path)}"), markup=False)


def print_comparison(comparison: Comparison) -> None:
    """Whole run ids (the title stacks them when the terminal is narrow); pair ids fold, never cut."""
    out.print(f"A: run {comparison.run_a}\nB: run {comparison.run_b}")
    narrow = out.width < 100  # no borders: the characters go to the columns
    table = Table(box=box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD, pad_edge=not narrow, collapse_padding=narrow)
    rows = [
        (
            row.name,
            _pct(row.a, digits=1, sign=""),  # in % (the note below): 80 columns hold the interval whole
            _pct(row.b, digits=1, sign=""),
            "-" if row.delta is None else f"{100 * row.delta:+.2f}",
            f"{100 * row.ci_low:+.1f}..{100 * row.ci_high:+.1f}"  # one unbreakable token: "to" wrapped at 80
            if row.ci_low is not None and row.ci_high is not None
            else "",
            _p_text(row.p_adjusted),
            row.verdict,
            str(row.n),
        )
        for row in comparison.slices
    ]
    longest = max((len(row[0]) for row in rows), default=5)
    table.add_column("slice", no_wrap=True, min_width=longest)  # a category name whole, never cut mid-word
    for column in ("A", "B", "delta", "95% CI", "p", "verdict", "n"):
        # "verdict" as wide as its header: a narrower column cut it ("verdic" / "t")
        table.add_column(
            column,
            justify="left" if column == "verdict" else "right",
            overflow="fold",
            min_width=len(column) if column == "verdict" else None,
            no_wrap=column != "verdict",  # a figure whole on its line ("100.00" over "%" misread)
        )
    for cells in rows:
        table.add_row(*cells)
    out.print(table)
    out.print(
        "[dim]A, B: accuracy in %; delta and its 95% paired bootstrap interval in points; p: exact McNemar, "
        "Holm-adjusted over the categories; n: pairs[/]"
    )
    test = comparison.bootstrap
    if test:
        out.print(
            f"paired bootstrap over {test.n_pairs} pairs: change {100 * test.delta:+.2f} points, "
            f"95% CI {100 * test.ci_low:+.2f} to {100 * test.ci_high:+.2f}"
            + (" [bold red](regression)[/]" if test.regressed else "")
        )
    mcnemar = comparison.mcnemar
    if mcnemar:
        out.print(
            f"exact McNemar: {mcnemar.discordant_a_only} pairs right only in A, "
            f"{mcnemar.discordant_b_only} right only in B, p = {_p_text(mcnemar.p_value)} "
            f"({comparison.slices[0].verdict})"
        )
    for title, changes in (("endpoint said", comparison.served_changes), ("sent", comparison.sent_changes)):
        if changes:
            out.print(printable(f"{title} differently (A -> B): " + "; ".join(c.text() for c in changes)), markup=False)
    if comparison.invalid_a_only or comparison.invalid_b_only:
        out.print(_invalid_line(comparison))
    if comparison.noise_a is not None or comparison.noise_b is not None:
        sd = {
            run: f"±{v * 100:.1f} points" if v is not None else "not measured"
            for run, v in (("A", comparison.noise_a), ("B", comparison.noise_b))
        }
        out.print(f"judge noise, run to run: A {sd['A']}, B {sd['B']}")
    cost = comparison.cost
    if cost.a or cost.b:
        out.print(f"cost: A {cost.a or 'not recorded'}, B {cost.b or 'not recorded'}")
    flipped = comparison.flipped
    out.print(
        f"{len(flipped)} pairs changed verdict ({sum(1 for f in flipped if f.now_correct)} fixed, "
        f"{sum(1 for f in flipped if not f.now_correct)} broken)"
    )
    if flipped:
        out.print(_flipped_table(flipped[:200], narrow=out.width < 110))


def _invalid_line(comparison: Comparison) -> str:
    """Pairs with no valid verdict in one run only (counted as wrong above), beside the exact test on the
    pairs both runs judged validly: a change made of invalid verdicts is shown as such."""
    test = comparison.valid_mcnemar
    on_valid = (
        f"on the {comparison.valid_pairs} pairs both judged validly: {test.discordant_a_only} right only in A, "
        f"{test.discordant_b_only} only in B, p = {_p_text(test.p_value)} "
        f"({verdict_in_words(test.discordant_b_only - test.discordant_a_only, test.p_value)})"
        if test
        else "no pair was judged validly by both"
    )
    return (
        f"[yellow]verdicts invalid in one run only: {comparison.invalid_a_only} pairs in A, "
        f"{comparison.invalid_b_only} in B (counted as wrong above)[/]; {on_valid}"
    )


def _p_text(p: float | None) -> str:
    """A p-value for people: 3 significant digits, "<0.0001" below that, blank when untested."""
    if p is None:
        return ""
    return "<0.0001" if p < 0.0001 else f"{p:.3g}"


def cost_text(usage: Usage) -> str:
    """results.json's cost for people: dollars and the price entry's date, or "unpriced"."""
    if not usage.priced:
        return "not recorded"
    prices = usage.price
    when = f" (prices of {prices.read_on}{', batch' if prices.batch else ''})" if prices.read_on else ""
    return format_usd(usage.dollars) + (when if usage.dollars is not None else "")


def print_estimate(estimate: Estimate) -> None:
    """`judgebench estimate`: the worst case, and the expected cost when an earlier run gives one."""
    out.print(printable(f"{estimate.model}: {estimate.describe()}"), markup=False)
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


def print_plan(estimate: Estimate) -> None:
    """What the regression check of such a run can see, and the epochs a wanted drop needs."""
    plan = estimate.plan
    if plan is None:
        return
    noise = (
        f"the judge's noise as {plan.noise_from} measured it"
        if plan.noise_from != "assumed"
        else "an assumed judge noise (within-pair variance 0.10; a finished run measures it)"
    )
    out.print(
        printable(
            f"detectable: with {estimate.epochs} epoch{'s' * (estimate.epochs > 1)} on {estimate.pairs} pairs, a drop of "
            f"{plan.detectable * 100:.1f} points is caught 80% of the time against {plan.baseline_runs} recent runs "
            f"at a false-alarm rate of {plan.alpha:.2g} per run ({noise})"
        ),
        markup=False,
    )
    if plan.detect is not None:
        needed = (
            f"--epochs {plan.epochs_needed}"
            if plan.epochs_needed is not None
            else "more than 100 epochs (use more pairs)"
        )
        out.print(f"to detect {plan.detect:g} points: {needed}")
        nights = (
            f"within {plan.nights_needed} night{'s' * (plan.nights_needed > 1)}"
            if plan.nights_needed is not None
            else "not within 60 nights"
        )
        out.print(
            f"a persistent drop of {plan.detect:g} points at {estimate.epochs} epoch{'s' * (estimate.epochs > 1)} a "
            f"night is caught 90% of the time {nights} (the sequential test against the frozen reference)"
        )


def _pair_table(
    columns: list[str], rows: Iterable[tuple[str, str, list[str]]], narrow: bool, title: str | None = None
) -> Table:
    """Rows about pairs (pair id, source, then `columns`); on a narrow terminal the pair id and its
    source share a column, so the id stays on one line."""
    table = Table(title=title, box=box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD, pad_edge=not narrow)
    for column in (*(["pair / source"] if narrow else ["pair_id", "source"]), *columns):
        table.add_column(column, overflow="fold", min_width=36 if column == "pair / source" else None)
    for pair_id, source, cells in rows:  # read from a file: control characters escaped, never markup
        pair_id, source, cells = _cell(pair_id), _cell(source), [_cell(c) for c in cells]
        table.add_row(*([f"{pair_id}\n{source}"] if narrow else [pair_id, source]), *cells)
    return table


def _cell(text: object) -> str:
    return escape(printable(text))


def _flipped_table(flipped: list[FlippedPair], narrow: bool) -> Table:
    """The pairs whose verdict changed."""
    verdicts = ["A", "B"] if narrow else ["A verdicts", "B verdicts"]
    rows = ((f.pair_id, f.source, [f.label, f.a, f.b, "correct" if f.now_correct else "wrong"]) for f in flipped)
    return _pair_table(["label", *verdicts, "now"], rows, narrow)


def print_rescore(result: Rescore, limit: int = 50) -> None:
    """`judgebench rescore`: how many recorded decisions our parser reads differently, and what that does to
    the metric. On a narrow terminal a changed decision's pair id and source share one column."""
    from judgebench_flows.core.records import CATEGORIES
    from judgebench_flows.views.tables import short_path, stdout_console

    console = stdout_console()
    console.print(
        f"{_cell(short_path(result.file))}: {result.pairs} pairs, {result.judgments} judgments; re-parsed "
        f"{result.reparsed} with our {result.judge_type} parser ({result.failed} failed calls kept, "
        f"{result.no_text} without text)"
    )
    if result.judge_name_in_file and result.judge_type not in result.judge_name_in_file:
        console.print(f"[yellow]note: the file was judged by {_cell(', '.join(result.judge_name_in_file))}[/]")
    console.print(
        f"[bold]{result.changed} decisions differ from the recorded ones, in {len(result.changed_pairs)} pairs[/]"
    )
    table = Table(title="accuracy: recorded decisions vs re-parsed")
    for column in ("slice", "recorded", "re-parsed", "pairs"):
        table.add_column(column, justify="left" if column == "slice" else "right")
    recorded, rescored = result.recorded, result.rescored
    table.add_row(
        "overall",
        _pct(recorded.overall_accuracy.accuracy),
        _pct(rescored.overall_accuracy.accuracy),
        str(result.pairs),
    )
    for category in CATEGORIES:
        rec = recorded.category_accuracy.get(category) or SliceAccuracy()
        ours = rescored.category_accuracy.get(category) or SliceAccuracy()
        table.add_row(category, _pct(rec.accuracy), _pct(ours.accuracy), str(rec.total_samples))
    console.print(table)
    if result.changes:
        console.print(_changes_table(result.changes, limit, narrow=console.width < 110))
    if result.output:
        console.print(f"re-parsed file: {_cell(short_path(result.output))}")


def _changes_table(changes: list[DecisionChange], limit: int, narrow: bool) -> Table:
    rows = (
        (
            c.pair_id,
            str(c.source or ""),
            [str(c.order), str(c.label or ""), str(c.recorded or "none"), str(c.ours or "none")],
        )
        for c in changes[:limit]
    )
    title = f"changed decisions (first {min(limit, len(changes))} of {len(changes)})"
    return _pair_table(["order", "label", "recorded", "ours"], rows, narrow, title)


__all__ = [
    "cost_text",
    "print_rescore",
    "print_results",
    "print_comparison",
    "print_external_summary",
    "print_estimate",
    "print_plan",
    "out",
    "err",
]

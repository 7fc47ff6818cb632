"""`judgebench`: run an evaluation, list history, compare runs, render a report.

Flag spellings of JudgeBench's run_judge.py and RM-Gallery's evaluator work as aliases, so their users
switch by changing the program name. Everything a user can get wrong is checked before Prefect starts
(its server may take seconds to boot) and reported as one line with exit code 2.
Exit codes: 0 success, 1 regression detected, 2 bad input or configuration, 3 unexpected error (one line;
the traceback with --verbose), 4 the run measured too little (failed or invalid judgments above
--max-failed-fraction, or stopped early because its first calls were all rejected alike), 5 lost
infrastructure: the Prefect server could not start or stopped during the run, or the results database did
not answer for --db-lost-timeout (answers received are kept: the same command resumes),
6 the run spent its --max-cost and stopped (answered calls are cached: the same command with a larger
budget resumes without paying for them again). A worst case above --max-cost is refused before any call
with exit 2, like any other bad input (docs/cost.md).
7 with --batch, the provider refused a batch as a whole for a reason not in our input.
8 a path the run writes cannot be written (disk full, no permission): one line naming it and its option.
9 the endpoint is unreachable: no call answered for --endpoint-lost-timeout, every attempt since failed to
connect (the same command sends only the calls never answered).
130 interrupted by Ctrl-C, 143 stopped by SIGTERM (systemd, Docker, Kubernetes, CI): one line, the run recorded
`interrupted`, answered calls cached, so the same command resumes paying only for the calls that were in flight.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from judgebench_flows.core.errors import (  # noqa: F401 - the exit codes, by their names here too
    EXIT_BATCH_REFUSED,
    EXIT_BUDGET,
    EXIT_BUG,
    EXIT_ENDPOINT_UNREACHABLE,
    EXIT_NOT_WRITABLE,
    EXIT_REGRESSION,
    EXIT_RUN_FAILED,
    EXIT_SERVER,
    EXIT_USER_ERROR,
    KnownError,
    UserError,
)
from judgebench_flows.core.text import for_terminal, wrapped
from judgebench_flows.runtime.quiet import quiet_prefect
from judgebench_flows.runtime.run import RunHost

EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells report it)
EXIT_TERMINATED = 143  # SIGTERM (128 + SIGTERM): how service managers and CI stop a process
RESUME_LINE = "answered calls are cached; run the same command again to resume"


_TERMINATED = threading.Event()


class Terminated(BaseException):
    """SIGTERM outside a flow run (Prefect's own handler raises `TerminationSignal` inside one, then sends
    the signal again to the handler it replaced: this one)."""


def _raise_terminated(signum: int, frame: object) -> None:
    """Raise once: a second SIGTERM (Prefect's re-sent one, or an impatient supervisor) must not
    interrupt the clean-up the first one started."""
    if not _TERMINATED.is_set():
        _TERMINATED.set()
        raise Terminated()


def _stopped_by_sigterm(exc: BaseException) -> bool:
    from prefect.exceptions import TerminationSignal

    return _TERMINATED.is_set() or isinstance(exc, Terminated | TerminationSignal)


def _run_parser(
    sub: argparse._SubParsersAction,
    name: str = "run",
    help: str = "judge a JudgeBench data file (or a CSV/JSONL/Parquet file with an external judge)",
) -> argparse.ArgumentParser:
    """`judgebench run` (and `estimate`, which takes the same options): one option per settings field
    (RunConfig, EndpointSettings; cli/options.py), and the few that only concern this command."""
    from judgebench_flows.cli.options import add_command, add_model_options
    from judgebench_flows.core.config import RunConfig

    p = add_command(sub, name, help)
    add_model_options(p, RunConfig)
    p.add_argument("--verbose", action="store_true", help="show Prefect's logs")
    p.add_argument("--no-progress", dest="progress", action="store_false", default=True, help="no progress bar")
    ext = p.add_argument_group("external judges scoring a table (--judge-type external)")
    ext.add_argument("--config-path", dest="config_path", help="YAML file with the external judge's settings")
    for column in ("model_input_column", "model_output_column", "reference_column", "qid_column"):
        ext.add_argument(
            f"--{column.replace('_', '-')}", dest=column, help=f"the table's {column.removesuffix('_column')} column"
        )
    return p


def build_parser() -> argparse.ArgumentParser:
    from judgebench_flows.cli.options import OneLineParser, add_command, add_format_option

    parser = OneLineParser(
        prog="judgebench",
        description="Benchmark LLM judges on JudgeBench with Prefect. Exit codes: 0 ok, 1 regression, 2 bad input, "
        "3 unexpected error, 4 the run measured too little, 5 the Prefect server or the results database was "
        "lost, 6 the run spent its --max-cost, 7 the provider refused a batch, 8 a path cannot be written, "
        "9 the endpoint is unreachable, "
        "130 Ctrl-C, 143 SIGTERM.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser, metavar="COMMAND")
    _run_parser(sub)
    estimate = _run_parser(
        sub, "estimate", "worst-case and expected cost in USD of a run with these options, without calling the model"
    )
    estimate.add_argument(
        "--detect",
        type=float,
        metavar="POINTS",
        help="also say how many --epochs the regression check needs to catch an accuracy drop of POINTS",
    )
    db_help = "results database (default: $JUDGEBENCH_DB_URL, else sqlite:///results/judgebench.db)"
    history = add_command(sub, "history", "list past runs, newest first, with their whole run ids")
    history.add_argument("--db-url", default=None, help=db_help)
    history.add_argument("--limit", type=int, default=20, help="how many runs (default 20)")
    add_format_option(history)
    compare = add_command(sub, "compare", "per-category deltas and flipped pairs between two runs")
    compare.add_argument("run_a", help="the earlier run's id (as `judgebench history` shows it)")
    compare.add_argument("run_b", help="the later run's id")
    compare.add_argument("--db-url", default=None, help=db_help)
    compare.add_argument("--seed", type=int, default=42, help="seed of the paired bootstrap (default 42)")
    compare.add_argument(
        "--format",
        choices=("table", "json"),
        default="table",
        help="table (default), or json: the whole comparison on standard output, for scripts",
    )
    report = add_command(sub, "report", "render the HTML report of a past run")
    report.add_argument("run_id", help="the run's id (as `judgebench history` shows it)")
    report.add_argument("--db-url", default=None, help=db_help)
    report.add_argument("--output", default=None, help="where to write it (default results/report-<run id>.html)")
    from judgebench_flows.cli.leaderboard import add_parsers as add_leaderboard_parsers

    add_leaderboard_parsers(sub)  # leaderboard, rescore
    from judgebench_flows.cli.automations import add_parsers as add_automations_parsers

    add_automations_parsers(sub)
    from judgebench_flows.cli.retention import add_parsers as add_retention_parsers

    add_retention_parsers(sub)
    from judgebench_flows.cli.dashboard import add_parsers as add_dashboard_parsers

    add_dashboard_parsers(sub)
    from judgebench_flows.cli.alerts import add_parsers as add_alerts_parsers

    add_alerts_parsers(sub)
    return parser


def command_run(args: argparse.Namespace) -> int:
    from judgebench_flows.judging.preflight import holds_judgebench_pairs

    if args.judge_type == "external" and not holds_judgebench_pairs(args.data_path):
        return _run_external(args)
    # The run path (checks, server, its watch: a lost server is exit 5, the flow) is runtime/run.py's,
    # shared with evaluate(); this door says its lines, draws its bar and prints the results.
    from judgebench_flows.runtime.run import judge_run

    results = judge_run(_run_config(args), _CommandHost(args.progress))
    from judgebench_flows.views.summaries import print_results  # imported during the run (`imports_after`)

    print_results(results)
    return 1 if results.regressed else 0


class _CommandHost(RunHost):
    """The command's side of a run (runtime/run.py): its lines on stderr and its progress bar; the flow in
    the main thread, where Ctrl-C and SIGTERM reach it and the server watch's SIGTERM cancels it."""

    imports_after = ("judgebench_flows.views.summaries",)

    def __init__(self, progress: bool) -> None:
        self.progress = progress

    def say_route(self, config: Any) -> None:
        _say_route(config)

    def say_retirement(self, notice: str) -> None:
        _say_warning(notice)

    def showing(self, config: Any, progress: Any) -> Any:
        from judgebench_flows.cli import console

        return console.progress_shown(config, progress, show_progress=self.progress)


def _run_config(args: argparse.Namespace):
    from judgebench_flows.cli.options import given_options
    from judgebench_flows.core.config import RunConfig, run_settings

    return run_settings(
        given_options(args, RunConfig), "--model is required (the judge model name the endpoint serves)"
    )


def command_estimate(args: argparse.Namespace) -> int:
    """`judgebench estimate`: what `run` with these options would cost at most, and probably."""
    from judgebench_flows.judging.estimate import estimate_run
    from judgebench_flows.judging.preflight import check_prices
    from judgebench_flows.views.summaries import print_estimate, print_plan

    config = _run_config(args)
    _say_route(config, to=sys.stdout)
    check_prices(config)
    _say_retirement(config, to=sys.stdout)
    detect = args.detect
    if detect is not None and not 0 < detect <= 100:
        raise UserError(f"--detect: a drop in accuracy points, above 0 and at most 100 (got {detect:g})")
    estimate = estimate_run(config, detect)
    print_estimate(estimate)
    print_plan(estimate)
    return 0


def _say_route(config: Any, to: Any = None) -> None:
    """One line naming the API the model's name chose (no --provider and no base URL given)."""
    if line := config.routed():
        # estimate's output is wrapped at words; before a run's error it is one line but on a terminal
        print(wrapped(line) if to is sys.stdout else for_terminal(line), file=to or sys.stderr)


def _say_retirement(config: Any, to: Any = None) -> None:
    """One line when the judge model is past its provider's shutdown date or within 30 days of it (a run's
    is said by its set-up, once: `RunSetUp.say_retirement`)."""
    notice = config.retirement_notice()
    if notice:
        _say_warning(notice, to)


def _say_warning(notice: str, to: Any = None) -> None:
    """As the route line: wrapped in estimate's output, one line on stderr but on a terminal."""
    line = f"warning: {notice}"
    print(wrapped(line) if to is sys.stdout else for_terminal(line), file=to or sys.stderr)


def _run_external(args: argparse.Namespace) -> int:
    from judgebench_flows.judges.external.config import external_config_from_options

    overrides = {
        key: getattr(args, key)
        for key in (
            "external_judge_path",
            "external_judge_function",
            "external_judge_config",
            "data_path",
            "output_dir",
            "result_path",
            "model_input_column",
            "model_output_column",
            "reference_column",
            "qid_column",
        )
        if getattr(args, key, None) is not None
    }
    if args.concurrency is not None:
        overrides["max_workers"] = args.concurrency
    if args.shard_size is not None:
        overrides["shard_size"] = args.shard_size
    config = external_config_from_options(args.config_path, overrides)
    from judgebench_flows.flows.external_flow import run_external
    from judgebench_flows.runtime.run import watched_run
    from judgebench_flows.views.summaries import print_external_summary

    # set up (log redaction) and on the run's Prefect server, watched as a JudgeBench run is: a server lost mid-run is exit 5, not a hang
    print_external_summary(watched_run(lambda: run_external(config), RunHost()))
    return 0


def _db_url(args: argparse.Namespace) -> str:
    from judgebench_flows.core.config import results_db_url

    return results_db_url(args.db_url)


def command_history(args: argparse.Namespace) -> int:
    from judgebench_flows.data import db
    from judgebench_flows.views import tables

    url = _db_url(args)
    engine = db.open_existing(url)  # reading creates nothing: a missing database is an error
    runs = []
    if engine is not None:
        db.mark_crashed(engine)  # a run whose process was killed is not "running" forever
        runs = db.list_runs(engine, limit=args.limit)
    if args.format == "json":
        print(tables.to_json(tables.history_rows(runs)))
    elif args.format == "csv":
        print(tables.to_csv(tables.HISTORY_FIELDS, tables.history_rows(runs)), end="")
    elif not runs:
        print(f"no runs yet in {db.safe_url(url)}")
    else:
        tables.print_history(runs)
    return 0


def command_compare(args: argparse.Namespace) -> int:
    from judgebench_flows.scoring.compare import compare_runs
    from judgebench_flows.views.summaries import err, print_comparison

    comparison = compare_runs(_db_url(args), args.run_a, args.run_b, seed=args.seed)
    if args.format == "json":
        from judgebench_flows.views.tables import to_json

        print(to_json(comparison))  # its warnings are in it
        return 0
    for warning in comparison.warnings:
        err.print(f"warning: {warning}", markup=False, highlight=False)  # wrapped to the terminal
    print_comparison(comparison)
    return 0


def command_report(args: argparse.Namespace) -> int:
    from judgebench_flows.data import db
    from judgebench_flows.scoring.compare import records_of
    from judgebench_flows.scoring.report import history_point, write_report

    if args.output and "://" in args.output:
        from judgebench_flows.data.outputs import check_file

        check_file("--output", args.output)  # its store takes a probe object there, before any work
    engine = db.open_existing(_db_url(args))
    run = db.get_run(engine, args.run_id) if engine is not None else None
    if engine is None or run is None or not run.results_json:
        raise UserError(f"no finished run '{args.run_id}' in {db.safe_url(_db_url(args))}")
    from judgebench_flows.scoring.run_results import RunResults

    results = RunResults.read(run.results_json)
    history = [
        history_point(r)
        for r in reversed(db.list_runs(engine, limit=30, config_key=run.config_key))
        if r.overall_accuracy is not None and r.started <= run.started
    ]
    path = write_report(
        args.output or f"results/report-{run.run_id[:8]}.html", results, records_of(engine, run.run_id), history
    )
    print(path)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    quiet_prefect(getattr(args, "verbose", False))
    commands = {
        "run": command_run,
        "estimate": command_estimate,
        "history": command_history,
        "compare": command_compare,
        "report": command_report,
    }
    from judgebench_flows.cli.leaderboard import COMMANDS as LEADERBOARD_COMMANDS

    commands.update(LEADERBOARD_COMMANDS)
    from judgebench_flows.cli.automations import COMMANDS as AUTOMATIONS_COMMANDS

    commands.update(AUTOMATIONS_COMMANDS)
    from judgebench_flows.cli.retention import COMMANDS as RETENTION_COMMANDS

    commands.update(RETENTION_COMMANDS)
    from judgebench_flows.cli.dashboard import COMMANDS as DASHBOARD_COMMANDS

    commands.update(DASHBOARD_COMMANDS)
    from judgebench_flows.cli.alerts import COMMANDS as ALERTS_COMMANDS

    commands.update(ALERTS_COMMANDS)
    with _sigterm_ends_the_command():
        return _run_command(commands[args.command], args)


@contextlib.contextmanager
def _sigterm_ends_the_command() -> Iterator[None]:
    """SIGTERM ends the command like Ctrl-C (one line, not a traceback) for as long as it runs; the handler
    it replaced is put back after, so a process that calls `main()` (a test, a notebook) keeps its own, and
    the next command's first SIGTERM is its own again."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _TERMINATED.clear()
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def _run_command(command: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """The command, and how it ends: its code, or a known error's line and code (core/errors.py), Ctrl-C,
    SIGTERM, or a bug's one line (exit 3)."""
    try:
        return command(args)
    except KnownError as exc:  # each knows its line and exit code (core/errors.py; README, Exit codes)
        from judgebench_flows.core.secrets import redact

        _error_line(redact(exc.line()))
        return exc.exit_code
    except KeyboardInterrupt:
        _error_line(f"interrupted: {RESUME_LINE}")
        return EXIT_INTERRUPTED
    except Exception as exc:  # a bug: one line (exit 3); the traceback with --verbose, else in a log file
        return _unexpected(exc, getattr(args, "verbose", False), getattr(args, "cache_dir", None))
    except BaseException as exc:
        if not _stopped_by_sigterm(exc):
            raise
        _error_line(f"stopped by SIGTERM: {RESUME_LINE}")
        return EXIT_TERMINATED


def _error_line(line: str) -> None:
    """The one line a failed command ends with, on stderr (wrapped at words on a terminal)."""
    print(for_terminal(line), file=sys.stderr)


def _unexpected(exc: Exception, verbose: bool, cache_dir: str | None = None) -> int:
    """Report an unexpected error as one line; its traceback goes to stderr with --verbose, else to
    `last-error.log` in the run's cache directory (--cache-dir, else the default; secrets redacted either way)."""
    import traceback

    from judgebench_flows.core.secrets import redact
    from judgebench_flows.core.text import shorten

    trace = redact("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    where = ""
    if verbose:
        print(trace, file=sys.stderr, end="")
    else:
        from judgebench_flows.data.journal import default_cache_dir

        log = (Path(cache_dir).expanduser() if cache_dir else default_cache_dir()) / "last-error.log"
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(trace, encoding="utf-8")
            where = f" (traceback in {log}; --verbose shows it)"
        except OSError:
            where = " (--verbose shows the traceback)"
    line = redact(str(exc)).splitlines()[0] if str(exc).strip() else ""
    line = shorten(line, 300, "the traceback")
    _error_line(f"unexpected error: {type(exc).__name__}{': ' + line if line else ''}{where}")
    return EXIT_BUG


def run_command(argv: list[str]) -> int:
    """`main`, then what interpreter exit would do before the process ends, returning the exit code.

    Everything that matters at exit runs here: non-daemon threads finish, output is flushed and the exit
    handlers run (Prefect sends its last logs and events,
    logging is shut down). `main` turns every exception into an exit code (an unexpected one is exit 3
    with one line); argparse's own exits (--help, a bad option) keep their codes.
    """
    try:
        code = main(argv)
    except SystemExit as exc:  # as the interpreter treats it: None is 0, a message is printed and is 1
        code = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
        if not isinstance(exc.code, int | None):
            print(exc.code, file=sys.stderr)
    for thread in threading.enumerate():  # as interpreter exit does: non-daemon threads finish first
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()  # the handlers interpreter exit would run (private, but in CPython since 2.x)
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def entry() -> None:
    """The `judgebench` command: `run_command`, then exit without Python's final clean-up of every module,
    which takes over half a second after a run (Prefect, SQLAlchemy and pydantic leave a large heap) and
    holds nothing."""
    os._exit(run_command(sys.argv[1:]))


if __name__ == "__main__":
    entry()

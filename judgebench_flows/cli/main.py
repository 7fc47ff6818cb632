"""`judgebench`: run an evaluation, list history, compare runs, render a report.

Flag spellings of JudgeBench's run_judge.py and RM-Gallery's evaluator work as aliases, so their users
switch by changing the program name. Everything a user can get wrong is checked before Prefect starts
(a temporary Prefect server takes seconds to boot) and reported as one line with exit code 2.
Exit codes: 0 success, 1 regression detected, 2 bad input or configuration, 3 unexpected error (one line;
the traceback with --verbose), 4 the run measured too little (failed or invalid judgments above
--max-failed-fraction, or stopped early because its first calls were all rejected alike), 5 the Prefect
server could not start, or stopped during the run (answered calls are cached: the same command resumes).
"""

from __future__ import annotations

import argparse
import atexit
import json
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from judgebench_flows.cli.prefect_server import PrefectServerError, PrefectStart, start_prefect
from judgebench_flows.core.errors import RunFailed, UserError

EXIT_REGRESSION, EXIT_USER_ERROR, EXIT_BUG, EXIT_RUN_FAILED = 1, 2, 3, 4
EXIT_SERVER = 5  # the Prefect server could not start or stopped during the run: the input was fine, run again


def _run_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = add_command(sub, "run", "judge a JudgeBench data file (or a CSV/JSONL/Parquet file with an external judge)")
    add = p.add_argument
    add(
        "--judge-type",
        "--judge_type",
        "--judge_name",
        dest="judge_type",
        help="arena_hard (default), vanilla, auto_j, prometheus_2, skywork_critic, compass_judger, judge_lm, panda_lm, reward_model, custom, external",
    )
    add(
        "--judge-template",
        "--judge_template",
        dest="judge_template",
        help="custom judge class: path.py:Class or module:Class",
    )
    add("--model", "--judge-model", "--judge_model", dest="model", help="judge model name sent to the endpoint")
    add(
        "--reward-backend",
        dest="reward_backend",
        choices=["pooling", "transformers"],
        help="reward_model: vLLM's Pooling API at --base-url (default), or the model run here with transformers",
    )
    add(
        "--repo-url",
        "--repo_url",
        dest="repo_url",
        help="git URL, file:// URL or local path of the JudgeBench repository",
    )
    add("--ref", help="commit, tag or branch to check out (default: a pinned JudgeBench commit)")
    add("--data-file", "--data_file", dest="data_file", help="data file inside the repository's data/ directory")
    add("--data-path", "--data_path", "--pairs", dest="data_path", help="judge a local file, no clone")
    add(
        "--templates-dir",
        dest="templates_dir",
        help="directory of judge prompt templates (default: the checkout's utils/templates)",
    )
    add(
        "--base-url",
        "--base_url",
        dest="base_url",
        help="OpenAI-compatible endpoint (else OPENAI_BASE_URL, else BASE_URL)",
    )
    add(
        "--api-key-env",
        dest="api_key_env",
        help="NAME of the environment variable holding the endpoint's key (default OPENAI_API_KEY)",
    )
    add("--api-key-secret", dest="api_key_secret", help="NAME of a Prefect Secret block holding the endpoint's key")
    add(
        "--concurrency",
        "--max-workers",
        "--max_workers",
        "--concurrency_limit",
        dest="concurrency",
        type=int,
        help="calls in flight at once (default 16)",
    )
    add("--rpm", type=float, help="at most this many requests per minute")
    add("--shard-size", "--shard_size", dest="shard_size", type=int, help="pairs per shard task (default 50)")
    add("--result-path", "--result_path", dest="result_path", help="results JSON (default results/judgebench.json)")
    add(
        "--output-dir",
        "--output_dir",
        dest="output_dir",
        help="directory for the per-judgment JSONL and report (default results/run)",
    )
    add(
        "--db-url",
        "--db_url",
        dest="db_url",
        help="SQLAlchemy URL of the results database (default sqlite:///results/judgebench.db)",
    )
    add("--max-samples", "--max_samples", dest="max_samples", type=int, help="judge a seeded subset of N pairs")
    add(
        "--single-game",
        "--single_game",
        dest="single_game",
        action="store_true",
        default=None,
        help="judge one order only",
    )
    add(
        "--shuffle-responses",
        "--shuffle_responses",
        dest="shuffle_responses",
        action="store_true",
        default=None,
        help="swap A/B per pair from the seed",
    )
    add("--seed", type=int, help="seed for sampling, shuffling and bootstrap (default 42)")
    add(
        "--request-timeout",
        "--request_timeout",
        dest="request_timeout",
        type=float,
        help="seconds per call before it is retried (default 120)",
    )
    add(
        "--max-retries",
        dest="max_retries",
        type=int,
        help="retries per call for 429/5xx/timeouts/dropped connections (default 6)",
    )
    add(
        "--retry-initial-wait",
        dest="retry_initial_wait",
        type=float,
        help="seconds before the first retry; doubles each retry (default 1)",
    )
    add(
        "--retry-max-wait",
        dest="retry_max_wait",
        type=float,
        help="longest backoff between retries; a server's Retry-After is still honoured (default 60)",
    )
    add("--temperature", type=float, help="override the judge's temperature (default: the judge's own, 0)")
    add("--max-tokens", dest="max_tokens", type=int, help="override the judge's max_tokens")
    add(
        "--reasoning-effort",
        dest="reasoning_effort",
        choices=["low", "medium", "high"],
        help="reasoning models (o1, o3, o4, gpt-5, ...): passed through as reasoning_effort",
    )
    add(
        "--request-style",
        dest="request_style",
        choices=["auto", "standard", "o1", "reasoning"],
        help="how requests are shaped: auto (default: by model name), standard (as the judge asks), "
        "o1 (JudgeBench's o1 requests: system folded into the user turn, no sampling parameters), "
        "reasoning (no temperature/top_p, max_tokens sent as max_completion_tokens)",
    )
    add(
        "--drop-params",
        dest="drop_params",
        type=lambda text: [p.strip() for p in text.split(",") if p.strip()],
        help="comma-separated request parameters never to send (e.g. temperature,top_p) for endpoints that reject them",
    )
    add(
        "--max-failed-fraction",
        dest="max_failed_fraction",
        type=float,
        help="the run fails (exit 4) when more than this share of judgments failed or were invalid (default 0.05)",
    )
    cache = p.add_mutually_exclusive_group()
    cache.add_argument(
        "--no-cache", dest="cache", action="store_const", const="off", help="ignore the call and shard caches"
    )
    cache.add_argument(
        "--refresh-cache",
        dest="cache",
        action="store_const",
        const="refresh",
        help="pay again and overwrite the caches",
    )
    add("--cache-dir", dest="cache_dir", help="where cloned repositories are kept (default ~/.cache/judgebench-flows)")
    add(
        "--task-runner",
        dest="task_runner",
        choices=["thread", "dask"],
        help="where shards run (default: in this process)",
    )
    add("--dask-address", dest="dask_address", help="tcp://HOST:PORT of a Dask scheduler")
    add(
        "--global-limit",
        dest="global_limit",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="hold --concurrency and --rpm across all workers and runs with a Prefect global concurrency limit "
        "(default: on with --task-runner dask, off in-process)",
    )
    add(
        "--adaptive-concurrency",
        dest="adaptive_concurrency",
        action="store_true",
        default=None,
        help="halve the calls in flight on a 429, grow back by one after that many successes",
    )
    add("--no-report", dest="report", action="store_false", default=None, help="skip the HTML report")
    add("--verbose", action="store_true", help="show Prefect's logs")
    add("--no-progress", dest="progress", action="store_false", default=True, help="no progress bar on stderr")
    ext = p.add_argument_group("external judges (--judge-type external)")
    ext.add_argument(
        "--external-judge-path",
        dest="external_judge_path",
        help="external judge: Python file defining the judge function",
    )
    ext.add_argument(
        "--external-judge-function",
        dest="external_judge_function",
        help="external judge: name of the function in that file (default evaluate)",
    )
    ext.add_argument(
        "--external-judge-config", dest="external_judge_config", help="JSON object passed to the judge as config"
    )
    ext.add_argument("--config-path", dest="config_path", help="YAML file with the external judge's settings")
    from judgebench_flows.judges.external.config import COLUMN_OPTIONS, ExternalJudgeConfig

    for column in COLUMN_OPTIONS:
        ext.add_argument(
            f"--{column.replace('_', '-')}", dest=column, help=ExternalJudgeConfig.model_fields[column].description
        )
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="judgebench",
        description="Benchmark LLM judges on JudgeBench with Prefect. Exit codes: 0 ok, 1 regression, 2 bad input, "
        "3 unexpected error, 4 the run measured too little, 5 the Prefect server was lost.",
        allow_abbrev=False,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _run_parser(sub)
    db_help = "results database (default: $JUDGEBENCH_DB_URL, else sqlite:///results/judgebench.db)"
    history = add_command(sub, "history", "list past runs, newest first, with their whole run ids")
    history.add_argument("--db-url", default=None, help=db_help)
    history.add_argument("--limit", type=int, default=20, help="how many runs (default 20)")
    history.add_argument(
        "--format",
        choices=("table", "json", "csv"),
        default="table",
        help="table (default: fits the terminal), or json/csv on standard output for scripts",
    )
    compare = add_command(sub, "compare", "per-category deltas and flipped pairs between two runs")
    compare.add_argument("run_a", help="the earlier run's id (as `judgebench history` shows it)")
    compare.add_argument("run_b", help="the later run's id")
    compare.add_argument("--db-url", default=None, help=db_help)
    compare.add_argument("--seed", type=int, default=42, help="seed of the paired bootstrap (default 42)")
    report = add_command(sub, "report", "render the HTML report of a past run")
    report.add_argument("run_id", help="the run's id (as `judgebench history` shows it)")
    report.add_argument("--db-url", default=None, help=db_help)
    report.add_argument("--output", default=None, help="where to write it (default results/report-<run id>.html)")
    from judgebench_flows.cli.leaderboard import add_parsers as add_leaderboard_parsers

    add_leaderboard_parsers(sub)  # leaderboard, rescore
    return parser


def add_command(sub: argparse._SubParsersAction, name: str, text: str) -> argparse.ArgumentParser:
    """A sub-command whose one-line help is also its --help description; options are never matched by prefix
    (`--judge-typ` is an error, not --judge-type)."""
    return sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".", allow_abbrev=False)


RUN_OPTIONS = (
    "judge_type",
    "judge_template",
    "model",
    "repo_url",
    "ref",
    "data_file",
    "data_path",
    "templates_dir",
    "base_url",
    "api_key_env",
    "api_key_secret",
    "concurrency",
    "rpm",
    "shard_size",
    "result_path",
    "output_dir",
    "db_url",
    "max_samples",
    "single_game",
    "shuffle_responses",
    "seed",
    "request_timeout",
    "max_retries",
    "retry_initial_wait",
    "retry_max_wait",
    "temperature",
    "max_tokens",
    "cache",
    "cache_dir",
    "task_runner",
    "dask_address",
    "global_limit",
    "adaptive_concurrency",
    "report",
    "reasoning_effort",
    "request_style",
    "drop_params",
    "max_failed_fraction",
    "reward_backend",
)


def check_endpoint_reachable(base_url: str, timeout: float = 5.0) -> None:
    """A TCP connect to the endpoint, so an unreachable one fails in a second rather than after retries."""
    from judgebench_flows.core.net import connect_error, host_port

    problem = connect_error(base_url, timeout=timeout)
    if problem is not None:
        host, port = host_port(base_url)
        raise UserError(f"cannot reach the endpoint {urlsplit(base_url).scheme}://{host}:{port}: {problem}")


def quiet_prefect(verbose: bool) -> None:
    """Prefect logs warnings and errors only, unless --verbose (or the user set its logging variables)."""
    if not verbose:
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
        os.environ.setdefault("PREFECT_LOGGING_LOG_PRINTS", "false")


def _user_error_names() -> set[str]:
    names, pending = set(), [UserError]
    while pending:
        cls = pending.pop()
        names.add(cls.__name__)
        pending.extend(cls.__subclasses__())
    return names


# httpx's transport errors: Prefect's client could not reach its API (the server stopped or restarts).
_PREFECT_API_UNREACHABLE = ("ConnectError", "ConnectTimeout", "ReadTimeout", "ReadError", "RemoteProtocolError")


def _api_unreachable(exc: BaseException | None) -> bool:
    """Whether `exc` or what caused it is httpx failing to reach a server. The endpoint's client (openai)
    wraps such errors in its own classes, so here they are Prefect's client talking to its API."""
    seen = 0
    while exc is not None and seen < 10:
        if type(exc).__module__.startswith(("httpx", "httpcore")) and type(exc).__name__ in _PREFECT_API_UNREACHABLE:
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


class _HideRunErrorsReportedElsewhere(logging.Filter):
    """Drop Prefect's console records about a run failure that `main` reports as one line.

    Prefect logs the failure (with a traceback) before `main` prints the same error as one line: for bad
    input that is noise which buries the line that tells the user what to fix; for a Prefect server that
    stopped (its API unreachable), pages of tracebacks above the line that says how to resume. The filter
    sits on the console handler only, so the records still reach the Prefect API and its UI (or, with the
    server gone, judgebench-background.log in PREFECT_HOME); `--verbose` keeps them.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR or not record.name.startswith(("prefect.flow_runs", "prefect.task_runs")):
            return True
        if record.exc_info and isinstance(record.exc_info[1], UserError):
            return False
        if record.exc_info and _api_unreachable(record.exc_info[1]):
            return False
        message = record.getMessage()
        # A shard with unparseable verdicts or failed calls is expected and reported in the results.
        names = _user_error_names() | {"ShardIncomplete", *_PREFECT_API_UNREACHABLE}
        return not any(f"{name}:" in message or f"{name}(" in message for name in names)


def _hide_user_error_run_logs() -> None:
    from prefect.logging.configuration import ensure_logging_setup

    ensure_logging_setup()  # Prefect configures logging lazily; later setups are incremental and keep handlers
    for handler in logging.getLogger().handlers:
        handler.addFilter(_HideRunErrorsReportedElsewhere())
    from judgebench_flows.cli.quiet import route_background_output

    route_background_output()  # Prefect's background workers: to PREFECT_HOME/judgebench-background.log


def _check_file_url(repo_url: str) -> None:
    """A file:// repository that is not there fails now: in the flow, git's last words ("and the repository
    exists.") name nothing, and the clone task would retry it as if it were a network hiccup."""
    parts = urlsplit(repo_url.strip())
    if parts.scheme.lower() == "file" and not Path(unquote(parts.path)).exists():
        raise UserError(f"--repo-url: no repository at '{repo_url.strip()}'")


def preflight(config) -> None:
    """Check everything checkable before Prefect starts: judge, templates, database, data, endpoint."""
    from judgebench_flows.data import db
    from judgebench_flows.data.dataset import check_repo_url, is_pinned
    from judgebench_flows.judges import JUDGE_TYPES, get_judge

    if config.judge_template is None and config.judge_type not in JUDGE_TYPES:
        raise UserError(f"unknown judge type '{config.judge_type}' (valid: {', '.join(JUDGE_TYPES)})")
    if config.judge_template or config.judge_type == "external":
        get_judge(
            config.judge_type,
            None,
            config.judge_template,
            config.external_judge_path,
            config.external_judge_function,
            config.external_judge_config,
        )
    elif config.data_path or config.templates_dir:
        get_judge(config.judge_type, config.templates_dir, model=config.model)
    if config.data_path and not Path(config.data_path).is_file():
        raise UserError(f"--data-path: file not found: {config.data_path}")
    from judgebench_flows.data.outputs import check_directory, check_file

    check_directory("--output-dir", config.output_dir)  # results are written after every call is paid for
    check_file("--result-path", config.result_path)
    if config.data_path:
        from judgebench_flows.data.loading import index_pairs

        index_pairs(config.data_path)  # duplicate ids or no usable row: say so before Prefect starts
    if not config.data_path:
        check_repo_url(config.repo_url)
        _check_file_url(config.repo_url)
        if is_pinned(config.ref):
            _warm_clone(config)
    db.open_database(config.db_url)
    if config.needs_endpoint:
        check_endpoint_reachable(config.resolved_base_url())
        if config.endpoint.api_key_env and not os.environ.get(config.endpoint.api_key_env):
            raise UserError(f"--api-key-env: the variable ${config.endpoint.api_key_env} is not set")


def _warm_clone(config) -> None:
    """Clone a pinned commit now, while Prefect's server boots: the flow's fetch task then finds it in the
    cache, and a missing data file or prompt template is reported before any flow run exists."""
    from judgebench_flows.data.dataset import data_file_in, fetch_repository
    from judgebench_flows.judges import get_judge

    checkout = fetch_repository(config.repo_url, config.ref, config.cache_dir)
    data_file_in(checkout, config.data_file)
    if not config.judge_template and config.judge_type != "external":
        get_judge(config.judge_type, config.templates_dir or checkout.templates_dir, model=config.model)


def command_run(args: argparse.Namespace) -> int:
    from judgebench_flows.core.secrets import install_log_redaction

    install_log_redaction()
    prefect = start_prefect()
    if args.judge_type == "external" and not _holds_judgebench_pairs(args.data_path):
        return _run_external(args, prefect)
    from judgebench_flows.core.config import build_config

    options = {name: getattr(args, name) for name in RUN_OPTIONS}
    if args.judge_type == "external":  # a pairwise external judge deciding JudgeBench pairs, no endpoint
        options["model"] = options.get("model") or "external"
        options["external_judge_path"] = args.external_judge_path
        options["external_judge_function"] = args.external_judge_function
        from judgebench_flows.judges.external.config import parse_judge_config_json

        options["external_judge_config"] = (
            parse_judge_config_json(args.external_judge_config) if args.external_judge_config else {}
        )
    if not options.get("model"):
        raise UserError("--model is required (the judge model name the endpoint serves)")
    config = build_config(**options)
    preflight(config)

    from judgebench_flows.cli import console

    prefect.guard_run(config.db_url)  # a Prefect server that stops mid-run ends it with exit 5, not a hang
    try:
        return console.run_with_progress(
            config,
            prefect,
            show_progress=args.progress,
            with_prefect=(lambda: None) if args.verbose else _hide_user_error_run_logs,
        )
    except Exception as exc:  # a configured server that stopped outlasts Prefect's retries, which fail the flow
        lost = prefect.server_lost(exc)
        if lost is not None:
            raise lost from exc
        raise
    finally:
        prefect.end_guard()


def _holds_judgebench_pairs(data_path: str | None) -> bool:
    """External judges score CLEAR-style tables, or decide JudgeBench pairs (a clone, or a JSONL of pairs)."""
    if data_path is None:
        return True
    if not data_path.endswith(".jsonl") or not Path(data_path).is_file():
        return False
    with open(data_path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            if line.strip():
                try:
                    first = json.loads(line)
                except json.JSONDecodeError:
                    return False
                return isinstance(first, dict) and {"pair_id", "response_A", "response_B", "label"} <= first.keys()
    return False


def _run_external(args: argparse.Namespace, prefect: PrefectStart) -> int:
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
    prefect.wait_ready()
    from judgebench_flows.cli.console import print_external_summary
    from judgebench_flows.flows.external_flow import run_external

    print_external_summary(run_external(config))
    return 0


def _db_url(args: argparse.Namespace) -> str:
    from judgebench_flows.core.config import DEFAULT_DB_URL
    from judgebench_flows.core.credentials import stash

    # Without its password from here on (messages, outputs); the database is opened with it.
    return stash(args.db_url or os.environ.get("JUDGEBENCH_DB_URL") or DEFAULT_DB_URL)


def command_history(args: argparse.Namespace) -> int:
    from judgebench_flows.cli import tables
    from judgebench_flows.data import db

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
    from judgebench_flows.cli import console
    from judgebench_flows.scoring.compare import compare_runs

    comparison = compare_runs(_db_url(args), args.run_a, args.run_b, seed=args.seed)
    for warning in comparison.get("warnings", []):
        console.err.print(f"warning: {warning}", markup=False, highlight=False)  # wrapped to the terminal
    console.print_comparison(comparison)
    return 0


def command_report(args: argparse.Namespace) -> int:
    from judgebench_flows.data import db
    from judgebench_flows.scoring.compare import records_of
    from judgebench_flows.scoring.report import history_point, write_report

    engine = db.open_existing(_db_url(args))
    run = db.get_run(engine, args.run_id) if engine is not None else None
    if engine is None or run is None or not run.results_json:
        raise UserError(f"no finished run '{args.run_id}' in {db.safe_url(_db_url(args))}")
    results: dict[str, Any] = json.loads(run.results_json)
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
    from judgebench_flows.cli import preload

    preload.refresh_prefect_logging()  # in a preloaded child, Prefect's logging was set up before --verbose was read
    commands = {"run": command_run, "history": command_history, "compare": command_compare, "report": command_report}
    from judgebench_flows.cli.leaderboard import COMMANDS as LEADERBOARD_COMMANDS

    commands.update(LEADERBOARD_COMMANDS)
    try:
        return commands[args.command](args)
    except RunFailed as exc:  # before UserError, its base: the run measured too little
        from judgebench_flows.core.secrets import redact

        print(f"run failed: {redact(str(exc))}", file=sys.stderr)
        return EXIT_RUN_FAILED
    except UserError as exc:
        from judgebench_flows.core.secrets import redact

        print(f"error: {redact(str(exc))}", file=sys.stderr)
        return EXIT_USER_ERROR
    except PrefectServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_SERVER
    except KeyboardInterrupt:
        print("interrupted: answered calls are cached; run the same command again to resume", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug: one line (exit 3); the traceback with --verbose, else in a log file
        return _unexpected(exc, getattr(args, "verbose", False))


def _unexpected(exc: Exception, verbose: bool) -> int:
    """Report an unexpected error as one line; its traceback goes to stderr with --verbose, else to
    `last-error.log` in the cache directory (secrets redacted either way)."""
    import traceback

    from judgebench_flows.core.secrets import redact

    trace = redact("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    where = ""
    if verbose:
        print(trace, file=sys.stderr, end="")
    else:
        log = (
            Path(os.environ.get("JUDGEBENCH_CACHE_DIR") or Path.home() / ".cache" / "judgebench-flows")
            / "last-error.log"
        )
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(trace, encoding="utf-8")
            where = f" (traceback in {log}; --verbose shows it)"
        except OSError:
            where = " (--verbose shows the traceback)"
    line = redact(str(exc)).splitlines()[0] if str(exc).strip() else ""
    print(f"unexpected error: {type(exc).__name__}{': ' + line[:300] if line else ''}{where}", file=sys.stderr)
    return EXIT_BUG


def run_command(argv: list[str]) -> int:
    """`main`, then what interpreter exit would do before the process ends, returning the exit code.

    Everything that matters at exit runs here: non-daemon threads finish, output is flushed and the exit
    handlers run (Prefect sends its last logs and events, a temporary Prefect server is told to stop,
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
    """The `judgebench` command: in a preloaded child when one is waiting for this code and these settings
    (preload.py: the imports are done), else here; then exit without Python's final clean-up of every
    module, which takes over half a second after a run (Prefect, SQLAlchemy and pydantic leave a large heap)
    and holds nothing."""
    from judgebench_flows.cli import preload

    argv = sys.argv[1:]
    started_with = dict(os.environ)
    found = preload.command_key()
    code = preload.run_preloaded(argv, found)
    if code is None:
        code = run_command(argv)
        preload.leave_preloaded(argv, found, started_with)
    os._exit(code)


if __name__ == "__main__":
    entry()

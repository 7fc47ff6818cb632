"""`judgebench leaderboard` and `judgebench rescore`: the sub-commands that need no key and no endpoint.

Kept apart from cli/main.py, which only registers them. Both commands score recorded verdicts; neither
needs Prefect. `leaderboard` runs without it by default: the
scoring takes about a second, a first Prefect server seconds to boot; `--flow` runs the same code
as a Prefect flow for its artifact.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from judgebench_flows.core.errors import UserError

if TYPE_CHECKING:
    from judgebench_flows.scoring.leaderboard import Leaderboard, LeaderboardSettings


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """`leaderboard` takes LeaderboardSettings' fields as options, `rescore` the judge's from RunConfig."""
    from judgebench_flows.cli.options import add_command, add_format_option, add_model_options
    from judgebench_flows.core.config import RunConfig
    from judgebench_flows.scoring.leaderboard import LeaderboardSettings

    board = add_command(sub, "leaderboard", "published judges and our runs in one table per benchmark (no API key)")
    add_model_options(board, LeaderboardSettings, skip={"require_published"})
    board.add_argument(
        "--result-path",
        "--result_path",
        dest="result_path",
        default=None,
        help=f"where the leaderboard JSON is written (default {BOARD_JSON}; with --across {ACROSS_JSON})",
    )
    board.add_argument(
        "--across",
        action="store_true",
        help="one view across benchmarks: each judge's place on each, and Kendall's tau between the rankings",
    )
    add_across_options(board)
    board.add_argument(
        "--output-dir",
        "--output_dir",
        dest="output_dir",
        default="results/leaderboard",
        help="directory for leaderboard.html",
    )
    board.add_argument("--flow", action="store_true", help="run as a Prefect flow (adds a markdown artifact)")
    add_format_option(board)
    rescore = add_command(sub, "rescore", "re-parse a recorded outputs file's answers with our parser")
    rescore.add_argument("file", help="an outputs JSONL (JudgeBench's outputs/ or one of our runs)")
    rescore.add_argument(
        "--judge-type",
        "--judge_type",
        "--judge_name",
        dest="judge_type",
        required=True,
        help="whose parser: arena_hard, vanilla, auto_j, prometheus_2, skywork_critic, custom",
    )
    add_model_options(rescore, RunConfig, only={"judge_template", "templates_dir"})
    rescore.add_argument("--seed", type=int, default=42, help="bootstrap seed (default 42)")
    rescore.add_argument(
        "--result-path", "--result_path", dest="result_path", default=None, help="write the comparison as JSON"
    )
    rescore.add_argument("--output", default=None, help="write the file again with our decisions (JSONL)")


BOARD_JSON = "results/leaderboard.json"
ACROSS_JSON = "results/leaderboard_across.json"


def add_across_options(parser: argparse.ArgumentParser) -> None:
    """`--NAME-repo-url` and `--NAME-ref` per registered benchmark: where `--across` reads each one's board."""
    from judgebench_flows.core import benchmarks

    for name, benchmark in benchmarks.BENCHMARKS.items():
        parser.add_argument(
            f"--{name}-repo-url",
            dest=f"across_{name}_repo_url",
            default=None,
            help=f"with --across: {benchmark.title}'s repository (default {benchmark.repo_url})",
        )
        parser.add_argument(
            f"--{name}-ref",
            dest=f"across_{name}_ref",
            default=None,
            help=f"with --across: {benchmark.title}'s commit (default its pinned {benchmark.ref[:12]})",
        )


def command_leaderboard(args: argparse.Namespace) -> int:
    from judgebench_flows.cli.options import given_options
    from judgebench_flows.core.config import results_db_url, validated
    from judgebench_flows.scoring.leaderboard import LeaderboardSettings, build_leaderboard
    from judgebench_flows.scoring.leaderboard_report import write_outputs
    from judgebench_flows.views import tables

    options = given_options(args, LeaderboardSettings) | {"db_url": results_db_url(args.db_url)}
    if args.across:
        return command_across(args, options)
    _refuse_across_options(args)
    args.result_path = args.result_path or BOARD_JSON
    settings = validated(LeaderboardSettings, options)
    check_outputs(args.result_path, args.output_dir)
    if args.flow:
        board = _as_flow(settings, args)
    else:
        board = build_leaderboard(settings)
        try:
            board.outputs = write_outputs(board, args.result_path, args.output_dir)
        except OSError as exc:
            raise UserError(
                f"cannot write the leaderboard ({args.result_path}, {args.output_dir}): {exc.strerror or exc}"
            ) from None
    if args.format == "json":
        print(tables.to_json(board))
    elif args.format == "csv":
        print(tables.to_csv(tables.leaderboard_fields(board), tables.leaderboard_rows(board)), end="")
    else:
        tables.print_leaderboard(board)
        for name, path in (board.outputs or {}).items():
            print(f"{name}: {tables.short_path(path)}")
    return 0


def _refuse_across_options(args: argparse.Namespace) -> None:
    given = [name for name, value in vars(args).items() if name.startswith("across_") and value is not None]
    if given:
        option = "--" + given[0].removeprefix("across_").replace("_", "-")
        raise UserError(f"{option} is read with --across only; a single benchmark's board takes --repo-url and --ref")


def command_across(args: argparse.Namespace, options: dict[str, object]) -> int:
    """`leaderboard --across`: every benchmark's board, each judge's place on each, and the rankings' agreement."""
    from judgebench_flows.core import benchmarks
    from judgebench_flows.core.config import validated
    from judgebench_flows.scoring.leaderboard import LeaderboardSettings
    from judgebench_flows.scoring.leaderboard_across import build_across
    from judgebench_flows.scoring.results import write_json
    from judgebench_flows.views import across as across_view
    from judgebench_flows.views import tables

    for option in ("benchmark", "repo_url", "ref"):
        if option in options:
            flag = "--" + option.replace("_", "-")
            raise UserError(
                f"{flag} names one benchmark's board; --across reads every benchmark's "
                "(--judgebench-repo-url, --llmbar-repo-url, --judgebench-ref, --llmbar-ref)"
            )
    if args.flow:
        raise UserError("--flow makes one benchmark's board; --across runs without Prefect")
    result_path = args.result_path or ACROSS_JSON
    check_outputs(result_path, ".")
    shared = {k: v for k, v in options.items() if k not in ("benchmark", "repo_url", "ref")}
    settings = {}
    for name in benchmarks.names():
        mine = {
            key: value
            for key, value in (
                ("repo_url", getattr(args, f"across_{name}_repo_url")),
                ("ref", getattr(args, f"across_{name}_ref")),
            )
            if value is not None
        }
        settings[name] = validated(
            LeaderboardSettings, {**shared, **mine, "benchmark": name, "require_published": False}
        )
    first = next(iter(settings.values()))
    view = build_across(settings, seed=first.seed, resamples=first.bootstrap_resamples)
    try:
        written = write_json(result_path, view)
    except OSError as exc:
        raise UserError(f"cannot write the view across benchmarks ({result_path}): {exc.strerror or exc}") from None
    if args.format == "json":
        print(tables.to_json(view))
    elif args.format == "csv":
        print(tables.to_csv(across_view.FIELDS, across_view.rows(view)), end="")
    else:
        across_view.print_across(view)
        print(f"results: {tables.short_path(written)}")
    return 0


def check_outputs(result_path: str, output_dir: str) -> None:
    """An object store the leaderboard's JSON or page goes to takes a probe object there (a path keeps its
    one check, where it is written)."""
    from judgebench_flows.data import storage
    from judgebench_flows.data.outputs import check_directory, check_file

    if storage.is_url(result_path):
        check_file("--result-path", result_path)
    if storage.is_url(output_dir):
        check_directory("--output-dir", output_dir)


def _as_flow(settings: LeaderboardSettings, args: argparse.Namespace) -> Leaderboard:
    import asyncio

    from judgebench_flows.data.dataset import check_repo_url, public_url
    from judgebench_flows.runtime.prefect_server import pointed_at, use_prefect_server

    check_repo_url(settings.repo_url)  # bad input is reported before a server boots
    if public_url(settings.repo_url) != settings.repo_url:  # flow parameters are stored by Prefect
        raise UserError(
            "--flow: a --repo-url with credentials would be stored as a flow parameter; use git's credential helper instead"
        )
    from judgebench_flows.flows.leaderboard_flow import leaderboard_flow

    with pointed_at(use_prefect_server()):
        return asyncio.run(
            leaderboard_flow(
                **({"benchmark": settings.benchmark} if settings.benchmark != "judgebench" else {}),
                repo_url=settings.repo_url,
                ref=settings.ref,
                cache_dir=settings.cache_dir,
                db_url=settings.db_url,
                result_path=args.result_path,
                output_dir=args.output_dir,
                seed=settings.seed,
                bootstrap_resamples=settings.bootstrap_resamples,
                prices=settings.prices,
            )
        )


def command_rescore(args: argparse.Namespace) -> int:
    from judgebench_flows.judging.rescore import rescore_file
    from judgebench_flows.views.summaries import print_rescore

    if args.result_path:
        check_outputs(args.result_path, ".")
    result = rescore_file(
        args.file,
        args.judge_type,
        judge_template=args.judge_template,
        templates_dir=args.templates_dir,
        seed=args.seed,
        output=args.output,
    )
    print_rescore(result)
    if args.result_path:
        from judgebench_flows.scoring.results import write_json

        print(f"results: {write_json(args.result_path, result)}")
    return 0


COMMANDS = {"leaderboard": command_leaderboard, "rescore": command_rescore}

__all__ = ["add_parsers", "COMMANDS", "command_leaderboard", "command_rescore"]

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

    board = add_command(sub, "leaderboard", "published JudgeBench judges and our runs in one table (no API key)")
    add_model_options(board, LeaderboardSettings, skip={"require_published"})
    board.add_argument(
        "--result-path",
        "--result_path",
        dest="result_path",
        default="results/leaderboard.json",
        help="where the leaderboard JSON is written (default results/leaderboard.json)",
    )
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


def command_leaderboard(args: argparse.Namespace) -> int:
    from judgebench_flows.cli.options import given_options
    from judgebench_flows.core.config import results_db_url, validated
    from judgebench_flows.scoring.leaderboard import LeaderboardSettings, build_leaderboard
    from judgebench_flows.scoring.leaderboard_report import write_outputs
    from judgebench_flows.views import tables

    options = given_options(args, LeaderboardSettings) | {"db_url": results_db_url(args.db_url)}
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
        print(tables.to_csv(tables.LEADERBOARD_FIELDS, tables.leaderboard_rows(board)), end="")
    else:
        tables.print_leaderboard(board)
        for name, path in (board.outputs or {}).items():
            print(f"{name}: {tables.short_path(path)}")
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

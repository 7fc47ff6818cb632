"""`judgebench dashboard`: the team's morning page (views/dashboard.py) from the results database, as one
HTML file. Needs no Prefect server and no key; kept apart from cli/main.py, which only registers it."""

from __future__ import annotations

import argparse

DEFAULT_OUTPUT = "results/dashboard.html"


def _nights(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: give a whole number of nights, at least 1")
    return value


def _name(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("give a name, not an empty string")
    return text.strip()


def add_parsers(sub: argparse._SubParsersAction) -> None:
    from judgebench_flows.cli.options import add_command

    page = add_command(sub, "dashboard", "write one HTML page of every configuration's nights (no Prefect, no key)")
    page.add_argument(
        "--db-url",
        default=None,
        help="results database (default: $JUDGEBENCH_DB_URL, else sqlite:///results/judgebench.db)",
    )
    page.add_argument("--nights", type=_nights, default=30, help="the newest N nights (default 30)")
    page.add_argument(
        "--benchmark", type=_name, default=None, help="only this benchmark's runs (a run naming none is judgebench's)"
    )
    page.add_argument(
        "--judge-type", "--judge_type", dest="judge_type", type=_name, default=None, help="only this judge type"
    )
    page.add_argument("--model", type=_name, default=None, help="only this judge model")
    page.add_argument(
        "--output",
        default=DEFAULT_OUTPUT,
        help=f"where to write it: a path or an object-store URL (default {DEFAULT_OUTPUT})",
    )


def command_dashboard(args: argparse.Namespace) -> int:
    from judgebench_flows.core.config import results_db_url
    from judgebench_flows.core.errors import UserError
    from judgebench_flows.data import db
    from judgebench_flows.data.outputs import check_file
    from judgebench_flows.views.dashboard import DashboardFilter, write_dashboard

    check_file("--output", args.output)  # before reading anything: a folder that cannot be written is one line
    url = results_db_url(args.db_url)
    engine = db.open_existing(url)  # reading creates nothing
    if engine is None:
        raise UserError(f"--db-url: no JudgeBench runs in {db.safe_url(url)}")
    db.mark_crashed(engine)
    filters = DashboardFilter(
        nights=args.nights, benchmark=args.benchmark, judge_type=args.judge_type, model=args.model
    )
    print(write_dashboard(args.output, engine, filters))
    return 0


COMMANDS = {"dashboard": command_dashboard}

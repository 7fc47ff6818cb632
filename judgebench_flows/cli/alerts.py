"""`judgebench alerts reset CONFIG`: after a person looked at a flagged change, the configuration's
sequential test starts afresh (its reference is the nights from now on; docs/alerts.md). CONFIG is a
configuration key or a run id (a unique prefix of either), as `judgebench history` shows them."""

from __future__ import annotations

import argparse


def add_parsers(sub: argparse._SubParsersAction) -> None:
    from judgebench_flows.cli.options import OneLineParser, add_command

    alerts = add_command(sub, "alerts", "the sequential regression alerts of a configuration")
    actions = alerts.add_subparsers(
        dest="alerts_action", required=True, parser_class=OneLineParser, metavar="ACTION", help="reset"
    )
    text = "clear a configuration's flag and start its reference afresh"
    reset = actions.add_parser("reset", help=text, description=text[0].upper() + text[1:] + ".", allow_abbrev=False)
    reset.add_argument("config", metavar="CONFIG", help="a configuration key or a run id (a unique prefix of either)")
    reset.add_argument(
        "--db-url",
        default=None,
        help="results database (default: $JUDGEBENCH_DB_URL, else sqlite:///results/judgebench.db)",
    )


def command_alerts(args: argparse.Namespace) -> int:
    from judgebench_flows.core.config import results_db_url
    from judgebench_flows.core.errors import UserError
    from judgebench_flows.data import db
    from judgebench_flows.data.alert_events import FLAGGED, RESET, add_event, config_keys_like, latest_event

    url = results_db_url(args.db_url)
    engine = db.open_existing(url)
    if engine is None:
        raise UserError(f"alerts reset: no results database at {db.safe_url(url)}")
    keys = config_keys_like(engine, args.config)
    if not keys:
        run = db.get_run(engine, args.config)
        keys = [run.config_key] if run is not None else []
    if len(keys) != 1:
        said = "matches more than one configuration" if keys else "is neither a configuration key nor a run id"
        raise UserError(f"alerts reset: '{args.config}' {said} in {db.safe_url(url)}")
    last = latest_event(engine, keys[0])
    add_event(engine, keys[0], RESET)
    was = "its flag cleared, " if last and last.kind == FLAGGED else ""
    print(f"configuration {keys[0][:12]}: {was}the sequential test's reference starts with its next run")
    return 0


COMMANDS = {"alerts": command_alerts}

__all__ = ["COMMANDS", "add_parsers", "command_alerts"]

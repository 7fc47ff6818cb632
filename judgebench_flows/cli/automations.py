"""`judgebench automations install|remove`: the Prefect automations of deployments/automations.py.

Kept apart from main.py, which only registers it. Automations live on a Prefect server that outlives
this command and runs the deployments, so it needs PREFECT_API_URL naming that server (not the local
background server a `judgebench run` falls back to); an unreachable server is exit 5, as for a run that
loses its server.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

import httpx

from judgebench_flows.core.errors import EXIT_SERVER, UserError
from judgebench_flows.core.text import for_terminal


def add_parsers(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "automations",
        help="install or remove the Prefect automations: alerts, crashed deployment runs rescheduled",
        description="Automations on the Prefect server in PREFECT_API_URL (docs/operations.md).",
    )
    actions = parser.add_subparsers(
        dest="automations_command", required=True, metavar="ACTION", help="install or remove"
    )
    install = actions.add_parser(
        "install",
        help="create or update the automations (idempotent)",
        description="Create or update: an alert on judgebench.run.regressed / judgebench.run.failed, "
        "silent deployment runs marked Crashed, crashed deployment runs rescheduled (at most twice).",
    )
    target = install.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--webhook-url", help="POST alerts as JSON {subject, body} to this URL (saves a custom-webhook block)"
    )
    target.add_argument(
        "--notify-block",
        help="send alerts through this saved Prefect notification block (TYPE/NAME, e.g. slack-webhook/team)",
    )
    install.add_argument("--dry-run", action="store_true", help="say what would be created or updated; change nothing")
    install.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="with --dry-run: a short summary (text) or every automation as Prefect's JSON",
    )
    actions.add_parser(
        "remove",
        help="delete the automations (and the webhook block) that install created",
        description="Delete the automations (and the webhook block) that install created.",
    )


def command_automations(args: argparse.Namespace) -> int:
    if not args.automations_command == "install" or not args.dry_run:
        _need_a_server()
    try:
        return _commands()[args.automations_command](args)
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        from prefect.settings import PREFECT_API_URL

        print(
            for_terminal(f"error: cannot reach the Prefect server at {PREFECT_API_URL.value()}: {exc}"), file=sys.stderr
        )
        return EXIT_SERVER


def _need_a_server() -> None:
    from prefect.settings import PREFECT_API_URL

    if not PREFECT_API_URL.value():
        raise UserError("automations live on a Prefect server: set PREFECT_API_URL (e.g. http://127.0.0.1:4200/api)")


def _install(args: argparse.Namespace) -> int:
    from judgebench_flows.deployments import automations

    if args.dry_run:
        if args.webhook_url:
            automations.webhook_block(args.webhook_url)  # the same checks as a real install
        bodies = [a.model_dump(mode="json", exclude={"id"}, exclude_none=True) for a in automations.planned()]
        if args.format == "json":
            print(json.dumps(bodies, indent=2, sort_keys=True))
            return 0
        print(f"would send alerts through {args.notify_block or 'a custom-webhook block for ' + args.webhook_url}")
        print(f"would create or update {len(bodies)} automations (--format json: each in full):")
        for body in bodies:
            print(f"  {body['name']}: {body.get('description', '').removeprefix('JudgeBench: ')}")
        return 0
    for name, done in automations.install(args.webhook_url, args.notify_block):
        print(f"{done}: {name}")
    return 0


def _remove(args: argparse.Namespace) -> int:
    from judgebench_flows.deployments import automations

    removed = automations.remove()
    print("removed: " + ", ".join(removed) if removed else "nothing to remove")
    return 0


def _commands() -> dict[str, Callable[[argparse.Namespace], int]]:
    return {"install": _install, "remove": _remove}


COMMANDS = {"automations": command_automations}

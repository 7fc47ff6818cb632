"""`judgebench retention`: judgment rows and call-cache answers older than --keep-days deleted, runs and
metrics kept (the retention deployment runs the same on a schedule). Needs no Prefect server."""

from __future__ import annotations

import argparse


def add_parsers(sub: argparse._SubParsersAction) -> None:
    from judgebench_flows.cli.options import add_command, add_model_options
    from judgebench_flows.core.retention import RetentionSettings

    command = add_command(
        sub, "retention", "delete judgment rows and call-cache answers older than --keep-days; keep runs and metrics"
    )
    add_model_options(command, RetentionSettings)


def command_retention(args: argparse.Namespace) -> int:
    from judgebench_flows.cli.options import given_options
    from judgebench_flows.core.config import validated
    from judgebench_flows.core.retention import RetentionSettings
    from judgebench_flows.data.retention import apply, size_text

    settings = validated(RetentionSettings, given_options(args, RetentionSettings))
    pruned, before, after = apply(settings)
    from judgebench_flows.core.text import wrapped

    print(wrapped(f"{pruned.line()}; database {size_text(before)} -> {size_text(after)}"))
    return 0


COMMANDS = {"retention": command_retention}

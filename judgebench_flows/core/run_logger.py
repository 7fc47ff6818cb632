"""The logger a line goes to: the Prefect run's, when there is one (the line is in the run's logs in the
UI and on the console), else a module's own (code called outside a flow run: a test, a library caller)."""

from __future__ import annotations

import logging


def run_logger(fallback: str) -> logging.Logger | logging.LoggerAdapter:
    """The current Prefect run's logger, or the standard logger named `fallback` outside a run.

    Args:
        fallback: the logger's name outside a run, usually the caller's `__name__`.

    Returns:
        Prefect's run logger adapter inside a flow or task run, else `logging.getLogger(fallback)`.

    Examples:
        >>> run_logger("judgebench_flows.example").name
        'judgebench_flows.example'
    """
    from prefect import get_run_logger
    from prefect.exceptions import MissingContextError

    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger(fallback)

"""A quiet terminal through Prefect's public logging settings: after a run a user sees our summary (or
our one error line) and nothing else.

`quiet_prefect` points PREFECT_LOGGING_SETTINGS_PATH at runtime/logging.yml (Prefect's default configuration
plus the changes listed at its top) before Prefect is imported, and sets Prefect's level to WARNING.
Prefect's background workers write to `judgebench-background.log` in PREFECT_HOME, where the runs'
warnings and errors are kept too. `--verbose` (or the user's own logging settings) leaves Prefect alone.
Nothing here imports Prefect.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from judgebench_flows.core.errors import UserError

LOG_NAME = "judgebench-background.log"
LOGGING_CONFIG = Path(__file__).with_name("logging.yml")
# httpx's transport errors: Prefect's client could not reach its API (the server stopped or restarts).
API_UNREACHABLE = ("ConnectError", "ConnectTimeout", "ReadTimeout", "ReadError", "RemoteProtocolError")


def quiet_prefect(verbose: bool) -> None:
    """Prefect logs warnings and errors only, through runtime/logging.yml, unless --verbose (or the user set
    Prefect's logging variables). Call before Prefect is imported."""
    if verbose:
        return
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_LOGGING_LOG_PRINTS", "false")
    os.environ.setdefault("PREFECT_LOGGING_SETTINGS_PATH", str(LOGGING_CONFIG))
    # A log batch the API refused is reported by Prefect's shipper only when the standard library's
    # logging reports handler errors (its own convention): the batch's warnings are in the file above.
    logging.raiseExceptions = False


def _user_error_names() -> set[str]:
    names, pending = set(), [UserError]
    while pending:
        cls = pending.pop()
        names.add(cls.__name__)
        pending.extend(cls.__subclasses__())
    return names


def api_unreachable(exc: BaseException | None) -> bool:
    """Whether `exc` or what caused it is httpx failing to reach a server. The endpoint's client (openai)
    wraps such errors in its own classes, so here they are Prefect's client talking to its API."""
    seen = 0
    while exc is not None and seen < 10:
        if type(exc).__module__.startswith(("httpx", "httpcore")) and type(exc).__name__ in API_UNREACHABLE:
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


class HideRunErrorsReportedElsewhere(logging.Filter):
    """Drop Prefect's console records about a run failure that `main` reports as one line.

    Prefect logs the failure (with a traceback) before `main` prints the same error as one line: for bad
    input that is noise which buries the line that tells the user what to fix; for a Prefect server that
    stopped (its API unreachable), pages of tracebacks above the line that says how to resume; for Ctrl-C
    or SIGTERM, Prefect's "Crash detected" records above the line that says the run was stopped. The filter
    sits on the console handler only (runtime/logging.yml), so the records still reach the Prefect API and
    the background log file; `--verbose` keeps them.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR or not record.name.startswith(("prefect.flow_runs", "prefect.task_runs")):
            return True
        if record.exc_info and isinstance(record.exc_info[1], UserError):
            return False
        if record.exc_info and api_unreachable(record.exc_info[1]):
            return False
        message = record.getMessage()
        if "cancelled by the runtime environment" in message:  # Ctrl-C or SIGTERM: `main` says so in one line
            return False
        # A shard with unparseable verdicts or failed calls is expected and reported in the results.
        names = _user_error_names() | {"ShardIncomplete", *API_UNREACHABLE}
        return not any(f"{name}:" in message or f"{name}(" in message for name in names)


__all__ = ["LOGGING_CONFIG", "LOG_NAME", "HideRunErrorsReportedElsewhere", "api_unreachable", "quiet_prefect"]

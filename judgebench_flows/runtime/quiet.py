"""A quiet terminal through Prefect's public logging settings: after a run a user sees our summary (or
our one error line) and nothing else.

`quiet_prefect` points PREFECT_LOGGING_SETTINGS_PATH at runtime/logging.yml (Prefect's default configuration
plus the changes listed at its top) before Prefect is imported, and sets Prefect's level to WARNING.
Prefect's background workers write to `judgebench-background.log` in PREFECT_HOME, where the runs'
warnings and errors are kept too. `--verbose` (or the user's own logging settings) leaves Prefect alone.
Nothing here imports Prefect.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from judgebench_flows.core.errors import UserError

LOG_NAME = "judgebench-background.log"
LOGGING_CONFIG = Path(__file__).with_name("logging.yml")
# The loggers of a run's records: its flow's and tasks', and Prefect's engine, whose logger a flow run
# uses until its own is set up (a SIGTERM while Prefect starts the flow run, its first pairs already
# judged by the head start, is reported from there).
RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs", "prefect.engine")
# Prefect's crash messages for a run stopped by Ctrl-C or SIGTERM (prefect.states.exception_to_crashed_state).
STOPPED_BY_SIGNAL = (
    "cancelled by the runtime environment",
    "aborted by a termination signal",
    "aborted by an interrupt signal",
)
# httpx's transport errors: Prefect's client could not reach its API (the server stopped or restarts).
API_UNREACHABLE = ("ConnectError", "ConnectTimeout", "ReadTimeout", "ReadError", "RemoteProtocolError")


# What `quiet_prefect` sets, unless the user set it: Prefect's public logging settings.
QUIET_ENV = {
    "PREFECT_LOGGING_LEVEL": "WARNING",
    "PREFECT_LOGGING_LOG_PRINTS": "false",
    "PREFECT_LOGGING_SETTINGS_PATH": str(LOGGING_CONFIG),
}
# The loggers Prefect 3.9's logging.yml (and runtime/logging.yml) sets from PREFECT_LOGGING_LEVEL; the
# others under `prefect` (flow_runs, task_runs, ...) are NOTSET there and follow `prefect`.
LEVEL_LOGGERS = ("prefect", "prefect.extra", "prefect.client", "prefect.infrastructure")


def quiet_prefect(verbose: bool) -> None:
    """Prefect logs warnings and errors only, through runtime/logging.yml, unless --verbose (or the user set
    Prefect's logging variables). Call before Prefect is imported. For the command: a process per run, so
    nothing is restored (`evaluate()` uses `quiet_while`)."""
    if verbose:
        return
    for name, value in QUIET_ENV.items():
        os.environ.setdefault(name, value)
    # A log batch the API refused is reported by Prefect's shipper only when the standard library's
    # logging reports handler errors (its own convention): the batch's warnings are in the file above.
    logging.raiseExceptions = False


class _Quiet:
    """What `quiet_while` changed, to put back: the variables it added, `logging.raiseExceptions`, the levels
    it set on Prefect's loggers and Prefect's process-wide settings (read once, at its import)."""

    def __init__(self) -> None:
        self.added = [name for name in QUIET_ENV if name not in os.environ]
        self.raise_exceptions = logging.raiseExceptions
        self.configured = _prefect_logging_config() is not None  # Prefect set its loggers up before this run
        self.levels: dict[str, int | str] = (
            {name: logging.getLogger(name).level for name in LEVEL_LOGGERS} if self.configured else {}
        )
        context = sys.modules.get("prefect.context")
        self.settings = getattr(context, "GLOBAL_SETTINGS_CONTEXT", None)

    def enter(self) -> None:
        quiet_prefect(verbose=False)
        if self.settings is not None:  # Prefect imported already: its settings were read before these variables
            _refresh_prefect_settings()
        if self.configured and "PREFECT_LOGGING_LEVEL" in self.added:  # its loggers too: set once per process
            for name in LEVEL_LOGGERS:
                logging.getLogger(name).setLevel(logging.WARNING)

    def exit(self) -> None:
        set_up_here = not self.configured and _prefect_logging_config() is not None
        used = _prefect_settings_path() if set_up_here else None  # the file its setup read in the run
        for name in self.added:
            os.environ.pop(name, None)
        logging.raiseExceptions = self.raise_exceptions
        if self.settings is not None:
            import prefect.context  # imported already: its settings were saved from it

            prefect.context.GLOBAL_SETTINGS_CONTEXT = self.settings
        elif "prefect.context" in sys.modules:  # imported during the run, with the quiet variables: read again
            _refresh_prefect_settings()
        # The levels as before the run; set up in it: as its file says under the caller's settings.
        levels = self.levels if self.configured else _prefect_levels(used) if used is not None else {}
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


_depth = 0
_saved: _Quiet | None = None
_lock = threading.Lock()


@contextlib.contextmanager
def quiet_while(verbose: bool) -> Iterator[None]:
    """`quiet_prefect` for one `evaluate()` call: on leaving, the process is as it was, so a notebook's
    later `evaluate(verbose=True)` and the user's own Prefect flows log as they would have.

    Prefect reads its settings and sets its loggers' levels once per process (at its import, often inside
    the first run): leaving restores those levels and settings too, not only the variables. Runs that
    overlap (`evaluate_async`) share one quiet spell, put back when the last one ends.
    """
    global _depth, _saved
    if verbose:
        yield
        return
    with _lock:
        if _depth == 0:
            _saved = _Quiet()
            _saved.enter()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _saved is not None:
                _saved.exit()
                _saved = None


def _prefect_logging_config() -> dict[str, Any] | None:
    """The logging configuration Prefect set up in this process, None before it did (or was imported)."""
    configuration = sys.modules.get("prefect.logging.configuration")
    return getattr(configuration, "PROCESS_LOGGING_CONFIG", None) or None


def _refresh_prefect_settings() -> None:
    from prefect.context import refresh_global_settings_context

    refresh_global_settings_context()


def _prefect_settings_path() -> Path:
    """The logging configuration file Prefect's setup reads under the current settings (setup_logging's
    choice: the setting's file if it exists, else Prefect's own)."""
    from prefect.logging.configuration import DEFAULT_LOGGING_SETTINGS_PATH
    from prefect.settings import PREFECT_LOGGING_SETTINGS_PATH

    path = PREFECT_LOGGING_SETTINGS_PATH.value()
    return path if path.exists() else DEFAULT_LOGGING_SETTINGS_PATH


def _prefect_levels(path: Path) -> dict[str, int | str]:
    """The levels Prefect's setup gives the loggers of the file at `path` under the current settings
    (PREFECT_LOGGING_LEVEL, the PREFECT_LOGGING_LOGGERS_* overrides), as at its import."""
    from prefect.logging.configuration import load_logging_config

    config = load_logging_config(path)
    loggers = config.get("loggers", {})
    return {name: logger["level"] for name, logger in loggers.items() if logger.get("level") is not None}


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
        if record.levelno < logging.ERROR or not record.name.startswith(RUN_LOGGERS):
            return True
        if record.exc_info and isinstance(record.exc_info[1], UserError):
            return False
        if record.exc_info and api_unreachable(record.exc_info[1]):
            return False
        message = record.getMessage()
        if any(stopped in message for stopped in STOPPED_BY_SIGNAL):  # Ctrl-C or SIGTERM: `main` says so in one line
            return False
        # A shard with unparseable verdicts or failed calls is expected and reported in the results.
        names = _user_error_names() | {"ShardIncomplete", *API_UNREACHABLE}
        return not any(f"{name}:" in message or f"{name}(" in message for name in names)


__all__ = [
    "LOGGING_CONFIG",
    "LOG_NAME",
    "HideRunErrorsReportedElsewhere",
    "api_unreachable",
    "quiet_prefect",
    "quiet_while",
]

"""The results database away (restarting, stopped, unreachable): waited for, within a bound, like the
Prefect server (cli/server_watch).

A read or write that finds the database gone waits and tries again; the first one says so in one line on
stderr, and the first one that gets through after says the database is back. The bound is one for the
whole outage, counted from its first failure: the run's `--db-lost-timeout` (default
$JUDGEBENCH_DB_LOST_TIMEOUT, else 300 s). The bound belongs to the run that waits, not to the process:
`run_wait` sets it for the run's context (its tasks and the threads they start with `asyncio.to_thread`)
and resets it when the run ends, so the next run in the process (another `evaluate()`, a night's next
cell) waits by its own setting. Past it every read or write raises `DatabaseLost` at once: the run ends with one line and
exit 5, the answers it received kept in the call cache's journal (`data.journal`), and the same command
resumes it.

"Gone" means the connection failed or was cut (psycopg's OperationalError or InterfaceError, SQLAlchemy's
disconnect), not a deadlock or a serialization failure (tried again at once, `engines.with_retries`), nor
SQLite's "database is locked" (its busy timeout), nor a full disk (`PathNotWritable`, exit 8).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from judgebench_flows.core.errors import InfrastructureLost

LOST_TIMEOUT_ENV = "JUDGEBENCH_DB_LOST_TIMEOUT"
DEFAULT_LOST_TIMEOUT = 300.0
RETRY_SECONDS = (0.25, 0.5, 1.0, 2.0)  # between tries while the database is away, then every 2 s
# psycopg's classes of a failed transaction, not a lost connection: tried again at once.
ROLLBACKS = ("TransactionRollback", "DeadlockDetected", "SerializationFailure")

T = TypeVar("T")

# The running run's --db-lost-timeout (None: none given, the environment's bound); see `run_wait`.
_RUN_TIMEOUT: contextvars.ContextVar[float | None] = contextvars.ContextVar("db_lost_timeout", default=None)


class DatabaseLost(InfrastructureLost):
    """The results database did not answer within `--db-lost-timeout`: exit 5, the same command resumes."""


def lost_timeout() -> float:
    try:
        return max(0.0, float(os.environ.get(LOST_TIMEOUT_ENV, DEFAULT_LOST_TIMEOUT)))
    except ValueError:
        return DEFAULT_LOST_TIMEOUT


@contextlib.contextmanager
def run_wait(seconds: float | None) -> Iterator[None]:
    """The bound of a database outage for the run within this block (`--db-lost-timeout`; None: the
    environment's), reset as the block ends: no run sets it for the next."""
    token = _RUN_TIMEOUT.set(seconds)
    try:
        yield
    finally:
        _RUN_TIMEOUT.reset(token)


def connection_lost(exc: BaseException) -> bool:
    """Whether `exc` says the database cannot be reached now (see the module docstring)."""
    if not isinstance(exc, DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    if not isinstance(exc, OperationalError | InterfaceError):
        return False
    original = exc.orig
    module = type(original).__module__
    if module.startswith("sqlite3"):
        return "unable to open database file" in str(original)
    return not any(cls.__name__ in ROLLBACKS for cls in type(original).__mro__)


class Outage:
    """One process's view of the database being away (`wait` while it is, `over` once it answers); how
    long to wait is the waiting run's (`run_wait`)."""

    def __init__(self) -> None:
        self.since: float | None = None
        self.where = "the results database"
        self._lock = threading.Lock()

    @staticmethod
    def seconds() -> float:
        """The bound of the run that waits: its --db-lost-timeout, else the environment's."""
        timeout = _RUN_TIMEOUT.get()
        return timeout if timeout is not None else lost_timeout()

    def note(self, exc: BaseException, where: str) -> float:
        """A failure: the outage starts (one line) or goes on; returns its age in seconds."""
        with self._lock:
            now = time.monotonic()
            if self.since is None:
                self.since, self.where = now, where
                reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()
                say(
                    f"waiting: {where} is not answering ({reason[0][:200] if reason else type(exc).__name__}); "
                    f"waiting up to {self.seconds():g} s for it (--db-lost-timeout)"
                )
            return now - self.since

    def wait(self, exc: BaseException, where: str, attempt: int) -> None:
        """Sleep before trying again, or raise `DatabaseLost` when the outage has lasted its bound."""
        age = self.note(exc, where)
        if age >= self.seconds():
            raise DatabaseLost(
                f"{self.where} did not answer for {self.seconds():g} s (--db-lost-timeout); the answers received "
                "are kept in the call cache and its journal under --cache-dir"
            ) from None
        time.sleep(min(RETRY_SECONDS[min(attempt, len(RETRY_SECONDS) - 1)], max(0.0, self.seconds() - age)))

    def over(self) -> None:
        """The database answered: an outage in progress ends (one line)."""
        if self.since is None:
            return
        with self._lock:
            if self.since is None:
                return
            lasted, self.since = time.monotonic() - self.since, None
        say(f"{self.where} is back after {lasted:.0f} s; the run goes on")


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


OUTAGE = Outage()


def patiently(operation: Callable[[], T], where: str) -> T:
    """`operation`, tried again while the database is away (within the outage's bound)."""
    attempt = 0
    while True:
        try:
            result = operation()
        except DBAPIError as exc:
            if not connection_lost(exc):
                raise
            OUTAGE.wait(exc, where, attempt)
            attempt += 1
            continue
        OUTAGE.over()
        return result


__all__ = ["OUTAGE", "DatabaseLost", "Outage", "connection_lost", "lost_timeout", "patiently", "run_wait"]

"""One run of a configuration at a time, per results database: a lock row that its run keeps alive.

Two identical runs started at once (two operators, a schedule and a manual run) would each pay for every
call the other is paying for: the call cache only answers what is already answered. So a run takes the
configuration's row in `run_locks` before it judges; a second one finds it held, says so once, waits, and
judges after it, when the first run's answers are in the call cache. The row lives in the results
database, so it holds across processes and machines, on SQLite and PostgreSQL alike.

A holder renews its row every `RENEW_SECONDS`; a row not renewed for `HOLD_SECONDS` (its process died
with the machine, or hangs), or whose process on this host is gone, is taken over: a waiting run never
waits on a dead one for long.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from judgebench_flows.core.errors import InfrastructureLost, PathNotWritable
from judgebench_flows.data.engines import process_gone, with_retries
from judgebench_flows.data.schema import RunLockRow, table_of, utcnow

HOLD_SECONDS = 60.0  # a holder that has not renewed for this long is taken over
RENEW_SECONDS = HOLD_SECONDS / 4
POLL_SECONDS = 1.0  # how often a waiting run looks again


def _dead(row: sa.Row) -> bool:
    """The holder cannot finish: its lease ran out, or its process on this host is gone."""
    expires = row.expires if row.expires.tzinfo else row.expires.replace(tzinfo=utcnow().tzinfo)
    if expires < utcnow():
        return True
    return row.host == socket.gethostname() and process_gone(row.pid)


def try_hold(engine: Engine, config_key: str, run_id: str) -> sa.Row | None:
    """Take the configuration's row for `run_id`; None when taken, else the live holder's row."""
    table = table_of(RunLockRow)
    mine = {"run_id": run_id, "host": socket.gethostname(), "pid": os.getpid()}
    expires = utcnow() + timedelta(seconds=HOLD_SECONDS)
    try:
        with engine.begin() as connection:
            connection.execute(sa.insert(table).values(config_key=config_key, expires=expires, **mine))
        return None
    except IntegrityError:
        pass
    with engine.begin() as connection:
        holder = connection.execute(sa.select(table).where(table.c.config_key == config_key)).first()
        if holder is None:  # released meanwhile: try again from the start
            return try_hold(engine, config_key, run_id)
        if holder.run_id == run_id or not _dead(holder):
            return None if holder.run_id == run_id else holder
        taken = connection.execute(  # only if nobody took it over first
            sa.update(table)
            .where(table.c.config_key == config_key, table.c.run_id == holder.run_id)
            .values(expires=expires, **mine)
        )
    return None if taken.rowcount == 1 else try_hold(engine, config_key, run_id)


def renew(engine: Engine, config_key: str, run_id: str) -> None:
    table = table_of(RunLockRow)

    def write() -> None:
        with engine.begin() as connection:
            connection.execute(
                sa.update(table)
                .where(table.c.config_key == config_key, table.c.run_id == run_id)
                .values(expires=utcnow() + timedelta(seconds=HOLD_SECONDS))
            )

    with_retries(write, engine=engine)


def release(engine: Engine, config_key: str, run_id: str) -> None:
    table = table_of(RunLockRow)

    def write() -> None:
        with engine.begin() as connection:
            connection.execute(sa.delete(table).where(table.c.config_key == config_key, table.c.run_id == run_id))

    with_retries(write, engine=engine)


class ConfigurationLock:
    """Held by one run for as long as it judges (a thread renews it); `hold` waits for a holder to finish."""

    def __init__(self, engine: Engine, config_key: str, run_id: str) -> None:
        self.engine, self.config_key, self.run_id = engine, config_key, run_id
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, on_wait: Callable[[sa.Row], None]) -> list[str]:
        """Wait until this run holds the configuration; `on_wait` hears once of each run it waits for.
        Returns those runs' ids (none: it waited for nobody)."""
        waited: list[str] = []
        while (holder := try_hold(self.engine, self.config_key, self.run_id)) is not None:
            if holder.run_id not in waited:
                on_wait(holder)
                waited.append(holder.run_id)
            time.sleep(POLL_SECONDS)
        self._keep()
        return waited

    def try_hold(self) -> bool:
        """Hold the configuration if no live run holds it (True), without waiting."""
        if try_hold(self.engine, self.config_key, self.run_id) is not None:
            return False
        self._keep()
        return True

    def _keep(self) -> None:
        self._thread = threading.Thread(target=self._renew, name="judgebench-run-lock", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        while not self._stop.wait(RENEW_SECONDS):
            try:
                renew(self.engine, self.config_key, self.run_id)
            except Exception:  # the database is away a moment: the next round tries again
                continue

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            try:
                release(self.engine, self.config_key, self.run_id)
            except (InfrastructureLost, PathNotWritable):  # the database is gone or full: taken over after its lease
                pass


__all__ = ["HOLD_SECONDS", "ConfigurationLock", "release", "renew", "try_hold"]

"""Answers the call cache could not write yet, kept on local disk until the results database takes them.

An answer is paid for the moment it arrives; losing it means paying for it again. When a write to the
call cache fails (the database restarting, stopped, its disk full), the answers of that write are
appended to a journal: one JSON line per call-cache row, flushed and fsync'd before the write is reported
done, in `<cache dir>/call-journal/<hash of the database URL>/<run>-<pid>.jsonl`. The caller keeps them
in memory too and tries the database again; once it takes them the journal is removed. A process that
ends first leaves its journal behind, and the next run on the same database (same URL, same cache dir)
writes it into the call cache before it judges (`replay`).

A journal is held under an exclusive `flock` by the process writing it, so a run that replays journals
never takes one that is still being written. Rows keep every column the caller gave them (whatever
metadata the cache table has), dates as ISO text.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from pydantic import JsonValue

JOURNAL_FOLDER = "call-journal"

Row = dict[str, JsonValue | datetime]
"""A journaled row as read back: its table's columns as JSON values, its date columns as datetimes."""


def default_cache_dir() -> Path:
    """--cache-dir's default: $JUDGEBENCH_CACHE_DIR, else ~/.cache/judgebench-flows."""
    return Path(os.environ.get("JUDGEBENCH_CACHE_DIR") or Path.home() / ".cache" / "judgebench-flows")


def journal_dir(cache_dir: str | None, db_url: str) -> Path:
    """The journals of one results database (named by a hash of its URL, which holds no password here)."""
    base = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    return base / JOURNAL_FOLDER / hashlib.sha256(db_url.encode()).hexdigest()[:16]


def _text(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


class AnswerJournal:
    """One process's journal: `append` makes rows durable on local disk, `settle` removes the file once
    every row in it is in the database. Thread-safe (the cache calls it through `asyncio.to_thread`)."""

    def __init__(self, directory: Path, name: str) -> None:
        self.path = directory / f"{name}-{os.getpid()}.jsonl"
        self._fd: int | None = None
        self._lock = threading.Lock()

    @property
    def holds(self) -> bool:
        """Rows are in the journal that the database has not confirmed yet."""
        return self._fd is not None

    def append(self, rows: Sequence[Mapping[str, object]]) -> None:
        """Append `rows` and fsync: when this returns, they survive a crash of this process or machine.
        A write that fails (a full disk) leaves no torn line behind and raises `OSError`."""
        if not rows:
            return
        data = "".join(json.dumps({k: _text(v) for k, v in row.items()}, default=str) + "\n" for row in rows).encode()
        with self._lock:
            if self._fd is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                fcntl.flock(fd, fcntl.LOCK_EX)
                self._fd = fd
            start = os.lseek(self._fd, 0, os.SEEK_END)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(self._fd, view) :]
                os.fsync(self._fd)
            except OSError:
                os.ftruncate(self._fd, start)
                raise

    def settle(self) -> None:
        """Every journaled row is in the database: the journal goes."""
        with self._lock:
            if self._fd is None:
                return
            self.path.unlink(missing_ok=True)
            os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        """Stop writing; rows not yet in the database stay in the file for the next run."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def _rows_of(path: Path, table: sa.Table) -> list[Row]:
    """The journal's rows with the table's columns only, dates back as datetimes; a torn last line (the
    process died mid-write, before its fsync) is skipped."""
    dates = {c.name for c in table.columns if isinstance(getattr(c.type, "impl", c.type), sa.DateTime)}
    columns = {c.name for c in table.columns}
    rows: list[Row] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            raw = json.loads(line)
        except ValueError:
            continue
        if not isinstance(raw, dict) or "key" not in raw:
            continue
        row = {k: v for k, v in raw.items() if k in columns}
        for name in dates & row.keys():
            if isinstance(row[name], str):
                row[name] = datetime.fromisoformat(row[name])
        rows.append(row)
    return rows


def replay(directory: Path, table: sa.Table, write: Callable[[list[Row]], None]) -> int:
    """Write every journal left in `directory` (by processes that ended before the database took their
    answers) through `write`, then remove it; journals still held by a live process are left alone.
    Returns the rows written. A write that fails raises, and the journal stays for the next try."""
    if not directory.is_dir():
        return 0
    written = 0
    for path in sorted(directory.glob("*.jsonl")):
        try:
            handle = open(path, encoding="utf-8")  # noqa: SIM115 - closed below
        except FileNotFoundError:  # replayed by another run meanwhile
            continue
        with handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # a live process writes it
                continue
            if not path.exists():  # replayed and removed between our open and our lock
                continue
            rows = _rows_of(path, table)
            if rows:
                write(rows)
            path.unlink(missing_ok=True)
            written += len(rows)
    return written


__all__ = ["JOURNAL_FOLDER", "AnswerJournal", "default_cache_dir", "journal_dir", "replay"]

"""Opening the results database: one engine per URL per process (the last MAX_ENGINES used kept: an
older one is disposed, so a notebook that opens many databases does not hold them all), its schema migrated on open (Alembic,
`data/migrations`), the read-only ways to open it that leave no trace, writes retried through passing
trouble and a database that is away waited for (`outage`), and the runs whose process ended without
finishing them (crash detection).

SQLite by default (WAL mode with a busy timeout, so concurrent shards may write at once), PostgreSQL in
production; the same code path serves both. The tables are data/schema.py's; the reads and writes
data/queries.py's.
"""

from __future__ import annotations

import os
import socket
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote as url_quote

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, OperationalError, SQLAlchemyError
from sqlmodel import Session, select
from tenacity import Retrying, retry_if_exception, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from judgebench_flows.core.credentials import resolve as resolve_credentials
from judgebench_flows.core.errors import PathNotWritable, UserError
from judgebench_flows.data.outage import connection_lost, patiently
from judgebench_flows.data.schema import JudgmentRow, RunRow, table_of, utcnow

if TYPE_CHECKING:  # imported where a migration runs: most opens find the schema current and need none of it
    from alembic.config import Config as AlembicConfig

# The engines of the databases opened last, oldest first; one evicted beyond MAX_ENGINES is disposed (its
# pooled connections closed: a connection a run still holds goes on, and the next open makes a new engine).
MAX_ENGINES = 8
_engines: OrderedDict[str, Engine] = OrderedDict()
_engines_lock = threading.Lock()


def _kept(url: str, engine: Engine) -> Engine:
    """`engine` kept as the newest for `url` (lock held), the oldest disposed beyond MAX_ENGINES."""
    _engines[url] = engine
    _engines.move_to_end(url)
    while len(_engines) > MAX_ENGINES:
        _, oldest = _engines.popitem(last=False)
        oldest.dispose()
    return engine


def safe_url(url: str) -> str:
    """The URL with its password hidden, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparseable URL>"


def _parse_url(url: str) -> URL:
    """The URL with its stashed credentials put back; a string that is no database URL is bad input."""
    try:
        return make_url(resolve_credentials(url))
    except ArgumentError:
        raise UserError(f"--db-url '{url}' is not a database URL (e.g. sqlite:///results/judgebench.db)") from None


def _cannot_open(url: str, exc: BaseException) -> UserError:
    """The driver's first line of why, under the URL with its password hidden."""
    reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
    return UserError(f"--db-url {safe_url(url)}: cannot open the database: {reason}")


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


WRITE_ATTEMPTS = 8
WHERE = "the results database (--db-url)"
MIGRATIONS = Path(__file__).with_name("migrations")


def with_retries(write: Callable[[], None], patient: bool = True, engine: Engine | None = None) -> None:
    """Run a write, retrying with jittered backoff when the database says "try again".

    SQLite answers "database is locked" when its busy timeout runs out under many writers, and PostgreSQL
    may abort one of two transactions that lock the same rows (deadlock, serialization failure). Both
    are transient, and every write here is an idempotent upsert or update, so running it again is safe.
    A database that is away (its connection refused or cut) is waited for within `--db-lost-timeout`
    (`outage`), unless not `patient`: the call cache keeps what it could not write in its journal instead.
    A full disk is no passing trouble: `PathNotWritable` naming the database (exit 8).
    """
    retrying = Retrying(
        stop=stop_after_attempt(WRITE_ATTEMPTS),
        wait=wait_random_exponential(multiplier=0.05, max=2.0),
        retry=retry_if_exception(
            lambda exc: isinstance(exc, OperationalError) and not connection_lost(exc) and not disk_full(exc)
        ),
        reraise=True,
    )
    try:
        if not patient:
            retrying(write)
            return
        patiently(lambda: retrying(write), WHERE)
    except OperationalError as exc:
        if disk_full(exc):
            raise _full(engine, exc) from None
        raise


def disk_full(exc: BaseException) -> bool:
    """SQLite's "database or disk is full" (or the I/O error a full disk gives its journal), PostgreSQL's
    DiskFull (its server's disk)."""
    original = getattr(exc, "orig", None)
    text = str(original or exc)
    return (
        "database or disk is full" in text
        or "disk I/O error" in text
        or "No space left on device" in text
        or type(original).__name__ == "DiskFull"
    )


def _full(engine: Engine | None, exc: BaseException) -> PathNotWritable:
    """The error naming where the database lives: the SQLite file's folder, else the server's URL."""
    url = engine.url if engine is not None else None
    if url is not None and url.get_backend_name() == "sqlite" and url.database:
        where = str(Path(url.database).expanduser().resolve().parent)
    else:
        where = url.render_as_string(hide_password=True) if url is not None else "the results database"
    return PathNotWritable("--db-url", where, "database or disk is full")


def migrations_config() -> AlembicConfig:
    """Alembic's configuration for the results database: its migrations ship in `data/migrations`."""
    from alembic.config import Config as AlembicConfig

    config = AlembicConfig()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


# Alembic's `context` and `op` are module-level proxies: one migration at a time per process.
_migrations_lock = threading.Lock()


def _migrate_once(engine: Engine) -> None:
    from alembic import command as alembic_command

    config = migrations_config()
    with _migrations_lock, engine.begin() as connection:
        config.attributes["connection"] = connection
        alembic_command.upgrade(config, "head")


# The newest migration's revision (data/migrations/versions); tests/test_db.py holds it to Alembic's head.
SCHEMA_HEAD = "0009"
# Alembic's version table of the results database (data/migrations/env.py): its own, apart from Prefect's.
VERSION_TABLE = "judgebench_alembic_version"


def _at_head(engine: Engine) -> bool:
    """Whether the database says it is at SCHEMA_HEAD (False too when it has no version table yet)."""
    try:
        with engine.connect() as connection:
            said = connection.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()
    except SQLAlchemyError:
        return False
    return said == SCHEMA_HEAD


def _upgrade_schema(engine: Engine) -> None:
    """Bring the database to the newest schema through its Alembic migrations (`data/migrations`).

    Migrations only add, never drop or rewrite, so an old database keeps its rows. Several processes may
    open a new database at once (shards, a nightly matrix): the loser of the race ("table already exists",
    a duplicate version row; PostgreSQL runs the whole upgrade in one transaction) looks again and finds
    the schema in place.
    """
    if _at_head(engine):  # the common case: nothing to migrate, and Alembic (0.1-0.3 s to import) not loaded
        return
    Retrying(
        stop=stop_after_attempt(5),
        wait=wait_random_exponential(multiplier=0.1, max=1.0),
        retry=retry_if_exception_type(DBAPIError),
        reraise=True,
    )(_migrate_once, engine)


def open_database(url: str) -> Engine:
    """An engine for `url` with the schema migrated to the newest version; one per URL per process (of the
    last MAX_ENGINES opened)."""
    with _engines_lock:
        if url in _engines:
            return _kept(url, _engines[url])
        parsed = _parse_url(url)
        try:
            if parsed.get_backend_name() == "sqlite":
                if parsed.database and parsed.database != ":memory:":
                    Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
                engine = sa.create_engine(parsed, connect_args={"check_same_thread": False, "timeout": 30})
                sa.event.listen(engine, "connect", _sqlite_pragmas)
            else:
                engine = sa.create_engine(parsed, pool_pre_ping=True, pool_size=10, max_overflow=20)
            _upgrade_schema(engine)
        except (SQLAlchemyError, ModuleNotFoundError, OSError) as exc:
            raise _cannot_open(url, exc) from None
        return _kept(url, engine)


def open_existing(url: str) -> Engine | None:
    """For commands that only read (history, compare, report): never creates a database, a directory or
    a table. A database that is not there is an error; one without judgebench's tables gives None (no
    runs yet). An existing judgebench database gets the columns newer code reads, as `open_database`."""
    parsed = _parse_url(url)
    if parsed.get_backend_name() == "sqlite":
        path = Path(parsed.database or "").expanduser()
        if not parsed.database or parsed.database == ":memory:" or not path.is_file():
            raise UserError(f"--db-url {safe_url(url)}: no database at '{parsed.database or ''}'")
    with _engines_lock:
        engine = _engines.get(url)
    if engine is not None:
        return engine
    try:
        if parsed.get_backend_name() == "sqlite":
            probe = sa.create_engine(
                parsed, connect_args={"check_same_thread": False, "timeout": 30}, poolclass=sa.pool.NullPool
            )
        else:
            probe = sa.create_engine(parsed, poolclass=sa.pool.NullPool)
        with probe.connect() as connection:
            present = sa.inspect(connection).has_table(RunRow.__tablename__)
        probe.dispose()
    except (SQLAlchemyError, ModuleNotFoundError, OSError) as exc:
        raise _cannot_open(url, exc) from None
    return open_database(url) if present else None


def open_read_only(url: str) -> tuple[Engine | None, str | None]:
    """For a reader that must leave no trace (the leaderboard): never creates a file, a directory, a table
    or a column; SQLite is opened `mode=ro`. Returns the engine, or None and why there are no runs to read
    (no database there, or one without judgebench's tables). The caller disposes of the engine."""
    parsed = _parse_url(url)
    shown = safe_url(url)
    try:
        if parsed.get_backend_name() == "sqlite":
            path = Path(parsed.database or "").expanduser()
            if not parsed.database or parsed.database == ":memory:":
                return None, f"{shown} holds no saved runs"
            if not path.is_file():
                return None, f"no results database at {path}: no runs of ours yet"
            engine = sa.create_engine(
                f"sqlite:///file:{url_quote(str(path.resolve()))}?mode=ro&uri=true", poolclass=sa.pool.NullPool
            )
        else:
            engine = sa.create_engine(parsed, poolclass=sa.pool.NullPool)
        with engine.connect() as connection:
            tables = set(sa.inspect(connection).get_table_names())
    except (SQLAlchemyError, ModuleNotFoundError, OSError) as exc:
        raise _cannot_open(url, exc) from None
    if not {RunRow.__tablename__, JudgmentRow.__tablename__} <= tables:
        engine.dispose()
        return None, f"{shown} has no runs table: no runs of ours yet"
    return engine, None


def process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # PermissionError: alive, another user's
        return False
    return False


def mark_crashed(engine: Engine) -> list[str]:
    """Runs still 'running' whose process on this host is gone (killed, machine restarted) become
    'crashed'; returns their ids. A run on another host, or without a recorded process, is left alone:
    its process cannot be checked from here, and a live run must never be declared dead."""
    host = socket.gethostname()
    with Session(engine) as session:
        running = list(session.exec(select(RunRow).where(RunRow.status == "running", RunRow.host == host)))
    crashed = [run.run_id for run in running if run.pid is not None and process_gone(run.pid)]
    for run_id in crashed:

        def write(run_id: str = run_id) -> None:
            with engine.begin() as connection:
                table = table_of(RunRow)
                connection.execute(
                    sa.update(table)
                    .where(table.c.run_id == run_id, table.c.status == "running")
                    .values(status="crashed", message="its process ended without finishing the run (killed or crashed)")
                )

        with_retries(write, engine=engine)
    return crashed


def fail_this_process_runs(engine: Engine, message: str) -> None:
    """This process's runs still 'running' (or 'interrupted' by the cancellation that ended them) become
    'failed' with `message`: for a process whose Prefect server is gone, which `mark_crashed` would
    otherwise only call 'crashed' later, without the reason."""

    def write() -> None:
        with engine.begin() as connection:
            table = table_of(RunRow)
            connection.execute(
                sa.update(table)
                .where(
                    table.c.status.in_(("running", "interrupted")),
                    table.c.host == socket.gethostname(),
                    table.c.pid == os.getpid(),
                )
                .values(status="failed", finished=utcnow(), message=message[:500])
            )

    with_retries(write, engine=engine)


__all__ = [
    "MIGRATIONS",
    "WHERE",
    "WRITE_ATTEMPTS",
    "disk_full",
    "fail_this_process_runs",
    "mark_crashed",
    "migrations_config",
    "open_database",
    "open_existing",
    "open_read_only",
    "process_gone",
    "safe_url",
    "with_retries",
]

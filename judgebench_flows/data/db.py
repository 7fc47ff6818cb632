"""The results database: run history, judgments, metrics and the call cache, through SQLModel.

SQLite by default, PostgreSQL in production; the same code path serves both. Every write is an upsert on
a natural key, so a retried publish or a resumed run never duplicates rows, and concurrent shards may
write at once (SQLite in WAL mode with a busy timeout; PostgreSQL natively). The schema is created on
first use and upgraded through Alembic migrations (`data/migrations/versions`: a schema change is one
more migration there; they only add, so existing data is safe). Datetimes
are stored and returned as aware UTC on both backends.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import socket
import threading
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote as url_quote

import sqlalchemy as sa
from alembic import command as alembic_command
from alembic.config import Config as AlembicConfig
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, OperationalError, SQLAlchemyError
from sqlmodel import Field, Session, SQLModel, UniqueConstraint, col, select
from tenacity import Retrying, retry_if_exception, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from judgebench_flows.core.credentials import resolve as resolve_credentials
from judgebench_flows.core.errors import PathNotWritable, UserError
from judgebench_flows.core.records import FINISHED, JudgmentRecord
from judgebench_flows.data.outage import connection_lost, patiently


class OverallFigures(Protocol):
    """What a run's row keeps of its overall accuracy (results.json's `overall_accuracy`)."""

    @property
    def accuracy(self) -> float | None: ...
    @property
    def ci_low(self) -> float | None: ...
    @property
    def ci_high(self) -> float | None: ...


class BiasFigures(Protocol):
    """What a run's row keeps of its position bias (results.json's `consistency`)."""

    @property
    def consistency(self) -> float | None: ...
    @property
    def first_position_rate(self) -> float | None: ...


SCHEMA_VERSION = 1


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _as_utc(value: Any) -> Any:
    """Datetime columns are SQLModel's UTCDateTime, which refuses naive values: a naive datetime from a
    caller is taken to be UTC (as `utcnow()` and the flow produce), an aware one is converted."""
    if isinstance(value, datetime):
        return value.replace(tzinfo=timezone.utc) if value.utcoffset() is None else value.astimezone(timezone.utc)
    return value


class RunRow(SQLModel, table=True):
    __tablename__ = "runs"

    run_id: str = Field(primary_key=True)
    config_key: str = Field(index=True)
    judge_type: str
    model: str
    repo_url: str | None = None
    commit: str | None = None
    data_file: str | None = None
    flow_run_id: str | None = None
    # The outermost flow run the run belongs to (a night's, a deployment run's, or its own): a night's cells,
    # its retries and its reschedule after a crash share it, and reuse only answers paid under it
    # (`CacheReuse`). Added by migration 0005; older rows keep NULL.
    root_flow_run_id: str | None = Field(default=None, index=True)
    status: str = "running"  # running, completed, regressed, failed, crashed
    # Where a running run lives, so a run whose process died (kill -9, power loss) can be marked crashed.
    host: str | None = None
    pid: int | None = None
    message: str | None = None
    started: datetime = Field(default_factory=utcnow, index=True)  # history's order, retention's cutoff (0006)
    finished: datetime | None = None
    n_pairs: int | None = None
    overall_accuracy: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    config_json: str = "{}"
    results_json: str | None = None
    # Dollars the run paid (None: unpriced, or a run from before prices were kept) and how it was priced:
    # "<entry> read <date>", or "unpriced". Older rows keep NULL in both.
    cost_usd: float | None = None
    priced_as: str | None = None
    # Position bias (results.json's `consistency`): share of pairs whose two verdicts agree, and share of
    # sided verdicts for the response shown first. Added by migration 0002; older rows keep NULL.
    order_consistency: float | None = None
    first_position_rate: float | None = None
    # What the endpoint said about the model that answered (results.json's `provenance.served` in one
    # line) and, when it changed against the run's baseline, what (`drift.message`). Migration 0004.
    served_as: str | None = None
    drift: str | None = None


class JudgmentRow(SQLModel, table=True):
    __tablename__ = "judgments"
    __table_args__ = (
        UniqueConstraint("run_id", "pair_id", "order_index", name="uq_judgment"),
        # Every column `run_verdicts` reads: its read is index-only, never the rows' answers (migration 0008).
        sa.Index(
            "ix_judgments_verdicts",
            "run_id",
            "pair_id",
            "order_index",
            "source",
            "category",
            "label",
            "status",
            "decision_for_pair",
        ),
    )

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(index=True)
    pair_id: str
    # The order shown (0: A first, 1: B first) plus twice the epoch (`--epochs`): epoch e's orders are 2e
    # and 2e + 1, so one epoch's rows are what they always were and the unique key and the verdict index
    # hold every epoch without a schema change. `_ORDER` / `_EPOCH` read it back.
    order_index: int
    source: str
    category: str
    label: str
    status: str
    decision: str = ""
    decision_for_pair: str = ""
    response: str = ""
    error: str | None = None
    latency_s: float = 0.0
    calls: int = 0
    cached_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class MetricRow(SQLModel, table=True):
    __tablename__ = "metrics"
    __table_args__ = (UniqueConstraint("run_id", "scope", "name", name="uq_metric"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(index=True)
    scope: str  # overall, category, source
    name: str
    accuracy: float
    correct_count: int
    valid_samples: int
    total_samples: int
    ci_low: float | None = None
    ci_high: float | None = None


class CallCacheRow(SQLModel, table=True):
    __tablename__ = "call_cache"

    key: str = Field(primary_key=True, max_length=64)
    model: str
    response: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    created: datetime = Field(default_factory=utcnow, index=True)  # retention deletes by it (migration 0006)
    # The run that paid for the answer: a run's cost counts it even when the attempt that paid was lost
    # (a Dask worker that died after writing it) and the retry read it from here.
    paid_by: str | None = Field(default=None, max_length=32, index=True)


class BatchRow(SQLModel, table=True):
    """A provider batch this database's runs submitted (`calls/batch`), stored the moment it is created:
    a run killed, crashed or retried re-attaches to it instead of paying for its requests again."""

    __tablename__ = "provider_batches"

    batch_id: str = Field(primary_key=True)
    provider: str
    endpoint: str = Field(index=True)
    model: str
    # The custom ids of its requests (a hash of each request body), as a JSON list.
    custom_ids: str
    status: str = "open"  # "open" until its results were read, then "done"
    created: datetime = Field(default_factory=utcnow)


class RunLockRow(SQLModel, table=True):
    """Which run judges a configuration now (`data/run_lock`): one row per configuration key, held while
    its run is alive (renewed before `expires`), so a second identical run waits and then reads the first's
    answers from the call cache instead of paying for them again."""

    __tablename__ = "run_locks"

    config_key: str = Field(primary_key=True, max_length=64)
    run_id: str
    host: str
    pid: int
    expires: datetime


class NightSpendRow(SQLModel, table=True):
    """A pool night's budget across its cell runs on any worker (`data/night_budget`): the night's row
    (`cell` empty: `held` is the night's max_cost) and one row per cell, with what the cell's running
    attempt holds (its worst case, reserved before its first call) and what its finished attempts spent."""

    __tablename__ = "night_spend"

    night: str = Field(primary_key=True, max_length=64)
    cell: str = Field(primary_key=True, max_length=255)
    held: float = 0.0
    spent: float = 0.0
    updated: datetime = Field(default_factory=utcnow)


class SchemaMeta(SQLModel, table=True):
    __tablename__ = "judgebench_schema"

    id: int = Field(default=1, primary_key=True)
    version: int = SCHEMA_VERSION


_engines: dict[str, Engine] = {}
_engines_lock = threading.Lock()


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


def _table(model: type[SQLModel]) -> sa.Table:
    """The model's table: SQLModel sets `__table__` on table models but does not declare it for type checkers."""
    return model.__table__  # type: ignore[attr-defined]


WRITE_ATTEMPTS = 8
WHERE = "the results database (--db-url)"
MIGRATIONS = Path(__file__).with_name("migrations")


def _with_retries(write: Callable[[], None], patient: bool = True, engine: Engine | None = None) -> None:
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
    config = AlembicConfig()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


# Alembic's `context` and `op` are module-level proxies: one migration at a time per process.
_migrations_lock = threading.Lock()


def _migrate_once(engine: Engine) -> None:
    config = migrations_config()
    with _migrations_lock, engine.begin() as connection:
        config.attributes["connection"] = connection
        alembic_command.upgrade(config, "head")


def _upgrade_schema(engine: Engine) -> None:
    """Bring the database to the newest schema through its Alembic migrations (`data/migrations`).

    Migrations only add, never drop or rewrite, so an old database keeps its rows. Several processes may
    open a new database at once (shards, a nightly matrix): the loser of the race ("table already exists",
    a duplicate version row; PostgreSQL runs the whole upgrade in one transaction) looks again and finds
    the schema in place.
    """
    Retrying(
        stop=stop_after_attempt(5),
        wait=wait_random_exponential(multiplier=0.1, max=1.0),
        retry=retry_if_exception_type(DBAPIError),
        reraise=True,
    )(_migrate_once, engine)


def open_database(url: str) -> Engine:
    """An engine for `url` with the schema migrated to the newest version; one per URL per process."""
    with _engines_lock:
        if url in _engines:
            return _engines[url]
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
        _engines[url] = engine
        return engine


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


def latest_finished_runs(engine: Engine) -> list[sa.Row[Any]]:
    """The latest finished run of each configuration, newest first: the columns every schema version has
    (a database written by older code is read as it is, not upgraded)."""
    columns = (
        RunRow.run_id,
        RunRow.config_key,
        RunRow.judge_type,
        RunRow.model,
        RunRow.data_file,
        RunRow.status,
        RunRow.started,
        RunRow.finished,
        RunRow.results_json,
        RunRow.config_json,
    )
    # Which run is each configuration's latest from the small columns first; only those runs' results.json
    # are read (a year of nights is 18,000 runs: reading every results.json took seconds).
    newest = (
        sa.select(RunRow.run_id, RunRow.config_key)  # type: ignore[call-overload]
        .where(col(RunRow.status).in_(list(FINISHED)))
        .order_by(col(RunRow.started).desc(), col(RunRow.run_id).desc())
    )
    with engine.connect() as connection:
        latest: dict[str, str] = {}
        for run_id, config_key in connection.execute(newest):
            latest.setdefault(config_key, run_id)
        wanted, rows = list(latest.values()), {}
        for start in range(0, len(wanted), 500):
            query = sa.select(*columns).where(col(RunRow.run_id).in_(wanted[start : start + 500]))  # type: ignore[call-overload]
            rows.update({row.run_id: row for row in connection.execute(query)})
    return [rows[run_id] for run_id in wanted if run_id in rows]


def _upsert(
    engine: Engine, model: type[SQLModel], rows: list[dict[str, Any]], keys: list[str], patient: bool = True
) -> None:
    """Insert or update `rows` on their natural key in one statement per batch.

    Rows are de-duplicated on the key (last one wins: PostgreSQL refuses to update one row twice in a
    statement) and sorted by it, so concurrent writers lock overlapping rows in the same order.
    """
    if not rows:
        return
    unique = {tuple(row[k] for k in keys): {k: _as_utc(v) for k, v in row.items()} for row in rows}
    rows = [unique[key] for key in sorted(unique, key=lambda key: tuple(str(part) for part in key))]
    table = _table(model)
    dialect = engine.dialect.name
    insert: postgresql.Insert | sqlite.Insert
    if dialect == "postgresql":
        insert = postgresql.insert(table)
    elif dialect == "sqlite":
        insert = sqlite.insert(table)
    else:  # other databases: merge row by row

        def merge() -> None:
            with Session(engine) as session:
                for row in rows:
                    session.merge(model(**row))
                session.commit()

        _with_retries(merge, patient, engine)
        return
    columns = {name for row in rows for name in row}
    updates = {
        c.name: insert.excluded[c.name]
        for c in table.columns
        if c.name in columns and c.name not in keys and c.name != "id"
    }
    statement = (
        insert.on_conflict_do_update(index_elements=keys, set_=updates)
        if updates
        else insert.on_conflict_do_nothing(index_elements=keys)
    )

    def write() -> None:
        with engine.begin() as connection:
            connection.execute(statement, rows)

    _with_retries(write, patient, engine)


def save_run(engine: Engine, **fields: Any) -> None:
    _upsert(engine, RunRow, [fields], ["run_id"])


def update_run(engine: Engine, run_id: str, **fields: Any) -> None:
    values = {k: _as_utc(v) for k, v in fields.items()}

    def write() -> None:
        with engine.begin() as connection:
            table = _table(RunRow)
            connection.execute(sa.update(table).where(table.c.run_id == run_id).values(**values))

    _with_retries(write, engine=engine)


def start_run(engine: Engine, run_id: str, **fields: Any) -> None:
    """Record a run as "running" from its start, with where its process lives (`mark_crashed` checks it),
    so a run that dies is still visible in the history."""
    save_run(engine, run_id=run_id, status="running", host=socket.gethostname(), pid=os.getpid(), **fields)


def finish_run(
    engine: Engine,
    run_id: str,
    *,
    status: str,
    finished: datetime,
    overall: OverallFigures,
    message: str | None,
    results_json: str,
    cost_usd: float | None = None,
    priced_as: str | None = None,
    consistency: BiasFigures | None = None,
    served_as: str | None = None,
    drift: str | None = None,
) -> None:
    """A run's end as measured: completed, regressed, or failed (measured too little), with its accuracy,
    its position bias (results.json's `consistency`), what it cost, what the endpoint said it answered
    with and what of that changed against the baseline."""
    update_run(
        engine,
        run_id,
        status=status,
        finished=finished,
        overall_accuracy=overall.accuracy,
        ci_low=overall.ci_low,
        ci_high=overall.ci_high,
        message=message,
        results_json=results_json,
        cost_usd=cost_usd,
        priced_as=priced_as,
        order_consistency=consistency.consistency if consistency else None,
        first_position_rate=consistency.first_position_rate if consistency else None,
        served_as=served_as,
        drift=drift,
    )


def fail_run(engine: Engine, run_id: str, error: BaseException) -> None:
    """A run that ended with an error: a user error's own line (it names the input), else only the
    exception's type (an unexpected message may carry anything)."""
    message = str(error)[:500] if isinstance(error, UserError) else type(error).__name__
    update_run(engine, run_id, status="failed", finished=utcnow(), message=message)


def interrupt_run(engine: Engine, run_id: str, message: str) -> None:
    """A run stopped on request (Ctrl-C, SIGTERM, cancelled from the Prefect UI): not a failure of the
    run or its endpoint; the same command resumes it from the call cache."""
    update_run(engine, run_id, status="interrupted", finished=utcnow(), message=message[:500])


def save_judgments(engine: Engine, rows: Iterable[dict[str, Any]]) -> None:
    _upsert(engine, JudgmentRow, list(rows), ["run_id", "pair_id", "order_index"])


# The one mapping between a judgment record and its row: every field the two share is stored under its
# own name (`order` is the column `order_index`: ORDER is an SQL keyword), so a field added to both needs
# nothing more. Prompts, scores and the judge model stay in the JSONL, not in the database.
_COLUMN_OF = {"order": "order_index"}


@functools.cache
def _stored_fields() -> tuple[tuple[str, str], ...]:
    columns = set(JudgmentRow.model_fields)
    return tuple(
        (name, _COLUMN_OF.get(name, name))
        for name in JudgmentRecord.model_fields
        if _COLUMN_OF.get(name, name) in columns
    )


def judgment_rows(run_id: str, records: Iterable[JudgmentRecord]) -> list[dict[str, Any]]:
    """The rows `save_judgments` writes for these records (the epoch in `order_index`)."""
    fields = _stored_fields()
    rows = []
    for record in records:
        row = {"run_id": run_id, **{column: getattr(record, name) for name, column in fields}}
        row["order_index"] = record.order + 2 * record.epoch
        rows.append(row)
    return rows


def judgment_records(rows: Iterable[JudgmentRow]) -> list[JudgmentRecord]:
    """Records read back from rows (what the database keeps of them: no prompt, scores or judge model)."""
    fields = _stored_fields()
    records = []
    for row in rows:
        stored = {name: getattr(row, column) for name, column in fields}
        stored["order"], stored["epoch"] = divmod(row.order_index, 2)[::-1]
        records.append(JudgmentRecord(judge_model="", **stored))
    return records


def save_metrics(engine: Engine, rows: Iterable[MetricRow]) -> None:
    """Upsert on (run, scope, name): a retried publish rewrites its rows, never adds more."""
    _upsert(engine, MetricRow, [row.model_dump(exclude={"id"}) for row in rows], ["run_id", "scope", "name"])


@dataclasses.dataclass(frozen=True)
class CacheReuse:
    """Which cached answers a run may reuse: those paid by a run under the flow run `scope` (a night's or a
    deployment run's: its retries and reschedules; None: any run's), written at or after `newer_than`.

    Keys stay what they are (`core.identity`): who paid and when are the row's own columns, so a night
    that may not reuse yesterday's answer pays again and its answer replaces it under the same key."""

    scope: str | None = None
    newer_than: datetime | None = None


ANY_RUN = CacheReuse()


def cache_get_many(engine: Engine, keys: list[str], reuse: CacheReuse = ANY_RUN) -> dict[str, CallCacheRow]:
    """The call cache's rows of these keys that `reuse` allows; a database away is waited for (`outage`)."""
    query = select(CallCacheRow)
    if reuse.scope is not None:
        query = query.join(RunRow, col(RunRow.run_id) == col(CallCacheRow.paid_by)).where(
            RunRow.root_flow_run_id == reuse.scope
        )
    if reuse.newer_than is not None:
        query = query.where(col(CallCacheRow.created) >= _as_utc(reuse.newer_than))

    def read() -> dict[str, CallCacheRow]:
        found: dict[str, CallCacheRow] = {}
        with Session(engine) as session:
            for start in range(0, len(keys), 500):
                for row in session.exec(query.where(col(CallCacheRow.key).in_(keys[start : start + 500]))):
                    found[row.key] = row
        return found

    return patiently(read, WHERE)


def runs_by_id(engine: Engine, run_ids: Iterable[str]) -> dict[str, RunRow]:
    """The rows of these runs (those the database still holds), by id."""
    wanted = sorted(set(run_ids))
    with Session(engine) as session:
        return {run.run_id: run for run in session.exec(select(RunRow).where(col(RunRow.run_id).in_(wanted)))}


def cache_put_many(engine: Engine, rows: list[dict[str, Any]], patient: bool = True) -> None:
    """Write answers to the call cache; not `patient`: a database away raises at once (the cache journals)."""
    _upsert(engine, CallCacheRow, rows, ["key"], patient)


def cache_replay(engine: Engine, directory: Path) -> int:
    """Write the call-cache journals earlier runs left in `directory` into the call cache (`journal`)."""
    from judgebench_flows.data.journal import replay

    return replay(directory, _table(CallCacheRow), lambda rows: cache_put_many(engine, rows))


def paid_by_run(engine: Engine, run_id: str) -> tuple[int, int, int]:
    """(answers, prompt tokens, completion tokens) the call cache holds from calls `run_id` paid for."""
    table = _table(CallCacheRow)
    query = sa.select(
        sa.func.count(), sa.func.sum(table.c.prompt_tokens), sa.func.sum(table.c.completion_tokens)
    ).where(table.c.paid_by == run_id)
    with engine.connect() as connection:
        calls, prompt, completion = connection.execute(query).one()
    return int(calls or 0), int(prompt or 0), int(completion or 0)


def batch_save(engine: Engine, row: dict[str, Any]) -> None:
    _upsert(engine, BatchRow, [row], ["batch_id"])


def batches_open(engine: Engine, endpoint: str, model: str) -> list[BatchRow]:
    with Session(engine) as session:
        query = select(BatchRow).where(BatchRow.endpoint == endpoint, BatchRow.model == model)
        return [row for row in session.exec(query) if row.status == "open"]


def batch_done(engine: Engine, batch_id: str) -> None:
    with engine.begin() as connection:
        table = _table(BatchRow)
        connection.execute(sa.update(table).where(table.c.batch_id == batch_id).values(status="done"))


def list_runs(
    engine: Engine, limit: int = 50, config_key: str | None = None, statuses: Iterable[str] | None = None
) -> list[RunRow]:
    """Newest first; optionally only one configuration's runs and only runs in the given statuses."""
    with Session(engine) as session:
        query = select(RunRow).order_by(RunRow.started.desc()).limit(limit)  # type: ignore[attr-defined]
        if config_key:
            query = query.where(RunRow.config_key == config_key)
        if statuses is not None:
            query = query.where(RunRow.status.in_(list(statuses)))  # type: ignore[attr-defined]
        return list(session.exec(query))


def get_run(engine: Engine, run_id: str) -> RunRow | None:
    with Session(engine) as session:
        run = session.get(RunRow, run_id)
        if run is None:  # allow a unique prefix, as people copy short ids from `history`
            matches = list(
                session.exec(select(RunRow).where(col(RunRow.run_id).startswith(run_id, autoescape=True)).limit(2))
            )
            run = matches[0] if len(matches) == 1 else None
        return run


def _process_gone(pid: int) -> bool:
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
    crashed = [run.run_id for run in running if run.pid is not None and _process_gone(run.pid)]
    for run_id in crashed:

        def write(run_id: str = run_id) -> None:
            with engine.begin() as connection:
                table = _table(RunRow)
                connection.execute(
                    sa.update(table)
                    .where(table.c.run_id == run_id, table.c.status == "running")
                    .values(status="crashed", message="its process ended without finishing the run (killed or crashed)")
                )

        _with_retries(write, engine=engine)
    return crashed


def fail_this_process_runs(engine: Engine, message: str) -> None:
    """This process's runs still 'running' (or 'interrupted' by the cancellation that ended them) become
    'failed' with `message`: for a process whose Prefect server is gone, which `mark_crashed` would
    otherwise only call 'crashed' later, without the reason."""

    def write() -> None:
        with engine.begin() as connection:
            table = _table(RunRow)
            connection.execute(
                sa.update(table)
                .where(
                    table.c.status.in_(("running", "interrupted")),
                    table.c.host == socket.gethostname(),
                    table.c.pid == os.getpid(),
                )
                .values(status="failed", finished=utcnow(), message=message[:500])
            )

    _with_retries(write, engine=engine)


def run_judgments(engine: Engine, run_id: str) -> list[JudgmentRow]:
    with Session(engine) as session:
        return list(session.exec(select(JudgmentRow).where(JudgmentRow.run_id == run_id)))


_ORDER_INDEX: Any = JudgmentRow.order_index  # a column at runtime, typed as int
_VERDICT_COLUMNS = (
    JudgmentRow.pair_id,
    (_ORDER_INDEX % 2).label("order"),
    JudgmentRow.source,
    JudgmentRow.category,
    JudgmentRow.label,
    JudgmentRow.status,
    JudgmentRow.decision_for_pair,
    (_ORDER_INDEX // 2).label("epoch"),
)


def verdicts_query(run_ids: list[str]) -> sa.Select[Any]:
    """The runs' verdicts, each led by its run id. Every column it (and `run_verdicts`) reads is in the
    index `ix_judgments_verdicts` (migration 0008): the read is index-only, never the rows' answers."""
    return sa.select(JudgmentRow.run_id, *_VERDICT_COLUMNS).where(col(JudgmentRow.run_id).in_(run_ids))  # type: ignore[call-overload]


def run_verdicts(engine: Engine, run_id: str) -> list[Any]:
    """A run's verdicts without their answers: what the metric reads (`metrics.Verdict`), a few dozen
    bytes per judgment where whole rows would carry every raw answer."""
    with engine.connect() as connection:
        return list(connection.execute(sa.select(*_VERDICT_COLUMNS).where(JudgmentRow.run_id == run_id)))  # type: ignore[call-overload]


def runs_verdicts(engine: Engine, run_ids: Iterable[str]) -> dict[str, list[tuple[Any, ...]]]:
    """Several runs' verdicts by run id, each a tuple of `run_verdicts`' columns in their order, in one
    query per 500 runs, fetched whole: the leaderboard reads 50 configurations' latest runs (35,000
    rows), where a query per run and a row object each cost more than the scoring."""
    wanted = sorted(set(run_ids))
    found: dict[str, list[tuple[Any, ...]]] = {run_id: [] for run_id in wanted}
    with engine.connect() as connection:
        for start in range(0, len(wanted), 500):
            for run_id, *verdict in connection.execute(verdicts_query(wanted[start : start + 500])).tuples().all():
                found[run_id].append(tuple(verdict))
    return found


def run_metrics(engine: Engine, run_id: str) -> list[MetricRow]:
    with Session(engine) as session:
        return list(session.exec(select(MetricRow).where(MetricRow.run_id == run_id)))

"""The results database (`--db-url`): run history, judgments, metrics, the call cache, provider batches,
run locks and a pool night's spend, through SQLModel. SQLite by default, PostgreSQL in production; the
same code path serves both.

Callers use one name, `from judgebench_flows.data import db` (`db.open_database(url)`, `db.save_run(...)`);
behind it, each concern has its own module:

- data/schema.py: the tables (SQLModel models), `utcnow`, the schema's version row. A change to a model
  needs its Alembic migration (`data/migrations/versions`; migrations only add, so existing data is safe).
- data/engines.py: opening a database (one engine per URL per process, its schema migrated on open;
  `open_existing` and `open_read_only` for commands that only read), writes retried through passing
  trouble and a database that is away waited for (`outage`), and crash detection (`mark_crashed`).
- data/queries.py: reading and writing rows, each write an upsert on a natural key: a run's life, its
  judgments (the epoch in `order_index`: order + 2 * epoch) and metrics, the call cache, provider
  batches, and the reads of history, compare, the report and the leaderboard.
"""

from __future__ import annotations

from sqlmodel import Session as Session
from sqlmodel import SQLModel as SQLModel
from sqlmodel import select as select

from judgebench_flows.data.engines import (
    MIGRATIONS,
    WHERE,
    WRITE_ATTEMPTS,
    disk_full,
    fail_this_process_runs,
    mark_crashed,
    migrations_config,
    open_database,
    open_existing,
    open_read_only,
    process_gone,
    safe_url,
    with_retries,
)
from judgebench_flows.data.engines import _engines as _engines
from judgebench_flows.data.engines import _upgrade_schema as _upgrade_schema
from judgebench_flows.data.queries import (
    ANY_RUN,
    BiasFigures,
    CacheReuse,
    OverallFigures,
    batch_done,
    batch_save,
    batches_open,
    cache_get_many,
    cache_put_many,
    cache_replay,
    fail_run,
    finish_run,
    get_run,
    interrupt_run,
    judgment_records,
    judgment_rows,
    latest_finished_runs,
    list_runs,
    paid_by_run,
    run_judgments,
    run_metrics,
    run_verdicts,
    runs_by_id,
    runs_verdicts,
    save_judgments,
    save_metrics,
    save_run,
    start_run,
    twin_runs,
    update_run,
    verdicts_query,
)
from judgebench_flows.data.queries import _stored_fields as _stored_fields
from judgebench_flows.data.schema import (
    SCHEMA_VERSION,
    BatchRow,
    CallCacheRow,
    JudgmentRow,
    MetricRow,
    NightSpendRow,
    RunLockRow,
    RunRow,
    SchemaMeta,
    as_utc,
    table_of,
    utcnow,
)

# The names these helpers had when they were this module's own.
_with_retries, _process_gone, _table, _as_utc = with_retries, process_gone, table_of, as_utc

__all__ = [
    "ANY_RUN",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "WHERE",
    "WRITE_ATTEMPTS",
    "BatchRow",
    "BiasFigures",
    "CacheReuse",
    "CallCacheRow",
    "JudgmentRow",
    "MetricRow",
    "NightSpendRow",
    "OverallFigures",
    "RunLockRow",
    "RunRow",
    "SchemaMeta",
    "as_utc",
    "batch_done",
    "batch_save",
    "batches_open",
    "cache_get_many",
    "cache_put_many",
    "cache_replay",
    "disk_full",
    "fail_run",
    "fail_this_process_runs",
    "finish_run",
    "get_run",
    "interrupt_run",
    "judgment_records",
    "judgment_rows",
    "latest_finished_runs",
    "list_runs",
    "mark_crashed",
    "migrations_config",
    "open_database",
    "open_existing",
    "open_read_only",
    "paid_by_run",
    "process_gone",
    "run_judgments",
    "run_metrics",
    "run_verdicts",
    "runs_by_id",
    "twin_runs",
    "runs_verdicts",
    "safe_url",
    "save_judgments",
    "save_metrics",
    "save_run",
    "start_run",
    "table_of",
    "update_run",
    "utcnow",
    "verdicts_query",
    "with_retries",
]

"""The results database's tables, as SQLModel models: runs, judgments, metrics, the call cache, provider
batches, run locks, a pool night's spend, sequential-alert events, and the schema's version row.

A change to a model here needs its Alembic migration (`data/migrations/versions`): migrations only add,
and `tests/test_db.py` compares what they build with these models on SQLite and PostgreSQL. Datetime
columns hold aware UTC on both backends (`as_utc`). Opening a database is data/engines.py's; reading and
writing rows, data/queries.py's.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel, UniqueConstraint

SCHEMA_VERSION = 1


def utcnow() -> datetime:
    """Now, aware UTC: what every datetime column stores."""
    return datetime.now(timezone.utc)


def as_utc(value: Any) -> Any:
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
    # hold every epoch without a schema change. data/queries.py reads it back (`judgment_records`, the verdicts).
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


class AlertEventRow(SQLModel, table=True):
    """A configuration's sequential-alert events (`scoring/regression.py`): `flagged` when its CUSUM
    alarmed (the change measured, JSON in `detail`), `reset` when a person reset its reference
    (`judgebench alerts reset`). The newest event decides: a flag stays until a reset after it, and a
    reset starts the reference afresh. Migration 0009."""

    __tablename__ = "alert_events"

    id: int | None = Field(default=None, primary_key=True)
    config_key: str = Field(index=True, max_length=64)
    kind: str = Field(max_length=16)
    at: datetime = Field(default_factory=utcnow)
    run_id: str | None = None
    detail: str | None = None


class SchemaMeta(SQLModel, table=True):
    __tablename__ = "judgebench_schema"

    id: int = Field(default=1, primary_key=True)
    version: int = SCHEMA_VERSION


def table_of(model: type[SQLModel]) -> sa.Table:
    """The model's table: SQLModel sets `__table__` on table models but does not declare it for type checkers."""
    return model.__table__  # type: ignore[attr-defined]


__all__ = [
    "SCHEMA_VERSION",
    "AlertEventRow",
    "BatchRow",
    "CallCacheRow",
    "JudgmentRow",
    "MetricRow",
    "NightSpendRow",
    "RunLockRow",
    "RunRow",
    "SchemaMeta",
    "as_utc",
    "table_of",
    "utcnow",
]

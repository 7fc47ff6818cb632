"""The results database as of November 2026 (schema version 1), frozen here: created whole in an empty
database, and completed in place in one written by any earlier version (which created its tables and
added columns on open): missing tables are created, missing columns added (a scalar default becomes the
column's DEFAULT, so existing rows read 0 or "" where the code expects it), missing indexes created.
Existing rows are never touched.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlmodel.sql.sqltypes import AutoString, UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

schema = sa.MetaData()


def text(name: str, **kw) -> sa.Column:
    return sa.Column(name, AutoString(), **kw)


sa.Table(
    "runs",
    schema,
    text("run_id", primary_key=True),
    text("config_key", nullable=False, index=True),
    text("judge_type", nullable=False),
    text("model", nullable=False),
    text("repo_url"),
    text("commit"),
    text("data_file"),
    text("flow_run_id"),
    text("status", nullable=False, default="running"),
    text("host"),
    sa.Column("pid", sa.Integer()),
    text("message"),
    sa.Column("started", UTCDateTime(), nullable=False),
    sa.Column("finished", UTCDateTime()),
    sa.Column("n_pairs", sa.Integer()),
    sa.Column("overall_accuracy", sa.Float()),
    sa.Column("ci_low", sa.Float()),
    sa.Column("ci_high", sa.Float()),
    text("config_json", nullable=False, default="{}"),
    text("results_json"),
    sa.Column("cost_usd", sa.Float()),
    text("priced_as"),
)
sa.Table(
    "judgments",
    schema,
    sa.Column("id", sa.Integer(), primary_key=True),
    text("run_id", nullable=False, index=True),
    text("pair_id", nullable=False),
    sa.Column("order_index", sa.Integer(), nullable=False),
    text("source", nullable=False),
    text("category", nullable=False),
    text("label", nullable=False),
    text("status", nullable=False),
    text("decision", nullable=False, default=""),
    text("decision_for_pair", nullable=False, default=""),
    text("response", nullable=False, default=""),
    text("error"),
    sa.Column("latency_s", sa.Float(), nullable=False, default=0.0),
    sa.Column("calls", sa.Integer(), nullable=False, default=0),
    sa.Column("cached_calls", sa.Integer(), nullable=False, default=0),
    sa.Column("prompt_tokens", sa.Integer(), nullable=False, default=0),
    sa.Column("completion_tokens", sa.Integer(), nullable=False, default=0),
    sa.UniqueConstraint("run_id", "pair_id", "order_index", name="uq_judgment"),
)
sa.Table(
    "metrics",
    schema,
    sa.Column("id", sa.Integer(), primary_key=True),
    text("run_id", nullable=False, index=True),
    text("scope", nullable=False),
    text("name", nullable=False),
    sa.Column("accuracy", sa.Float(), nullable=False),
    sa.Column("correct_count", sa.Integer(), nullable=False),
    sa.Column("valid_samples", sa.Integer(), nullable=False),
    sa.Column("total_samples", sa.Integer(), nullable=False),
    sa.Column("ci_low", sa.Float()),
    sa.Column("ci_high", sa.Float()),
    sa.UniqueConstraint("run_id", "scope", "name", name="uq_metric"),
)
sa.Table(
    "call_cache",
    schema,
    sa.Column("key", AutoString(length=64), primary_key=True),
    text("model", nullable=False),
    text("response", nullable=False),
    sa.Column("prompt_tokens", sa.Integer(), nullable=False, default=0),
    sa.Column("completion_tokens", sa.Integer(), nullable=False, default=0),
    sa.Column("created", UTCDateTime(), nullable=False),
)
sa.Table(
    "provider_batches",
    schema,
    text("batch_id", primary_key=True),
    text("provider", nullable=False),
    text("endpoint", nullable=False, index=True),
    text("model", nullable=False),
    text("custom_ids", nullable=False),
    text("status", nullable=False, default="open"),
    sa.Column("created", UTCDateTime(), nullable=False),
)
# The hand-written upgrade's marker, kept for the versions before this one that still open this database.
sa.Table(
    "judgebench_schema",
    schema,
    sa.Column("id", sa.Integer(), primary_key=True, default=1),
    sa.Column("version", sa.Integer(), nullable=False, default=1),
)


def added(column: sa.Column, dialect: sa.Dialect) -> sa.Column:
    """A column added to an existing table: nullable (SQLite adds no NOT NULL column), its scalar default
    the column's DEFAULT so existing rows get it."""
    default = column.default
    server_default = None
    if isinstance(default, sa.ColumnDefault) and default.is_scalar and default.arg is not None:
        literal = sa.literal(default.arg, type_=column.type)
        server_default = sa.text(str(literal.compile(dialect=dialect, compile_kwargs={"literal_binds": True})))
    return sa.Column(column.name, column.type, nullable=True, server_default=server_default)


def upgrade() -> None:
    bind = op.get_bind()
    existing = set(sa.inspect(bind).get_table_names())
    schema.create_all(bind, tables=[t for t in schema.sorted_tables if t.name not in existing])
    for table in schema.sorted_tables:
        if table.name not in existing:
            continue
        inspector = sa.inspect(bind)
        present = {column["name"] for column in inspector.get_columns(table.name)}
        for column in table.columns:
            if column.name not in present:
                op.add_column(table.name, added(column, bind.dialect))
        indexes = {index["name"] for index in inspector.get_indexes(table.name)}
        for index in table.indexes:
            if index.name not in indexes:
                index.create(bind)
    marker = schema.tables["judgebench_schema"]
    if bind.execute(sa.select(marker)).first() is None:
        bind.execute(sa.insert(marker).values(id=1, version=1))

"""The run that paid for a cached answer (`call_cache.paid_by`, indexed: a run's cost counts answers a
lost Dask attempt paid for) and the one-run-per-configuration lock (`run_locks`), issue 32. Idempotent:
a database that a build between the two schemes already gave them is left as it is.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlmodel.sql.sqltypes import AutoString, UTCDateTime

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if "paid_by" not in {column["name"] for column in inspector.get_columns("call_cache")}:
        op.add_column("call_cache", sa.Column("paid_by", AutoString(length=32), nullable=True))
    if "ix_call_cache_paid_by" not in {index["name"] for index in inspector.get_indexes("call_cache")}:
        op.create_index("ix_call_cache_paid_by", "call_cache", ["paid_by"])
    if not inspector.has_table("run_locks"):
        op.create_table(
            "run_locks",
            sa.Column("config_key", AutoString(length=64), primary_key=True),
            sa.Column("run_id", AutoString(), nullable=False),
            sa.Column("host", AutoString(), nullable=False),
            sa.Column("pid", sa.Integer(), nullable=False),
            sa.Column("expires", UTCDateTime(), nullable=False),
        )

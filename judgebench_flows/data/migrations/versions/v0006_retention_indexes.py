"""Indexes for a year of nights (issue 41): `runs.started` (history lists the newest runs first; retention
finds the runs older than the kept days) and `call_cache.created` (retention deletes answers by age).
Idempotent, as 0003.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

INDEXES = {"ix_runs_started": ("runs", "started"), "ix_call_cache_created": ("call_cache", "created")}


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    for name, (table, column) in INDEXES.items():
        if name not in {index["name"] for index in inspector.get_indexes(table)}:
            op.create_index(name, table, [column])

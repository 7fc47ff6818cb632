"""A pool night's budget shared by its cell runs on every worker (`night_spend`, issue 43). Idempotent,
as 0003.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlmodel.sql.sqltypes import AutoString, UTCDateTime

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if not sa.inspect(op.get_bind()).has_table("night_spend"):
        op.create_table(
            "night_spend",
            sa.Column("night", AutoString(length=64), primary_key=True),
            sa.Column("cell", AutoString(length=255), primary_key=True),
            sa.Column("held", sa.Float(), nullable=False),
            sa.Column("spent", sa.Float(), nullable=False),
            sa.Column("updated", UTCDateTime(), nullable=False),
        )

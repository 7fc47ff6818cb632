"""A configuration's sequential-alert events (`alert_events`, issue 60): a CUSUM's flag, kept until a
person resets the reference (`judgebench alerts reset`). Idempotent, as 0003.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlmodel.sql.sqltypes import AutoString, UTCDateTime

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if not sa.inspect(op.get_bind()).has_table("alert_events"):
        op.create_table(
            "alert_events",
            sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
            sa.Column("config_key", AutoString(length=64), nullable=False),
            sa.Column("kind", AutoString(length=16), nullable=False),
            sa.Column("at", UTCDateTime(), nullable=False),
            sa.Column("run_id", AutoString(), nullable=True),
            sa.Column("detail", AutoString(), nullable=True),
        )
        op.create_index("ix_alert_events_config_key", "alert_events", ["config_key"])

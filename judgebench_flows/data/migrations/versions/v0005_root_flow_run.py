"""The outermost flow run of a run (`runs.root_flow_run_id`, indexed), issue 41: a night's or a deployment
run's cells, retries and reschedules share it, and a night reuses only the cached answers paid under it.
Idempotent, as 0003.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlmodel.sql.sqltypes import AutoString

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if "root_flow_run_id" not in {column["name"] for column in inspector.get_columns("runs")}:
        op.add_column("runs", sa.Column("root_flow_run_id", AutoString(), nullable=True))
    if "ix_runs_root_flow_run_id" not in {index["name"] for index in inspector.get_indexes("runs")}:
        op.create_index("ix_runs_root_flow_run_id", "runs", ["root_flow_run_id"])

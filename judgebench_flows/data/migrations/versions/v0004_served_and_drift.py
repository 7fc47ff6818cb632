"""What the endpoint said about the model that answered a run (`runs.served_as`: its model, fingerprints,
the checkpoint a vLLM server lists) and what changed against the run's baseline (`runs.drift`), so
`history` shows drift without reading every results.json (issue 41). NULL for the runs before them.
Idempotent: columns already present are left as they are.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlmodel.sql.sqltypes import AutoString

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    present = {column["name"] for column in sa.inspect(op.get_bind()).get_columns("runs")}
    for name in ("served_as", "drift"):
        if name not in present:
            op.add_column("runs", sa.Column(name, AutoString(), nullable=True))

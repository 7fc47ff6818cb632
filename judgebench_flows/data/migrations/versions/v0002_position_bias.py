"""Position bias per run (results.json's `consistency`, issue 37): `runs.order_consistency` and
`runs.first_position_rate`, NULL for the runs before them. Idempotent: a database that a build between
the two schemes already gave these columns is left as it is.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    present = {column["name"] for column in sa.inspect(op.get_bind()).get_columns("runs")}
    for name in ("order_consistency", "first_position_rate"):
        if name not in present:
            op.add_column("runs", sa.Column(name, sa.Float(), nullable=True))

"""An index holding the verdict columns of `judgments` (issue 41): the leaderboard and the regression
check read runs' verdicts by `run_id` (`db.runs_verdicts`, `db.run_verdicts`), and with every column they
read in the index the read is index-only: the rows, each carrying the judge's whole answer, are not read
(measured in docs/performance.md, "A year of nights"). Idempotent, as 0003.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

NAME = "ix_judgments_verdicts"
COLUMNS = ["run_id", "pair_id", "order_index", "source", "category", "label", "status", "decision_for_pair"]


def upgrade() -> None:
    if NAME not in {index["name"] for index in sa.inspect(op.get_bind()).get_indexes("judgments")}:
        op.create_index(NAME, "judgments", COLUMNS)

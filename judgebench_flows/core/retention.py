"""How long the results database keeps what grows with every run: one settings model, whose fields are the
`judgebench retention` command's options and the retention deployment's parameters.

Judgment rows (a few hundred bytes each, 700 per run of the GPT-4o pairs) and call-cache answers (the
judge's whole answer text) are most of a database's size; a run's row (with its results.json) and its
metric rows are small and are what `history`, `compare`'s headline, the regression chain and the
leaderboard's trend read, so they are kept for good.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_KEEP_DAYS = 90


class RetentionSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    keep_days: int = Field(
        default=DEFAULT_KEEP_DAYS,
        ge=1,
        le=36500,
        description="judgment rows of runs started longer ago than this many days and call-cache answers written "
        "longer ago are deleted; runs (with their results.json) and metric rows are kept for good",
    )
    db_url: str | None = Field(
        default=None, description="results database (default: $JUDGEBENCH_DB_URL, else sqlite:///results/judgebench.db)"
    )
    vacuum: bool = Field(
        default=False,
        description="give the freed space back afterwards: SQLite VACUUM (rewrites the file, needs as much free disk "
        "again and no run writing meanwhile), PostgreSQL VACUUM ANALYZE",
    )
    dry_run: bool = Field(default=False, description="count what would be deleted, delete nothing")


__all__ = ["DEFAULT_KEEP_DAYS", "RetentionSettings"]

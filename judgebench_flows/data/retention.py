"""Retention: delete judgment rows and call-cache answers older than the kept days (`RetentionSettings`).

Runs and metrics stay. A run whose judgments are gone still lists in `history`, keeps its results.json
(accuracy, intervals, usage) for `report` and the leaderboard's history, and names itself as pruned where
its judgments would be read (`compare`). A run still `running` keeps its judgments whatever its age: it
may be resumed, and each configuration's latest finished run keeps its judgments whatever its age: the
next run's regression check reads them. Answers are deleted by when they were written, not by the run that paid them, so a
resumed old run pays again only for answers older than the kept days.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from judgebench_flows.core.config import results_db_url
from judgebench_flows.core.errors import UserError
from judgebench_flows.core.retention import RetentionSettings
from judgebench_flows.data import db


@dataclass(frozen=True)
class Pruned:
    """What retention deleted (or, in a dry run, would delete) before `cutoff`."""

    cutoff: datetime
    runs: int  # runs whose judgments were deleted
    judgments: int
    answers: int
    batches: int
    dry_run: bool = False

    def line(self) -> str:
        verb = "would delete" if self.dry_run else "deleted"
        return (
            f"retention: {verb} {self.judgments:,} judgment rows of {self.runs:,} runs started before "
            f"{self.cutoff:%Y-%m-%d %H:%M} UTC and {self.answers:,} call-cache answers written before it"
            f"{f' ({self.batches:,} finished provider batches)' if self.batches else ''}; runs and metrics are kept"
        )


def _tables() -> tuple[sa.Table, sa.Table, sa.Table, sa.Table]:
    return (
        db.RunRow.__table__,  # type: ignore[attr-defined]
        db.JudgmentRow.__table__,  # type: ignore[attr-defined]
        db.CallCacheRow.__table__,  # type: ignore[attr-defined]
        db.BatchRow.__table__,  # type: ignore[attr-defined]
    )


def prune(engine: Engine, keep_days: int, now: datetime | None = None, dry_run: bool = False) -> Pruned:
    """Delete (or count) what is older than `keep_days`; one transaction per table, each retried as any write."""
    cutoff = (now or db.utcnow()) - timedelta(days=keep_days)
    runs, judgments, cache, batches = _tables()
    baselines = [row.run_id for row in db.latest_finished_runs(engine)]  # each configuration's next baseline
    old_runs = sa.select(runs.c.run_id).where(
        runs.c.started < cutoff, runs.c.status != "running", runs.c.run_id.not_in(baselines)
    )
    pruned_runs = sa.select(sa.func.count(sa.distinct(judgments.c.run_id))).where(judgments.c.run_id.in_(old_runs))
    statements = {
        "judgments": (judgments, judgments.c.run_id.in_(old_runs)),
        "answers": (cache, cache.c.created < cutoff),
        "batches": (batches, sa.and_(batches.c.status == "done", batches.c.created < cutoff)),
    }
    counts: dict[str, int] = {}
    with engine.connect() as connection:
        counted_runs = int(connection.execute(pruned_runs).scalar_one())
        if dry_run:
            for name, (table, where) in statements.items():
                counts[name] = int(
                    connection.execute(sa.select(sa.func.count()).select_from(table).where(where)).scalar_one()
                )
    if not dry_run:
        for name, (table, where) in statements.items():

            def delete(table: sa.Table = table, where: sa.ColumnElement[bool] = where, name: str = name) -> None:
                with engine.begin() as connection:
                    counts[name] = connection.execute(sa.delete(table).where(where)).rowcount or 0

            db.with_retries(delete)
    return Pruned(cutoff, counted_runs, counts["judgments"], counts["answers"], counts["batches"], dry_run)


def vacuum(engine: Engine) -> None:
    """Give the freed pages back: SQLite rewrites the file (VACUUM), PostgreSQL marks them reusable and
    refreshes the planner's statistics (VACUUM ANALYZE on the pruned tables)."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        if engine.dialect.name == "sqlite":
            connection.exec_driver_sql("VACUUM")
            connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")  # the rewritten pages out of the WAL
        else:
            for table in ("judgments", "call_cache", "provider_batches"):
                connection.exec_driver_sql(f"VACUUM ANALYZE {table}")


def database_bytes(engine: Engine) -> int | None:
    """The database's size on disk (SQLite: the file and its WAL; PostgreSQL: pg_database_size)."""
    if engine.dialect.name == "sqlite":
        from pathlib import Path

        path = Path(engine.url.database or "")
        files = [path, path.with_name(path.name + "-wal")]
        return sum(f.stat().st_size for f in files if f.is_file()) if path.is_file() else None
    with engine.connect() as connection:
        return int(connection.execute(sa.text("SELECT pg_database_size(current_database())")).scalar_one())


def apply(settings: RetentionSettings) -> tuple[Pruned, int | None, int | None]:
    """Prune (and vacuum) the database the settings name; what was deleted, and its size before and after."""
    url = results_db_url(settings.db_url)
    engine = db.open_existing(url)  # a database that is not there is an error, never created here
    if engine is None:
        raise UserError(f"--db-url {db.safe_url(url)}: no runs of ours in it, nothing to delete")
    before = database_bytes(engine)
    pruned = prune(engine, settings.keep_days, dry_run=settings.dry_run)
    if settings.vacuum and not settings.dry_run:
        vacuum(engine)
    return pruned, before, database_bytes(engine)


def size_text(size: int | None) -> str:
    return "?" if size is None else f"{size / 1e6:,.1f} MB"


__all__ = ["Pruned", "apply", "database_bytes", "prune", "size_text", "vacuum"]

"""A configuration's sequential-alert events (`alert_events`): the flag its CUSUM raised, kept until a
person resets the reference, and those resets. Rows are only added; the newest event decides."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from judgebench_flows.data.engines import with_retries
from judgebench_flows.data.schema import AlertEventRow, RunRow, as_utc, table_of, utcnow

FLAGGED, RESET = "flagged", "reset"


@dataclass(frozen=True)
class AlertEvent:
    kind: str
    at: datetime
    run_id: str | None
    detail: str | None


def add_event(engine: Engine, config_key: str, kind: str, run_id: str | None = None, detail: str | None = None) -> None:
    table = table_of(AlertEventRow)

    def write() -> None:
        with engine.begin() as connection:
            connection.execute(
                table.insert().values(config_key=config_key, kind=kind, at=utcnow(), run_id=run_id, detail=detail)
            )

    with_retries(write, True, engine)


def latest_event(engine: Engine, config_key: str) -> AlertEvent | None:
    """The configuration's newest event (None: none yet)."""
    table = table_of(AlertEventRow)
    with engine.connect() as connection:
        row = connection.execute(
            sa.select(table)
            .where(table.c.config_key == config_key)
            .order_by(table.c.at.desc(), table.c.id.desc())
            .limit(1)
        ).first()
    return AlertEvent(row.kind, as_utc(row.at), row.run_id, row.detail) if row else None


def config_keys_like(engine: Engine, prefix: str) -> list[str]:
    """The configuration keys of stored runs that start with `prefix` (at most two: enough to say it is
    not unique)."""
    table = table_of(RunRow)
    with engine.connect() as connection:
        rows = connection.execute(
            sa.select(table.c.config_key)
            .where(table.c.config_key.startswith(prefix, autoescape=True))
            .distinct()
            .limit(2)
        ).all()
    return [r[0] for r in rows]


__all__ = ["FLAGGED", "RESET", "AlertEvent", "add_event", "config_keys_like", "latest_event"]

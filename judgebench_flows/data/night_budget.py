"""A pool night's budget (`max_cost` of a `cells: pool` matrix) shared by its cell runs on any worker,
through the results database every worker already shares.

In one process a night's cells count their spend in memory (`core.pricing.NightSpend`). A pool night's
cells run on other machines, so the count lives in the `night_spend` table: the night writes its row
(`max_cost`) before its first cell run; each cell run, once it knows its worst case (what the call cache
does not answer: `flows/run_usage.check_worst_case`), reserves it there before its first call, and
runs with that reservation as its limit (its calls stop there, as a run's `--max-cost`); when it ends it
records what it spent and gives the rest back. A cell whose worst case no longer fits in what the night
has left (spent by the cells that ended, held by those running) is refused before any call, with one line.
So the night never spends more than its budget, and what a cell did not spend is there for the cells
that start after it (an up-front split gave each cell its share for good).

Each reservation is one transaction that first updates the night's row, so reservations queue on that
row (PostgreSQL's row lock, SQLite's write lock) and none reads a total another is changing. A cell run
that dies keeps its reservation (counted as spent: never more than the budget); the same cell run again
(its run rescheduled, or retried) replaces it.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from judgebench_flows.core.errors import UserError
from judgebench_flows.core.pricing import format_usd
from judgebench_flows.data.engines import open_database, with_retries
from judgebench_flows.data.schema import NightSpendRow, table_of, utcnow

NIGHT_ROW = ""  # the night's own row: `held` is its max_cost
CENT = 1e-9  # dollars below which two amounts are equal (float sums of per-call costs)


class NightBudgetRefused(UserError):
    """The cell's worst case does not fit in what the night has left: refused before any call."""


@dataclass(frozen=True)
class NightTotals:
    max_cost: float
    spent: float  # by cell attempts that ended
    held: float  # reserved by cell attempts still running (or that died)

    @property
    def left(self) -> float:
        return max(0.0, self.max_cost - self.spent - self.held)


def _rows(connection: sa.Connection, night: str) -> list[sa.Row]:
    table = table_of(NightSpendRow)
    return list(connection.execute(sa.select(table).where(table.c.night == night)).all())


def _totals(rows: list[sa.Row], max_cost: float, but: str | None = None) -> NightTotals:
    cells = [r for r in rows if r.cell not in (NIGHT_ROW, but)]
    return NightTotals(max_cost, sum(r.spent for r in cells), sum(r.held for r in cells))


@dataclass(frozen=True)
class NightBudget:
    """A pool night's budget as its cell runs see it: the results database (URL with credentials resolved
    on each machine), the night (its flow run id) and the cell."""

    db_url: str
    night: str
    cell: str = NIGHT_ROW

    def _engine(self) -> Engine:
        return open_database(self.db_url)

    def open(self, max_cost: float) -> None:
        """The night's row with its budget (a night run again keeps its cells' rows: what they spent counts)."""
        table = table_of(NightSpendRow)

        def write() -> None:
            with self._engine().begin() as connection:
                done = connection.execute(
                    sa.update(table)
                    .where(table.c.night == self.night, table.c.cell == NIGHT_ROW)
                    .values(held=max_cost, updated=utcnow())
                )
                if done.rowcount == 0:
                    connection.execute(
                        sa.insert(table).values(
                            night=self.night, cell=NIGHT_ROW, held=max_cost, spent=0.0, updated=utcnow()
                        )
                    )

        with_retries(write, engine=self._engine())

    def reserve(self, worst: float) -> float:
        """Reserve this cell's worst case in dollars; what it may spend (its worst case), or
        `NightBudgetRefused` when that no longer fits in what the night has left."""
        table = table_of(NightSpendRow)
        granted: list[float] = []

        def write() -> None:
            granted.clear()
            with self._engine().begin() as connection:
                locked = connection.execute(  # every reservation of the night queues here
                    sa.update(table)
                    .where(table.c.night == self.night, table.c.cell == NIGHT_ROW)
                    .values(updated=utcnow())
                )
                if locked.rowcount == 0:
                    raise UserError(f"night {self.night}: no budget row in the results database (the night opens it)")
                rows = _rows(connection, self.night)
                max_cost = next(r.held for r in rows if r.cell == NIGHT_ROW)
                mine = next((r for r in rows if r.cell == self.cell), None)
                spent_before = mine.spent if mine is not None else 0.0
                totals = _totals(rows, max_cost, but=self.cell)
                left = max(0.0, totals.left - spent_before)
                if worst > left + CENT:
                    raise NightBudgetRefused(
                        f"the night's budget: {format_usd(left)} left of max_cost {format_usd(max_cost)} "
                        f"({format_usd(totals.spent + spent_before)} spent, {format_usd(totals.held)} held by "
                        f"cells running), below this configuration's worst case {format_usd(worst)}"
                    )
                if mine is None:
                    connection.execute(
                        sa.insert(table).values(
                            night=self.night, cell=self.cell, held=worst, spent=0.0, updated=utcnow()
                        )
                    )
                else:
                    connection.execute(
                        sa.update(table)
                        .where(table.c.night == self.night, table.c.cell == self.cell)
                        .values(held=worst, updated=utcnow())
                    )
                granted.append(worst)

        with_retries(write, engine=self._engine())
        return granted[0]

    def settle(self, spent: float) -> None:
        """This cell's attempt ended having spent `spent`: counted, its reservation given back."""
        table = table_of(NightSpendRow)

        def write() -> None:
            with self._engine().begin() as connection:
                connection.execute(
                    sa.update(table)
                    .where(table.c.night == self.night, table.c.cell == self.cell)
                    .values(spent=table.c.spent + spent, held=0.0, updated=utcnow())
                )

        with_retries(write, engine=self._engine())

    def totals(self) -> NightTotals | None:
        """What the night's cells spent and hold now; None before the night opened its row."""
        with self._engine().connect() as connection:
            rows = _rows(connection, self.night)
        night = next((r for r in rows if r.cell == NIGHT_ROW), None)
        return _totals(rows, night.held) if night is not None else None

"""Which cell of a night starts next: endpoints, not the matrix's order, decide.

A night is bound by its busiest endpoint, so a place among the cells in flight (`cells_in_flight`) goes
to a cell of the endpoint with the most work left per cell it already has in flight, among the endpoints
that have cells waiting or starting and room under their limit (fewer cells in flight than calls its
concurrency allows: a cell beyond that could not send a call). When that endpoint's cell is still
starting, the place waits for it rather than going to an endpoint with less work left per cell (a tie
goes to the ready cell): on a
busy Prefect server the cells of one endpoint may be ready a few seconds after the others', and a place
given away then leaves that endpoint without a cell until one ends (seen in a `team` night: the fourth
endpoint called 16 s late and the night waited 6 s for it, docs/performance.md). Cells listed endpoint by endpoint (a team's OpenAI
models, then its Anthropic ones) then start one per endpoint before any endpoint gets a second, and an
endpoint whose cell ends gets the next place while it has more work left than the others: no endpoint
idles while it has cells waiting and a place is free.

A place is for calls only. A cell is started ahead (`CellSchedule.ahead`: its subflow run created, its
database, data and lock ready), up to `places` cells at once and half as many starting at a time (each
start is writes on the Prefect server), chosen by the same rule counting the cells already started ahead, and takes its place just before its first call (`Places.acquire`): a Prefect
server takes seconds to create a subflow run when busy, and those seconds are spent while other cells'
calls keep the endpoints busy. A cell gives its place up once its calls are done (`Places.judged`): its
results are written, its report rendered and its subflow ended while the next cell judges. Memory stays
bounded: at most `places` cells started ahead, `places` judging and as many finishing.

Work is what a cell plans to judge (pairs x orders, `planned_judgments`); an endpoint's work left is
that of its cells not yet judged. Plain asyncio, no Prefect: flows/nightly.py runs cells in it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections import Counter
from collections.abc import AsyncIterator, Sequence

from judgebench_flows.core.config import RunConfig

# What a cell whose pair count is unknown before its data is read (no `max_samples`) is taken to plan:
# about a JudgeBench file (350 and 270 pairs). Only the ratio between endpoints matters.
UNKNOWN_PAIRS = 350


@dataclasses.dataclass(frozen=True)
class PlannedCell:
    """A cell as the schedule sees it: its place in the matrix, its endpoint, that endpoint's
    concurrency, and the judgments it plans."""

    index: int
    endpoint: str
    concurrency: int
    work: float


def planned_judgments(config: RunConfig) -> float:
    """The judgments a cell plans before its data is read: `max_samples` pairs (else a JudgeBench
    file's worth) in one or both orders."""
    return (config.max_samples or UNKNOWN_PAIRS) * (1 if config.single_game else 2)


class CellSchedule:
    """The night's places and who gets the next one (see the module docstring). Every change happens
    in the night's one event loop, between awaits: no lock is needed, and `Places.judged` can be
    called from plain code (a run's hook)."""

    def __init__(self, cells: Sequence[PlannedCell], places: int) -> None:
        self._order = {cell.endpoint: -n for n, cell in reversed(list(enumerate(cells)))}  # first listed wins ties
        self._pending: list[PlannedCell] = list(cells)  # not started ahead yet
        self._waiting: list[PlannedCell] = []  # started, waiting for a place to call
        self._left: dict[str, float] = dict.fromkeys((cell.endpoint for cell in cells), 0.0)
        for cell in cells:
            self._left[cell.endpoint] += cell.work
        self._concurrency = {cell.endpoint: cell.concurrency for cell in cells}
        self._in_flight: Counter[str] = Counter()
        self._ahead: Counter[str] = Counter()  # started ahead, not yet placed
        self._starting = 0  # started ahead, not yet ready to call
        # Cells starting at once: each start is a few writes on the Prefect server (its subflow run), and a
        # busy server on SQLite answers more writers at once with seconds of lock waits and 503s.
        self._starting_at_once = max(2, places // 2)
        self._places = self._free = places
        self._finishing = 0  # cells past judging, still writing their results
        self._changed = asyncio.Event()
        self.started: list[PlannedCell] = []  # in the order they got a place (the night's log, tests)
        self.started_ahead: list[PlannedCell] = []  # in the order they were started

    def _next(self) -> PlannedCell | None:
        """The cell that gets the next free place, or None (no place free, as many cells finishing as
        there are places, or no endpoint with a cell waiting has room)."""
        if self._free <= 0 or self._finishing >= self._places:
            return None
        ready = {c.endpoint: c for c in reversed(self._waiting) if self._in_flight[c.endpoint] < c.concurrency}
        if not ready:
            return None
        coming = {e for e, n in self._ahead.items() if n > 0 and self._in_flight[e] < self._concurrency[e]}
        best = max(
            ready.keys() | coming,
            key=lambda e: (self._left[e] / (self._in_flight[e] + 1), e in ready, self._order[e]),
        )
        return ready.get(best)  # None: the place waits for that endpoint's cell, still starting

    def _next_ahead(self) -> PlannedCell | None:
        """The cell to start next, ahead of its place: the same rule, the cells started ahead counted with
        those in flight; an endpoint gets at most one more than its concurrency allows in flight."""
        if sum(self._ahead.values()) >= self._places or self._starting >= self._starting_at_once:
            return None
        ready = {
            c.endpoint: c
            for c in reversed(self._pending)
            if self._in_flight[c.endpoint] + self._ahead[c.endpoint] <= c.concurrency
        }
        if not ready:
            return None
        best = max(ready, key=lambda e: (self._left[e] / (self._in_flight[e] + self._ahead[e] + 1), self._order[e]))
        return ready[best]

    def _notify(self) -> None:
        """Wake every cell waiting for its turn: each looks again whether it is next."""
        self._changed.set()
        self._changed = asyncio.Event()

    @contextlib.asynccontextmanager
    async def ahead(self, cell: PlannedCell) -> AsyncIterator[Places]:
        """Wait for the cell's turn to start; inside, it prepares, then waits for its place to call
        (`Places.acquire`), and holds it until `Places.judged`."""
        while self._next_ahead() is not cell:
            await self._changed.wait()
        self._pending.remove(cell)
        self._ahead[cell.endpoint] += 1
        self._starting += 1
        self.started_ahead.append(cell)
        self._notify()
        held = Places(self, cell)
        try:
            yield held
        finally:
            held.judged()
            if held.starting:
                held.starting = False
                self._starting -= 1
                self._notify()
            if held.ahead:  # ended before its first call: it judges nothing
                held.ahead = False
                self._ahead[cell.endpoint] -= 1
                self._left[cell.endpoint] -= cell.work
                self._notify()
            if held.finishing:
                self._finishing -= 1
                self._notify()

    @contextlib.asynccontextmanager
    async def place(self, cell: PlannedCell) -> AsyncIterator[Places]:
        """Wait for the cell's turn and its place at once, hold it while inside (until `Places.judged`)."""
        async with self.ahead(cell) as held:
            await held.acquire()
            yield held

    async def _take(self, cell: PlannedCell, first: bool) -> None:
        """Wait for the cell's place; `first`: a cell that gave its place up (waiting to try again)
        waits first among its endpoint's."""
        if first:
            self._waiting.insert(0, cell)
        else:
            self._waiting.append(cell)
        self._notify()
        try:
            while self._next() is not cell:
                await self._changed.wait()
        except BaseException:
            self._waiting.remove(cell)
            self._notify()
            raise
        self._waiting.remove(cell)
        self._free -= 1
        self._in_flight[cell.endpoint] += 1
        self.started.append(cell)
        self._notify()  # another place may be free for the next cell

    def _give_back(self, cell: PlannedCell) -> None:
        self._free += 1
        self._in_flight[cell.endpoint] -= 1
        self._notify()


@dataclasses.dataclass
class Places:
    """A cell's hold on its place: taken just before its first call (`acquire`), given up once its calls
    are done (`judged`) or while it waits to try again (`release`, then `acquire` again)."""

    schedule: CellSchedule
    cell: PlannedCell
    held: bool = False
    finishing: bool = False
    ahead: bool = True  # started ahead, never placed yet
    starting: bool = True  # started ahead, not yet ready to call

    async def acquire(self) -> None:
        """Wait for the cell's place (at once if it holds it)."""
        if self.held:
            return
        if self.starting:  # ready: another cell may start
            self.starting = False
            self.schedule._starting -= 1
            self.schedule._notify()
        if self.finishing:  # it tries again: it judges again
            self.finishing = False
            self.schedule._finishing -= 1
            self.schedule._left[self.cell.endpoint] += self.cell.work
        await self.schedule._take(self.cell, first=not self.ahead)
        if self.ahead:
            self.ahead = False
            self.schedule._ahead[self.cell.endpoint] -= 1
            self.schedule._notify()  # room to start another ahead
        self.held = True

    def judged(self) -> None:
        """The cell's calls are done: its place and its endpoint's room go to the next cell while it
        writes its results; its work no longer counts as left."""
        if not self.held:
            return
        self.held = False
        if not self.finishing:
            self.finishing = True
            self.schedule._finishing += 1
            self.schedule._left[self.cell.endpoint] -= self.cell.work
        self.schedule._give_back(self.cell)

    async def release(self) -> None:
        if self.held:
            self.held = False
            self.schedule._give_back(self.cell)


__all__ = ["CellSchedule", "PlannedCell", "Places", "planned_judgments"]

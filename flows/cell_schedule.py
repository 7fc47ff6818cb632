"""Which cell of a night starts next: endpoints, not the matrix's order, decide.

A night is bound by its busiest endpoint, so a place among the cells in flight (`cells_in_flight`) goes
to a cell of the endpoint with the most work left per cell it already has in flight, among the endpoints
that have cells waiting and room under their limit (fewer cells in flight than calls its concurrency
allows: a cell beyond that could not send a call). Cells listed endpoint by endpoint (a team's OpenAI
models, then its Anthropic ones) then start one per endpoint before any endpoint gets a second, and an
endpoint whose cell ends gets the next place while it has more work left than the others: no endpoint
idles while it has cells waiting and a place is free.

A cell holds its place while it starts and judges, and gives it up once its calls are done
(`Places.judged`): its results are written, its report rendered and its subflow ended while the next
cell starts, so these fixed costs stay off the endpoint's critical path. Memory stays bounded: at most
`places` cells judging and as many again finishing (holding their tally and a bounded report sample).

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
        self._waiting: list[PlannedCell] = list(cells)
        self._left: dict[str, float] = dict.fromkeys((cell.endpoint for cell in cells), 0.0)
        for cell in cells:
            self._left[cell.endpoint] += cell.work
        self._in_flight: Counter[str] = Counter()
        self._places = self._free = places
        self._finishing = 0  # cells past judging, still writing their results
        self._changed = asyncio.Event()
        self.started: list[PlannedCell] = []  # in the order they got a place (the night's log, tests)

    def _next(self) -> PlannedCell | None:
        """The cell that gets the next free place, or None (no place free, as many cells finishing as
        there are places, or no endpoint with a cell waiting has room)."""
        if self._free <= 0 or self._finishing >= self._places:
            return None
        ready = {c.endpoint: c for c in reversed(self._waiting) if self._in_flight[c.endpoint] < c.concurrency}
        if not ready:
            return None
        best = max(ready, key=lambda e: (self._left[e] / (self._in_flight[e] + 1), self._order[e]))
        return ready[best]

    def _notify(self) -> None:
        """Wake every cell waiting for a place: each looks again whether it is next."""
        self._changed.set()
        self._changed = asyncio.Event()

    @contextlib.asynccontextmanager
    async def place(self, cell: PlannedCell) -> AsyncIterator[Places]:
        """Wait for the cell's turn, hold its place while inside (until `Places.judged`)."""
        await self._take(cell)
        held = Places(self, cell)
        try:
            yield held
        finally:
            held.judged()
            if held.finishing:
                self._finishing -= 1
                self._notify()

    async def _take(self, cell: PlannedCell) -> None:
        while self._next() is not cell:
            await self._changed.wait()
        self._waiting.remove(cell)
        self._free -= 1
        self._in_flight[cell.endpoint] += 1
        self.started.append(cell)
        self._notify()  # another place may be free for the next cell

    def _give_back(self, cell: PlannedCell) -> None:
        self._free += 1
        self._in_flight[cell.endpoint] -= 1
        self._notify()

    async def _wait_again(self, cell: PlannedCell) -> None:
        """A cell that gave its place up (waiting to try again) waits its turn first among its endpoint's."""
        self._waiting.insert(0, cell)
        await self._take(cell)


@dataclasses.dataclass
class Places:
    """A running cell's hold on its place: given up once its calls are done (`judged`) or while it
    waits to try again (`release`, then `acquire`)."""

    schedule: CellSchedule
    cell: PlannedCell
    held: bool = True
    finishing: bool = False

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

    async def acquire(self) -> None:
        if self.finishing:  # it tries again: it judges again
            self.finishing = False
            self.schedule._finishing -= 1
            self.schedule._left[self.cell.endpoint] += self.cell.work
        await self.schedule._wait_again(self.cell)
        self.held = True


__all__ = ["CellSchedule", "PlannedCell", "Places", "planned_judgments"]

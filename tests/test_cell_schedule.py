"""Which cell of a night starts next: endpoints, not the matrix's order (flows/cell_schedule.py).

Cells here are coroutines that hold their place until the test lets them end, so the order in which
places are given is checked step by step, not timed."""

from __future__ import annotations

import asyncio
from collections import Counter

from judgebench_flows.flows.cell_schedule import CellSchedule, PlannedCell


def endpoint_by_endpoint(
    endpoints: int, per_endpoint: int, concurrency: int = 8, work: float = 96
) -> list[PlannedCell]:
    """Cells as a team lists them: every model of the first endpoint, then the second's, and so on."""
    return [
        PlannedCell(e * per_endpoint + m, f"endpoint-{e}", concurrency, work)
        for e in range(endpoints)
        for m in range(per_endpoint)
    ]


class Night:
    """Runs cells through a schedule; each holds its place until `finish` lets it go, and the most
    cells in flight per endpoint is counted from inside the cells."""

    def __init__(self, cells: list[PlannedCell], places: int) -> None:
        self.schedule = CellSchedule(cells, places)
        self.in_flight: Counter[str] = Counter()
        self.most: Counter[str] = Counter()
        self.done = {cell.index: asyncio.Event() for cell in cells}
        self.tasks = [asyncio.create_task(self._cell(cell)) for cell in cells]

    async def _cell(self, cell: PlannedCell) -> None:
        async with self.schedule.place(cell):
            self.in_flight[cell.endpoint] += 1
            self.most[cell.endpoint] = max(self.most[cell.endpoint], self.in_flight[cell.endpoint])
            await self.done[cell.index].wait()
            self.in_flight[cell.endpoint] -= 1

    def started(self) -> list[str]:
        return [cell.endpoint for cell in self.schedule.started]

    async def finish(self, index: int) -> None:
        self.done[index].set()
        await settle()


async def settle() -> None:
    for _ in range(20):  # let every woken waiter take its place
        await asyncio.sleep(0)


def test_cells_listed_endpoint_by_endpoint_start_one_per_endpoint_first() -> None:
    """4 endpoints x 6 models listed endpoint by endpoint, 8 places: every endpoint has a cell running
    before any endpoint's second starts, each endpoint gets 2 of the 8, and as cells end the next
    place goes to the endpoint with the most work left: all endpoints stay busy to the end."""

    async def main() -> None:
        cells = endpoint_by_endpoint(4, 6)
        night = Night(cells, places=8)
        await settle()
        first = night.started()
        assert len(first) == 8
        assert sorted(first[:4]) == [f"endpoint-{e}" for e in range(4)]  # one each before any second
        assert Counter(first) == {f"endpoint-{e}": 2 for e in range(4)}
        # endpoint 0's first cell ends: its place goes back to endpoint 0 (most work left per cell)
        await night.finish(0)
        assert night.started()[8] == "endpoint-0"
        # finish cells in any order: whenever a place frees, an endpoint with cells waiting gets it
        order = [cell.index for cell in night.schedule.started]
        finished = {0}
        while len(finished) < len(cells):
            index = next(i for i in order if i not in finished)
            finished.add(index)
            await night.finish(index)
            order = [cell.index for cell in night.schedule.started]
            running = len(night.schedule.started) - len(finished)
            waiting = len(cells) - len(night.schedule.started)
            assert running == min(8, running + waiting)  # no free place while cells wait
        await asyncio.gather(*night.tasks)
        assert Counter(night.started()) == {f"endpoint-{e}": 6 for e in range(4)}

    asyncio.run(main())


def test_no_endpoint_gets_more_cells_than_its_concurrency_and_bigger_endpoints_get_more() -> None:
    """An endpoint with concurrency 1 never has two cells at once, even with places free; an endpoint
    with twice the work left gets twice the places."""

    async def main() -> None:
        narrow = [PlannedCell(i, "narrow", 1, 10) for i in range(3)]
        big = [PlannedCell(3 + i, "big", 8, 20) for i in range(6)]
        small = [PlannedCell(9 + i, "small", 8, 10) for i in range(6)]
        night = Night(narrow + big + small, places=7)
        await settle()
        assert Counter(night.started()) == {"narrow": 1, "big": 4, "small": 2}
        for index in range(3):
            await night.finish(index)
        assert night.most["narrow"] == 1
        for index in range(3, 15):
            await night.finish(index)
        await asyncio.gather(*night.tasks)

    asyncio.run(main())


def test_a_cell_waiting_to_try_again_gives_its_place_up_and_comes_back_first_of_its_endpoint() -> None:
    async def main() -> None:
        cells = endpoint_by_endpoint(2, 3)
        schedule = CellSchedule(cells, 2)
        retried = asyncio.Event()
        taken_back = asyncio.Event()
        release_rest = asyncio.Event()
        fail = asyncio.Event()

        async def cell(planned: PlannedCell) -> None:
            async with schedule.place(planned) as place:
                if planned.index == 0:
                    await fail.wait()  # it failed for a passing reason
                    await place.release()
                    retried.set()
                    await settle()  # its wait before trying again
                    await place.acquire()
                    taken_back.set()
                await release_rest.wait()

        tasks = [asyncio.create_task(cell(c)) for c in cells]
        await settle()
        assert [c.index for c in schedule.started] == [0, 3]
        fail.set()
        await retried.wait()
        await settle()
        # cell 0 gave its place up: endpoint 0's next cell (1) took it, and cell 0 waits first in line
        assert [c.index for c in schedule.started] == [0, 3, 1]
        assert not taken_back.is_set()
        release_rest.set()
        await asyncio.gather(*tasks)
        started = [c.index for c in schedule.started]
        assert started.count(0) == 2 and started.index(0, 1) < started.index(2)  # before its endpoint's next

    asyncio.run(main())


def test_a_judged_cell_gives_its_place_to_the_next_while_it_writes_its_results() -> None:
    """Once its calls are done a cell's place goes to the next cell; no cell starts while as many cells
    are finishing as there are places (memory: at most twice the places alive)."""

    async def main() -> None:
        cells = endpoint_by_endpoint(1, 6)
        schedule = CellSchedule(cells, 2)
        judge = {cell.index: asyncio.Event() for cell in cells}
        finish = {cell.index: asyncio.Event() for cell in cells}

        async def cell(planned: PlannedCell) -> None:
            async with schedule.place(planned) as place:
                await judge[planned.index].wait()
                place.judged()
                await finish[planned.index].wait()

        tasks = [asyncio.create_task(cell(c)) for c in cells]
        await settle()
        assert [c.index for c in schedule.started] == [0, 1]
        judge[0].set()
        await settle()
        assert [c.index for c in schedule.started] == [0, 1, 2]  # 0 writes its results, 2 judges
        judge[1].set()
        judge[2].set()
        await settle()
        assert [c.index for c in schedule.started] == [0, 1, 2]  # 3 finishing, 2 places: none starts
        finish[0].set()
        await settle()
        assert [c.index for c in schedule.started] == [0, 1, 2]  # still 2 finishing
        finish[1].set()
        await settle()
        assert [c.index for c in schedule.started] == [0, 1, 2, 3, 4]  # 1 finishing, 2 places free
        for index in range(6):
            judge[index].set()
            finish[index].set()
        await asyncio.gather(*tasks)
        assert [c.index for c in schedule.started] == list(range(6))

    asyncio.run(main())


def test_cells_start_ahead_of_their_place_and_a_ready_cell_is_not_held_back_by_one_still_starting() -> None:
    """A cell is started ahead (its subflow run created, its data ready) while the places are busy, at
    most `places` at once, and takes its place only when it is ready to call: a cell still starting
    (a busy Prefect server takes seconds to create its run) holds no place, and another endpoint's ready
    cell with as much work left takes the free one. A cell that ends before calling frees its turn for
    the next."""

    async def main() -> None:
        cells = endpoint_by_endpoint(2, 3)
        schedule = CellSchedule(cells, 2)
        ready = {cell.index: asyncio.Event() for cell in cells}
        judged = {cell.index: asyncio.Event() for cell in cells}
        ahead_now, most_ahead = 0, 0

        async def cell(planned: PlannedCell) -> None:
            nonlocal ahead_now, most_ahead
            async with schedule.ahead(planned) as place:
                ahead_now += 1
                most_ahead = max(most_ahead, ahead_now)
                await ready[planned.index].wait()
                if planned.index == 4:  # fails before its first call
                    ahead_now -= 1
                    return
                await place.acquire()
                ahead_now -= 1
                await judged[planned.index].wait()
                place.judged()

        tasks = [asyncio.create_task(cell(c)) for c in cells]
        await settle()
        assert [c.index for c in schedule.started_ahead] == [0, 3]  # one per endpoint, none placed yet
        assert schedule.started == []
        ready[3].set()
        await settle()
        assert [c.index for c in schedule.started] == [3]  # cell 0 still starting does not hold it back
        assert [c.index for c in schedule.started_ahead] == [0, 3, 1]  # the freed turn: endpoint 0's next
        ready[1].set()
        await settle()
        assert [c.index for c in schedule.started] == [3, 1]
        ready[0].set()
        await settle()
        assert [c.index for c in schedule.started] == [3, 1]  # both places taken: cell 0 waits, ready
        judged[3].set()
        await settle()
        # endpoint 1, with no cell in flight and more work left per cell, has cell 4 starting: the place
        # waits for it, not for endpoint 0's ready cell 0
        assert [c.index for c in schedule.started] == [3, 1]
        ready[4].set()  # endpoint 1's next ends before calling: its turn goes on to cell 5
        for index in (0, 1, 2, 5):
            ready[index].set()
            judged[index].set()
        await asyncio.gather(*tasks)
        assert sorted(c.index for c in schedule.started) == [0, 1, 2, 3, 5]
        assert sorted(c.index for c in schedule.started_ahead) == list(range(6))
        assert most_ahead <= 2

    asyncio.run(main())


def test_a_place_waits_for_the_cell_of_the_endpoint_that_needs_it_most() -> None:
    """Endpoint 1 has no cell in flight and its first is still starting; endpoint 0 has one calling and
    its second ready: the free place waits for endpoint 1's cell instead of giving endpoint 0 a second
    (seen in a night: an endpoint whose cells were ready last called 16 s late, the night 6 s longer)."""

    async def main() -> None:
        cells = endpoint_by_endpoint(2, 3)  # cells 0-2 on endpoint 0, 3-5 on endpoint 1
        schedule = CellSchedule(cells, 3)
        ready = {cell.index: asyncio.Event() for cell in cells}
        judged = {cell.index: asyncio.Event() for cell in cells}

        async def cell(planned: PlannedCell) -> None:
            async with schedule.ahead(planned) as place:
                await ready[planned.index].wait()
                await place.acquire()
                await judged[planned.index].wait()
                place.judged()

        tasks = [asyncio.create_task(cell(c)) for c in cells]
        await settle()
        ready[0].set()
        await settle()
        assert [c.index for c in schedule.started] == [0]
        ready[1].set()
        await settle()
        assert 1 in [c.index for c in schedule.started_ahead]
        assert [c.index for c in schedule.started] == [0]  # two places free, both held for endpoint 1
        ready[3].set()
        await settle()
        assert [c.index for c in schedule.started] == [0, 3, 1]  # endpoint 1 first, then the third place
        for index in range(6):
            ready[index].set()
            judged[index].set()
        await asyncio.gather(*tasks)
        assert sorted(c.index for c in schedule.started) == list(range(6))

    asyncio.run(main())


def test_half_the_places_start_at_once() -> None:
    """Each start is writes on the Prefect server (a subflow run): with 8 places, 4 cells start at a
    time, one per endpoint; as they become ready to call, the next start."""

    async def main() -> None:
        cells = endpoint_by_endpoint(4, 6)
        schedule = CellSchedule(cells, 8)
        ready = {cell.index: asyncio.Event() for cell in cells}

        async def cell(planned: PlannedCell) -> None:
            async with schedule.ahead(planned) as place:
                await ready[planned.index].wait()
                await place.acquire()
                place.judged()

        tasks = [asyncio.create_task(cell(c)) for c in cells]
        await settle()
        first = [c.endpoint for c in schedule.started_ahead]
        assert sorted(first) == [f"endpoint-{e}" for e in range(4)]
        for c in list(schedule.started_ahead):
            ready[c.index].set()
        await settle()
        assert len(schedule.started_ahead) == 8
        for event in ready.values():
            event.set()
        await asyncio.gather(*tasks)
        assert len(schedule.started) == 24

    asyncio.run(main())

"""A pool night's budget in the results database (data/night_budget.py): cell runs in separate processes
reserve their worst cases at once, on SQLite and PostgreSQL; never more than the budget is held or
spent, and what a cell did not spend is there for the cells after it."""

from __future__ import annotations

import multiprocessing

import pytest

from judgebench_flows.data.night_budget import NightBudget, NightBudgetRefused
from tests.test_db import postgresql_url, sqlite_url  # noqa: F401  (fixtures)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request) -> str:
    return request.getfixturevalue(f"{request.param}_url")


def _reserve(args: tuple[str, str, str, float]) -> bool:
    """One cell run's reservation, in its own process with its own connections."""
    url, night, cell, worst = args
    try:
        NightBudget(url, night, cell).reserve(worst)
    except NightBudgetRefused:
        return False
    return True


def test_cells_reserving_at_once_never_hold_more_than_the_budget(db_url):
    night = NightBudget(db_url, "night-1")
    night.open(1.0)
    cells = [(db_url, "night-1", f"cell-{i}", 0.3) for i in range(8)]
    with multiprocessing.get_context("spawn").Pool(4) as pool:  # 8 cell runs, 4 at once
        granted = pool.map(_reserve, cells)
    assert sum(granted) == 3  # 3 x $0.30 fit in $1.00, a 4th would not
    totals = night.totals()
    assert totals is not None and totals.held == pytest.approx(0.9) and totals.spent == 0


def test_what_a_cell_did_not_spend_goes_to_the_cells_after_it(db_url):
    night = NightBudget(db_url, "night-2")
    night.open(1.0)
    first, second, third = (NightBudget(db_url, "night-2", f"cell-{i}") for i in range(3))
    assert first.reserve(0.6) == 0.6
    with pytest.raises(NightBudgetRefused, match=r"\$0\.40.* left of max_cost \$1\.00.*worst case \$0\.60"):
        second.reserve(0.6)  # an up-front split would refuse it for good
    first.settle(0.1)  # the first cell spent $0.10 of its $0.60
    assert second.reserve(0.6) == 0.6
    second.settle(0.55)
    with pytest.raises(NightBudgetRefused):
        third.reserve(0.4)  # 1.00 - 0.10 - 0.55 = 0.35 left
    assert third.reserve(0.35) == 0.35
    third.settle(0.35)
    totals = night.totals()
    assert totals is not None and totals.spent == pytest.approx(1.0) and totals.held == 0 and totals.left == 0


def test_a_cell_run_again_replaces_its_reservation_and_keeps_what_it_spent(db_url):
    night = NightBudget(db_url, "night-3")
    night.open(1.0)
    cell = NightBudget(db_url, "night-3", "cell")
    cell.reserve(0.8)  # its process dies: the reservation stays held, never more than the budget
    other = NightBudget(db_url, "night-3", "other")
    with pytest.raises(NightBudgetRefused):
        other.reserve(0.3)
    cell.reserve(0.5)  # the cell run again: its new worst case replaces the old reservation
    other.reserve(0.3)
    cell.settle(0.2)
    totals = night.totals()
    assert totals is not None and (round(totals.spent, 6), round(totals.held, 6)) == (0.2, 0.3)

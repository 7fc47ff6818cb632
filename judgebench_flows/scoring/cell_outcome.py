"""How one configuration of a night ended, as plain data: what the night's summary (views/night_summary.py),
its event (flows/events.py) and its flow's result say of each cell, whether it ran in the night's process
(flows/nightly.py) or on the pool (flows/pool_cells.py). It sits here, below the views and the flows, so
both read it; flows/outcomes.py builds it from a cell's results or state."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

RunStatus = Literal["completed", "regressed", "failed"]


class CellOutcome(BaseModel):
    """How one configuration ended, for the summary artifact and the flow's return value."""

    name: str  # the cell's folder name (judge__model__data file): unique in its matrix
    status: RunStatus
    title: str = ""  # as people read it: judge, model, data file (its run's name without the night's date)
    run_id: str | None = None
    flow_run_id: str | None = None
    accuracy: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    n_pairs: int | None = None
    judgments: int | None = None
    failed_judgments: int | None = None
    invalid_judgments: int | None = None
    # Dollars the cell's calls cost (None: unpriced, or it stopped before reporting); `unpriced` tells which.
    cost_usd: float | None = None
    unpriced: bool = False
    result_path: str
    message: str | None = None
    # Where its answers came from (results.json's `run.cache` in one line; None before judging).
    from_cache: str | None = None
    transient: bool = False  # failed for a reason a second attempt may not meet (flows/retries.py)
    # What the endpoint said differently from the baseline run (results.json's `drift.message`), when it did.
    drift: str | None = None
    # The endpoint whose limit it shared, how long it waited for a place among the cells in flight and
    # how long it then took (seconds; None in outcomes read back from an earlier version).
    endpoint: str = ""
    wait_s: float | None = None
    duration_s: float | None = None
    # Its regression check: the drop it could detect 80% of the time, and the night's false-alarm rate
    # it held a share of (results.json's `regression.detectable_drop`, `.false_alarm_rate`; None without).
    detectable_drop: float | None = None
    alert_rate: float | None = None
    # Its sequential test (results.json's `regression.sequential`): the nights a persistent 5-point drop
    # takes to be caught 90% of the time, and the flagged change in words while flagged.
    nights_to_detect: int | None = None
    flagged: str | None = None


__all__ = ["CellOutcome", "RunStatus"]

"""What a run's calls counted and cost, for results.json's `usage` and the results database: calls paid,
attempts and errors where this process sent them, paid and cached calls on Dask from the call cache's
payer column, the cost at the run's prices (None when unpriced, never 0), and the worst case checked
against `--max-cost` (and reserved from a pool night's budget) before the first call. The judging flow
(flows/judgebench_flow.py) asks these; each number's rule lives here."""

from __future__ import annotations

from prefect import get_run_logger
from pydantic import JsonValue
from sqlalchemy.engine import Engine
from typing_extensions import Required, TypedDict

from judgebench_flows.calls.caller import CallStats
from judgebench_flows.core.config import RunConfig
from judgebench_flows.core.pricing import NightSpend, cost_usd, format_usd, split_cost
from judgebench_flows.data import db
from judgebench_flows.data.loading import PairIndex
from judgebench_flows.judging.run_context import NightShare
from judgebench_flows.judging.shards import JudgeSpec
from judgebench_flows.scoring.metrics import Tally


class CallCounts(TypedDict, total=False):
    """results.json's `usage` counts of calls, where this process knows them (`usage_of_calls`)."""

    paid_calls: int
    attempts: int | None
    errors: int | None
    cached_calls: int


class CallCost(TypedDict, total=False):
    """results.json's `usage.cost_usd` and `usage.prices`, and a batch run's calls sent synchronously."""

    cost_usd: Required[float | None]
    prices: Required[dict[str, JsonValue] | None]  # the `PricedAs` entry used, as JSON
    synchronous_calls: int
    synchronous_cost_usd: float


class RunUsage(CallCounts, CallCost, total=False):
    """results.json's `usage` beyond what the records count (`usage_of_run`)."""


def cost_of_calls(
    spec: JudgeSpec, sent: CallStats | None, tally: Tally, paid: tuple[int, int, int] | None = None
) -> CallCost:
    """results.json's `usage.cost_usd` (None: unpriced, never 0) and `usage.prices` (the entry used).

    Paid tokens only: this process's clients count the calls they sent (a cache hit sends none); on Dask
    the answers the call cache holds as paid by this run (`paid`, see `usage_on_dask`), else the records
    (judgments none of whose calls came from a cache)."""
    synchronous = sent.synchronous if sent is not None else 0
    if spec.price is None:
        unpriced: CallCost = {"cost_usd": None, "prices": None}
        if synchronous:
            unpriced["synchronous_calls"] = synchronous
        return unpriced
    if sent is not None:
        prompt, completion = sent.prompt_tokens, sent.completion_tokens
    elif paid is not None and paid[0] >= tally.usage["paid_calls"]:
        prompt, completion = paid[1], paid[2]
    else:
        prompt, completion = tally.usage["paid_prompt_tokens"], tally.usage["paid_completion_tokens"]
    if synchronous and sent is not None:  # a batch run past its deadline: those calls at the synchronous price
        sync_tokens = (sent.synchronous_prompt_tokens, sent.synchronous_completion_tokens)
        return {
            "cost_usd": round(split_cost(spec.price, prompt, completion, *sync_tokens), 6),
            "prices": spec.price.model_dump(),
            "synchronous_calls": synchronous,
            "synchronous_cost_usd": round(cost_usd(spec.price, *sync_tokens, False), 6),
        }
    return {"cost_usd": round(spec.price.cost(prompt, completion), 6), "prices": spec.price.model_dump()}


def priced_as(spec: JudgeSpec) -> str:
    """The results database's note of how a run was priced: the entry and its date, or "unpriced"."""
    if spec.price is None:
        return "unpriced"
    return f"{spec.price.model}{' batch' if spec.price.batch else ''} read {spec.price.read_on or '?'}"


def check_worst_case(
    config: RunConfig, spec: JudgeSpec, index: PairIndex, engine: Engine, night: NightShare | None = None
) -> None:
    """With --max-cost, the run's worst case (what the call cache does not answer) against it before
    any call (refused: exit 2); a pool night's cell (`night.budget`) then reserves it in the night's
    budget and runs with that reservation as its limit (data/night_budget.py)."""
    if config.max_cost is None or not config.needs_endpoint:
        return
    from judgebench_flows.judging.estimate import check_budget, worst_case

    estimate = worst_case(spec, index.path, index.offsets, engine)
    check_budget(estimate, config.max_cost, config.prices)
    get_run_logger().info("worst case %s within --max-cost %s", estimate.worst_usd, config.max_cost)
    if night is not None and night.budget is not None:  # a pool night's cell: its worst case reserved there
        if night.spend is not None:  # an earlier attempt of this cell run: what it spent counts first
            night.budget.settle(night.spend.spent)
            night.spend = None
        granted = night.budget.reserve(estimate.worst_usd or 0.0)
        night.spend = NightSpend(max_cost=max(granted, 1e-9))
        get_run_logger().info("reserved %s of the night's budget", format_usd(granted))


def usage_of_calls(sent: CallStats | None) -> CallCounts:
    """Paid calls are the calls this run sent that were answered, counted where they were sent: a
    judgment from a cache paid nothing. Attempts are requests
    sent, retries included; errors are attempts that got no answer. Unknown on Dask (None)."""
    if sent is None:
        return {"attempts": None, "errors": None}
    return {"paid_calls": sent.answered, "attempts": sent.attempts, "errors": sent.attempts - sent.answered}


def usage_on_dask(paid: tuple[int, int, int] | None, tally: Tally) -> CallCounts:
    """Paid and cached calls of a Dask run, counting what its lost attempts paid.

    A worker that dies mid-shard has paid for the answers it already wrote to the call cache; the shard's
    retry elsewhere reads them from there, so its records call them cached. The call cache notes the run
    that paid each answer (`paid`: this run's answers, tokens), so they count as paid, not cached."""
    if paid is None or paid[0] < tally.usage["paid_calls"]:  # no call cache to ask: the records say it
        return {}
    lost_attempts = paid[0] - tally.usage["paid_calls"]
    return {"paid_calls": paid[0], "cached_calls": max(0, tally.usage["cached_calls"] - lost_attempts)}


def usage_of_run(engine: Engine, run_id: str, spec: JudgeSpec, sent: CallStats | None, tally: Tally) -> RunUsage:
    """results.json's `usage` beyond the records': calls sent and what they cost."""
    paid = db.paid_by_run(engine, run_id) if sent is None else None
    on_dask = usage_on_dask(paid, tally) if sent is None else CallCounts()
    return {**usage_of_calls(sent), **on_dask, **cost_of_calls(spec, sent, tally, paid)}


__all__ = [
    "CallCost",
    "CallCounts",
    "RunUsage",
    "check_worst_case",
    "cost_of_calls",
    "priced_as",
    "usage_of_calls",
    "usage_of_run",
    "usage_on_dask",
]

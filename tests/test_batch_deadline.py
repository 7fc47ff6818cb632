"""A batch run's deadline and its expiry cap, against the bundled batch servers: at the deadline an
open batch is cancelled at the provider and its requests are sent synchronously (marked, and priced
at the synchronous price); a provider that expires every batch gets each request in at most three
batches, then synchronously."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from judgebench_flows.calls.batch import MAX_BATCHES_PER_LINE
from judgebench_flows.core.config import RunConfig
from judgebench_flows.core.pricing import PricedAs, Spend, split_cost
from judgebench_flows.testing.fake_batches import FakeAnthropicBatchServer, FakeBatchServer
from tests.test_batch import anthropic_batch_caller, batch_caller, judge_all


def _in(seconds: float) -> str:
    return (datetime.now(timezone.utc) + timedelta(seconds=seconds)).isoformat()


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_batch_that_never_finishes_is_cancelled_at_the_deadline_and_judged_synchronously(kind: str) -> None:
    server_class = FakeBatchServer if kind == "openai" else FakeAnthropicBatchServer
    with server_class("[[A>B]]", hold=True) as server:
        caller = batch_caller(server) if kind == "openai" else anthropic_batch_caller(server)
        caller.transport.deadline = datetime.fromisoformat(_in(1.5)).timestamp()  # type: ignore[attr-defined]
        answers = judge_all(caller, 12)
        assert [getattr(a, "text", a) for a in answers] == ["[[A>B]]"] * 12
        assert all(a.synchronous for a in answers)
        assert server.batches_created == 1 and server.cancelled_batches == 1
        assert server.requests == 12 and not server.answered_lines  # each request paid once, synchronously
    assert caller.stats.synchronous == 12 and caller.stats.answered == 12


def test_the_deadline_reaches_the_batch_wire_from_the_settings() -> None:
    with FakeBatchServer("[[A>B]]", hold=True) as server:
        config = RunConfig(model="o1-mini", base_url=server.base_url, batch=True, batch_deadline=_in(1.0))
        caller = batch_caller(server, batch_deadline=config.endpoint.batch_deadline)
        answers = judge_all(caller, 3)
        assert all(a.synchronous for a in answers) and server.cancelled_batches == 1


def test_requests_posted_after_the_deadline_go_synchronous_at_once() -> None:
    with FakeBatchServer("[[A>B]]") as server:
        caller = batch_caller(server)
        caller.transport.deadline = 0.0  # type: ignore[attr-defined]  # long past
        answers = judge_all(caller, 4)
        assert all(a.synchronous for a in answers)
        assert server.batches_created == 0 and server.requests == 4


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_server_that_expires_every_batch_gets_each_request_three_times_then_synchronously(kind: str) -> None:
    server_class = FakeBatchServer if kind == "openai" else FakeAnthropicBatchServer
    with server_class("[[A>B]]", expire_after=0) as server:
        caller = batch_caller(server) if kind == "openai" else anthropic_batch_caller(server)
        answers = judge_all(caller, 10)
        assert [getattr(a, "text", a) for a in answers] == ["[[A>B]]"] * 10
        assert set(server.submitted_lines.values()) == {MAX_BATCHES_PER_LINE} == {3}
        assert server.batches_created == 3 and server.requests == 10
    assert caller.stats.synchronous == 10 and caller.stats.retries == 0


def test_synchronous_answers_of_a_batch_run_pay_the_synchronous_price() -> None:
    price = PricedAs(model="m", input_per_mtok=2.0, output_per_mtok=8.0, batch=True, batch_discount=0.5)
    spend = Spend(price)
    spend.charge(1_000_000, 0)  # batched: half price
    spend.charge(1_000_000, 1_000_000, synchronous=True)  # past the deadline: full price
    assert spend.spent == pytest.approx(1.0 + 2.0 + 8.0)
    assert split_cost(price, 2_000_000, 1_000_000, 1_000_000, 1_000_000) == spend.spent


@pytest.mark.parametrize(
    "value, message",
    [
        ("tomorrow", "ISO 8601"),
        ("2026-11-26T07:00:00", "UTC offset"),
    ],
)
def test_a_bad_batch_deadline_is_refused(value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RunConfig(model="m", batch=True, batch_deadline=value)


def test_cells_side_by_side_count_their_spending_against_the_nights_budget() -> None:
    from judgebench_flows.core.pricing import BudgetReached, NightSpend

    price = PricedAs(model="m", input_per_mtok=1.0, output_per_mtok=0.0)
    night = NightSpend(max_cost=1.5)
    a, b = Spend(price, max_cost=1.0, night=night), Spend(price, max_cost=1.0, night=night)
    a.charge(800_000, 0)
    b.charge(800_000, 0)  # each cell within its own budget, the two together past the night's
    assert night.spent == pytest.approx(1.6)
    with pytest.raises(BudgetReached, match="the night's budget is reached"):
        a.check()

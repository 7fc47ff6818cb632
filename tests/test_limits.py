"""The limits on calls in flight beyond one event loop: the Prefect global concurrency and rate limits
(against the session's real Prefect server) and the adaptive in-process limit (against the real test
endpoint answering 429s)."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

import pytest

from judgebench_flows.calls.caller import ChatCaller
from judgebench_flows.calls.global_limits import (
    GlobalLimitError,
    SlotLeases,
    endpoint_slots,
    ensure_limit,
    ensure_limits,
    limit_names,
    repair_limit,
)
from judgebench_flows.calls.limits import AdaptiveLimit
from judgebench_flows.calls.retry import RetryPolicy
from judgebench_flows.core.errors import UserError
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._helpers import chat_caller


def caller(server: FakeOpenAIServer, **options: Any) -> ChatCaller:
    return chat_caller(
        base_url=server.base_url,
        model="judge-model",
        api_key="sk-test",
        retry=RetryPolicy(max_retries=5, initial_wait=0.01, max_wait=0.2),
        **options,
    )


def messages(tag: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Which answer is better? ({tag})"}]


def test_limit_names_are_stable_per_endpoint_and_model_and_reveal_neither():
    concurrency, rate = limit_names("https://user:sk-secret-123@api.example.com/v1/", "gpt-4o")
    assert (concurrency, rate) == limit_names("https://user:sk-secret-123@api.example.com/v1", "gpt-4o")
    assert (
        rate == concurrency + "-rpm"
        and concurrency.startswith("judgebench-")
        and len(concurrency) == len("judgebench-") + 12
    )
    assert not any(part in concurrency for part in ("sk-secret", "example", "user", "gpt"))
    assert (
        limit_names("https://api.example.com/v1", "gpt-4o-mini")[0]
        != limit_names("https://api.example.com/v1", "gpt-4o")[0]
    )


def test_adaptive_limit_halves_once_per_burst_never_below_one_and_grows_back():
    async def go() -> None:
        limit = AdaptiveLimit(8)
        epochs = [await limit.acquire() for _ in range(8)]
        for epoch in epochs:  # eight 429s to calls sent under the same limit: one cut
            limit.rate_limited(epoch)
        assert limit.limit == 4
        for _ in epochs:
            limit.release()
        limit.rate_limited(await limit.acquire())
        limit.release()
        assert limit.limit == 2
        for _ in range(3):
            limit.rate_limited(await limit.acquire())
            limit.release()
        assert limit.limit == limit.lowest == 1
        for _ in range(1 + 2):  # one success at limit 1, then two at limit 2
            limit.succeeded()
        assert limit.limit == 3

    asyncio.run(go())


def test_adaptive_concurrency_backs_off_on_429_and_loses_nothing():
    with FakeOpenAIServer("[[A>B]]", latency=0.02, fail_first=1, fail_kind="429", retry_after=0.01) as server:

        async def go() -> ChatCaller:
            chat = caller(server, concurrency=8, adaptive=True)
            results = await asyncio.gather(*(chat.complete(messages(f"burst {i}"), {}) for i in range(16)))
            assert all(r.text == "[[A>B]]" for r in results)
            await chat.aclose()
            return chat

        chat = asyncio.run(go())
    assert server.answered == 16 and server.status_counts[429] == 16
    assert chat.limits.adaptive is not None and chat.limits.adaptive.lowest < 8
    assert chat.stats.failed == 0


slow = pytest.mark.slow


async def read_limit(name: str):
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        return await client.read_global_concurrency_limit_by_name(name)


@slow
def test_endpoint_slots_bound_holders_in_several_event_loops(prefect_server):
    """Four holders in four event loops (as four workers or cells), 2 slots each, a limit of 3: one at a
    time, each gets its turn, and every slot is back at the end."""
    name = f"judgebench-test-{uuid.uuid4().hex[:8]}"
    asyncio.run(ensure_limit(name, 3))
    inside, most, lock = 0, 0, threading.Lock()

    def holder() -> None:
        async def go() -> None:
            nonlocal inside, most
            async with endpoint_slots(name, 2):
                with lock:
                    inside += 1
                    most = max(most, inside)
                await asyncio.sleep(0.3)
                with lock:
                    inside -= 1

        asyncio.run(go())

    threads = [threading.Thread(target=holder) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert most == 1
    assert asyncio.run(read_limit(name)).active_slots == 0


@slow
def test_slots_no_live_lease_holds_are_given_back_at_run_start(prefect_server):
    """Slots counted in the limit but held by no lease (what a restarted server with in-memory leases
    leaves behind) are given back by the next run's `ensure_limits`; slots a live holder leases stay."""
    from prefect.client.orchestration import get_client

    name = f"judgebench-test-{uuid.uuid4().hex[:8]}"
    asyncio.run(ensure_limit(name, 8))

    async def leak(slots: int) -> None:  # taken without a lease: nobody will ever give them back
        async with get_client() as client:
            await client.increment_concurrency_slots(names=[name], slots=slots, mode="concurrency")

    asyncio.run(leak(5))
    keeper = SlotLeases(name)
    handle = keeper.take(2)  # a live holder
    try:
        assert asyncio.run(read_limit(name)).active_slots == 7
        asyncio.run(ensure_limits(name, 8, None, None))
        assert asyncio.run(read_limit(name)).active_slots == 2
        assert repair_limit(name) == 0  # nothing more to give back
    finally:
        keeper.give_back(handle)
        keeper.close()
    assert asyncio.run(read_limit(name)).active_slots == 0


@slow
def test_limits_are_created_then_updated_and_a_missing_one_stops_the_run(prefect_server):
    name = f"judgebench-test-{uuid.uuid4().hex[:8]}"

    async def read(limit_name: str):
        from prefect.client.orchestration import get_client

        async with get_client() as client:
            return await client.read_global_concurrency_limit_by_name(limit_name)

    asyncio.run(ensure_limits(name, 4, name + "-rpm", 120.0))
    assert asyncio.run(read(name)).limit == 4 and asyncio.run(read(name)).slot_decay_per_second == 0
    rate = asyncio.run(read(name + "-rpm"))
    assert rate.limit == 1 and rate.slot_decay_per_second == pytest.approx(2.0)
    asyncio.run(ensure_limits(name, 6, None, None))
    assert asyncio.run(read(name)).limit == 6

    async def go() -> BaseException | None:
        try:
            async with endpoint_slots(f"judgebench-missing-{uuid.uuid4().hex[:8]}", 1):
                return None
        except Exception as exc:
            return exc

    error = asyncio.run(go())
    assert isinstance(error, GlobalLimitError) and isinstance(error, UserError)
    assert "does not exist" in str(error)


@slow
def test_rate_limit_spaces_calls_across_callers(prefect_server):
    name = f"judgebench-test-{uuid.uuid4().hex[:8]}-rpm"
    asyncio.run(ensure_limits(None, 0, name, 600.0))  # 10 per second
    with FakeOpenAIServer("[[A>B]]") as server:

        async def go() -> float:
            chats = [caller(server, global_rate_limit=name) for _ in range(2)]
            started = time.perf_counter()
            await asyncio.gather(*(chats[i % 2].complete(messages(f"rate {i}"), {}) for i in range(6)))
            for chat in chats:
                await chat.aclose()
            return time.perf_counter() - started

        elapsed = asyncio.run(go())
    assert server.answered == 6
    assert elapsed >= 0.45  # six calls at 10 per second: at least five intervals of 0.1 s

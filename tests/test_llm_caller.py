"""ChatCaller against a real OpenAI-compatible server: retries, fatal errors, the connection limit, the cache.

Every test talks HTTP to `FakeOpenAIServer` on loopback through the real `openai` client, so what is
checked here is what happens on a socket: Retry-After headers, 5xx bodies, dropped connections, hung
requests. Retry waits are shrunk with `RetryPolicy` to keep the file fast; the server's counters prove how
many requests were really sent ("nothing lost, nothing paid twice").
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from judgebench_flows.calls.retry import RetryPolicy
from judgebench_flows.core.errors import FatalEndpointError
from judgebench_flows.core.records import Pair
from judgebench_flows.data import db
from judgebench_flows.judges import get_judge
from judgebench_flows.judges.procedure import CallFailed
from judgebench_flows.judging.shards import Runtime, judge_pair
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._helpers import chat_caller

SERVER_KEY = "sk-server-side-key-0123456789"
CALLER_KEY = "sk-caller-side-key-9876543210"
MESSAGES = [{"role": "user", "content": "Which answer is better?"}]
SAMPLING: dict[str, Any] = {"temperature": 0.0}


def fast_retries(max_retries: int = 5) -> RetryPolicy:
    return RetryPolicy(max_retries=max_retries, initial_wait=0.01, max_wait=0.5)


@pytest.fixture()
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer("My final verdict is [[A>B]]") as fake:
        yield fake


def call(server: FakeOpenAIServer, messages: list[dict[str, str]] = MESSAGES, **caller_options: Any):
    """One `complete` through a fresh caller; returns (completion or exception, elapsed seconds, caller)."""

    async def go():
        options = {"api_key": "sk-test", "retry": fast_retries(), **caller_options}
        caller = chat_caller(base_url=server.base_url, model="judge-model", **options)
        started = time.perf_counter()
        try:
            result: Any = await caller.complete(messages, SAMPLING)
        except Exception as exc:  # returned so the test can assert on its type and message
            result = exc
        finally:
            await caller.aclose()
        return result, time.perf_counter() - started, caller

    return asyncio.run(go())


# ----- retries ---------------------------------------------------------------------------------------


def test_429_is_retried_and_waits_at_least_retry_after(server: FakeOpenAIServer) -> None:
    server.configure(fail_first=1, fail_kind="429", retry_after=0.3)
    result, elapsed, caller = call(server)
    assert result.text == "My final verdict is [[A>B]]"
    assert elapsed >= 0.3, f"retried after {elapsed:.3f}s, before the server's Retry-After of 0.3s"
    assert server.status_counts == {429: 1, 200: 1}
    assert caller.stats.retries == 1


def test_retry_after_longer_than_max_wait_is_still_honoured(server: FakeOpenAIServer) -> None:
    """max_wait bounds our own backoff; retrying before the server allows only earns another 429."""
    server.configure(fail_first=1, fail_kind="429", retry_after=0.3)
    result, elapsed, _ = call(server, retry=RetryPolicy(max_retries=3, initial_wait=0.01, max_wait=0.05))
    assert result.text == "My final verdict is [[A>B]]"
    assert elapsed >= 0.3, elapsed
    assert server.status_counts == {429: 1, 200: 1}


@pytest.mark.parametrize("kind", ["500", "503", "drop"])
def test_server_errors_and_dropped_connections_are_retried(server: FakeOpenAIServer, kind: str) -> None:
    server.configure(fail_first=2, fail_kind=kind)
    result, _, caller = call(server)
    assert result.text == "My final verdict is [[A>B]]"
    assert server.requests == 3
    assert server.answered == 1
    assert caller.stats.retries == 2


def test_hung_request_times_out_and_is_retried(server: FakeOpenAIServer) -> None:
    server.configure(fail_first=1, fail_kind="hang", hang_seconds=30)
    result, elapsed, _ = call(server, request_timeout=0.3)
    assert result.text == "My final verdict is [[A>B]]"
    assert 0.3 <= elapsed < 15, elapsed  # the timeout ended it, not the 30 s hang (any machine load)
    assert server.status_counts.get("hang") == 1 and server.answered == 1


def test_exhausted_retries_raise_call_failed_naming_the_attempts(server: FakeOpenAIServer) -> None:
    server.configure(rate_503=1.0)
    result, _, caller = call(server, retry=fast_retries(max_retries=2))
    assert isinstance(result, CallFailed), result
    assert "503" in str(result) and "3 attempts" in str(result)
    assert server.requests == 3 and server.answered == 0
    assert caller.stats.failed == 1


# ----- errors that must not be retried ---------------------------------------------------------------


def test_wrong_key_is_fatal_and_the_message_holds_neither_key(server: FakeOpenAIServer) -> None:
    server.configure(api_key=SERVER_KEY)
    result, _, _ = call(server, api_key=CALLER_KEY)
    assert isinstance(result, FatalEndpointError), result
    message = str(result)
    assert "key" in message.lower()
    assert SERVER_KEY not in message and CALLER_KEY not in message
    assert server.requests == 1, "a rejected key must not be retried"


def test_unknown_model_is_fatal(server: FakeOpenAIServer) -> None:
    server.configure(models={"some-other-model"})
    result, _, _ = call(server)
    assert isinstance(result, FatalEndpointError), result
    assert "judge-model" in str(result)
    assert server.requests == 1


def test_context_too_long_fails_that_call_with_its_reason_and_is_not_retried(server: FakeOpenAIServer) -> None:
    server.configure(max_context_chars=10)
    result, _, caller = call(server)
    assert isinstance(result, CallFailed), result
    assert "context_length_exceeded" in str(result)
    assert "attempts" not in str(result)
    assert server.requests == 1, "a 400 must not be retried"
    assert caller.stats.retries == 0


# ----- the connection limit --------------------------------------------------------------------------


def test_concurrency_limit_bounds_requests_in_flight(server: FakeOpenAIServer) -> None:
    """20 calls of 0.2 s through 4 slots take 5 rounds; the responder also counts overlap directly."""
    lock = threading.Lock()
    in_flight = 0
    peak = 0

    def slow(body: dict) -> str:
        nonlocal in_flight, peak
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
        time.sleep(0.2)
        with lock:
            in_flight -= 1
        return "[[A>B]]"

    server.set_responder(slow)

    async def go() -> float:
        caller = chat_caller(
            base_url=server.base_url, model="judge-model", api_key="sk-test", concurrency=4, retry=fast_retries()
        )
        started = time.perf_counter()
        await asyncio.gather(*(caller.complete([{"role": "user", "content": f"q{i}"}], SAMPLING) for i in range(20)))
        elapsed = time.perf_counter() - started
        await caller.aclose()
        return elapsed

    elapsed = asyncio.run(go())
    assert peak == 4, f"{peak} requests were in flight at once with concurrency 4"
    assert 5 * 0.2 <= elapsed, elapsed  # 20 calls of 0.2 s, 4 at a time: at least 5 rounds
    assert server.answered == 20


# ----- the call cache --------------------------------------------------------------------------------


@pytest.fixture()
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'cache.db'}"


def cached_call(server: FakeOpenAIServer, db_url: str, mode: str, store: bool = False):
    """One call through a caller with the given cache mode; `store` remembers its answer like a judgment."""

    async def go():
        caller = chat_caller(
            base_url=server.base_url,
            model="judge-model",
            api_key="sk-test",
            retry=fast_retries(),
            engine=db.open_database(db_url),
            cache_mode=mode,
        )  # type: ignore[arg-type]
        completion = await caller.complete(MESSAGES, SAMPLING)
        if store:
            await caller.remember([completion])
        await caller.aclose()
        return completion

    return asyncio.run(go())


def cache_rows(db_url: str) -> dict[str, str]:
    with db.Session(db.open_database(db_url)) as session:
        return {row.key: row.response for row in session.exec(db.select(db.CallCacheRow))}


def test_remembered_answer_is_served_from_cache_without_a_request(server: FakeOpenAIServer, db_url: str) -> None:
    first = cached_call(server, db_url, "use", store=True)
    assert not first.cached and server.answered == 1
    server.reset_counters()
    second = cached_call(server, db_url, "use")
    assert second.cached and second.text == first.text
    assert (second.prompt_tokens, second.completion_tokens) == (first.prompt_tokens, first.completion_tokens)
    assert server.requests == 0


def test_cache_off_and_refresh_call_the_server_and_refresh_overwrites(server: FakeOpenAIServer, db_url: str) -> None:
    cached_call(server, db_url, "use", store=True)
    server.reset_counters()

    server.set_responder("My final verdict is [[B>A]]")
    off = cached_call(server, db_url, "off", store=True)
    assert not off.cached and server.requests == 1
    assert list(cache_rows(db_url).values()) == ["My final verdict is [[A>B]]"], "--no-cache must not write the cache"

    refreshed = cached_call(server, db_url, "refresh", store=True)
    assert not refreshed.cached and server.requests == 2
    assert list(cache_rows(db_url).values()) == ["My final verdict is [[B>A]]"], "--refresh-cache must overwrite"

    served = cached_call(server, db_url, "use")
    assert served.cached and served.text == "My final verdict is [[B>A]]" and server.requests == 2


PAIR = Pair(pair_id="p1", source="mmlu-pro-math", question="What is 2+2?", response_A="4", response_B="5", label="A>B")


def judge_once(server: FakeOpenAIServer, db_url: str, orders: tuple[int, ...] = (0, 1)):
    async def go():
        caller = chat_caller(
            base_url=server.base_url,
            model="judge-model",
            api_key="sk-test",
            retry=fast_retries(max_retries=1),
            engine=db.open_database(db_url),
            cache_mode="use",
        )
        records = await judge_pair(PAIR, Runtime(get_judge("arena_hard"), caller), orders)
        await caller.aclose()
        return records

    return asyncio.run(go())


def test_unparseable_answer_is_never_cached_and_is_asked_again(server: FakeOpenAIServer, db_url: str) -> None:
    server.set_responder("I am not sure which one is better.")
    records = judge_once(server, db_url)
    assert [r.status for r in records] == ["invalid", "invalid"]
    # Arena-Hard asks once more for a verdict label; both turns' raw text is kept, no decision is made up.
    assert all(r.response.count("I am not sure which one is better.") == 2 and r.decision == "" for r in records)
    assert cache_rows(db_url) == {}
    assert server.answered == 4

    server.reset_counters()
    server.set_responder("My final verdict is [[A>B]]")
    again = judge_once(server, db_url)
    assert server.answered == 2, "invalid verdicts must be asked again, not served from the cache"
    assert [r.status for r in again] == ["ok", "ok"]
    assert len(cache_rows(db_url)) == 2


def test_failed_call_is_never_cached_and_is_asked_again(server: FakeOpenAIServer, db_url: str) -> None:
    server.configure(rate_500=1.0)
    records = judge_once(server, db_url, orders=(0,))
    assert [r.status for r in records] == ["failed"]
    assert "500" in (records[0].error or "")
    assert cache_rows(db_url) == {}

    server.configure(rate_500=0.0)
    server.reset_counters()
    again = judge_once(server, db_url, orders=(0,))
    assert [r.status for r in again] == ["ok"] and server.answered == 1
    assert len(cache_rows(db_url)) == 1

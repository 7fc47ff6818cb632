"""Judging starts while Prefect starts: calls made ahead are taken by the flow's tasks, never repeated.

The flow runs in this process against the session's Prefect server, with `prefect_ready` held back for a
second, as a temporary server's boot would hold it. The endpoint's counters are the ledger.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import time
from pathlib import Path

from judgebench_flows.cli.head_start import LOOP_SWITCH_INTERVAL, judge_with_head_start
from judgebench_flows.cli.prefect_server import PrefectStart, start_prefect
from judgebench_flows.core.config import RunConfig
from judgebench_flows.testing.fake_openai import FakeOpenAIServer, request_key
from tests.conftest import GPT4O_FILE, SHARED, VERDICTS, oracle_responder, requires_shared

PAIRS = 40


def config_for(server: FakeOpenAIServer, tmp_path: Path, db: str = "results.db", **extra) -> RunConfig:
    return RunConfig(
        data_path=str(SHARED / "data" / GPT4O_FILE),
        max_samples=PAIRS,
        model="judge",
        base_url=server.base_url,
        concurrency=4,
        shard_size=10,
        db_url=f"sqlite:///{tmp_path / db}",
        result_path=str(tmp_path / "results.json"),
        output_dir=str(tmp_path / "run"),
        report=False,
        bootstrap_resamples=0,
        **extra,
    )


class HeldBack(PrefectStart):
    """The session's Prefect server, 'ready' only after `seconds`, as a temporary server's boot holds it."""

    def __init__(self, server: FakeOpenAIServer, seconds: float, until_first_call: bool = False) -> None:
        super().__init__(None, start_prefect().settings())
        self.server, self.seconds, self.requests_before_flow = server, seconds, -1
        self.until_first_call = until_first_call

    def wait_ready(self) -> None:
        time.sleep(self.seconds)
        deadline = time.monotonic() + 300  # a busy machine may plan the first calls later than `seconds`
        while self.until_first_call and self.server.requests == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        self.requests_before_flow = self.server.requests
        self.switch_interval = sys.getswitchinterval()


def run_held_back(config: RunConfig, server: FakeOpenAIServer, seconds: float = 1.0) -> tuple[dict, int]:
    """Run the flow with Prefect ready only after `seconds`; also returns how many requests the endpoint
    had seen by then."""
    prefect = HeldBack(server, seconds)
    results = asyncio.run(judge_with_head_start(config, prefect))
    return results, prefect.requests_before_flow


@requires_shared
def test_calls_made_ahead_are_taken_by_the_flow_not_repeated(prefect_server, gpt4o_pairs, tmp_path):
    with FakeOpenAIServer(oracle_responder(gpt4o_pairs, VERDICTS["arena_hard"]), latency=0.05) as server:
        default_switch = sys.getswitchinterval()
        prefect = HeldBack(server, 1.0, until_first_call=True)
        results = asyncio.run(judge_with_head_start(config_for(server, tmp_path), prefect))
        ahead = prefect.requests_before_flow
        assert 0 < ahead < 2 * PAIRS, "some calls were made before the flow started, not all"
        assert prefect.switch_interval == LOOP_SWITCH_INTERVAL < default_switch, (
            "the loop takes the interpreter back sooner"
        )
        assert sys.getswitchinterval() == default_switch, "and the process's setting is restored afterwards"
        assert server.answered == server.requests == 2 * PAIRS
        assert set(server.answered_keys().values()) == {1}, "no request was sent twice"
        assert server.max_in_flight <= 4, "calls made ahead share the run's concurrency limit"
    assert results["usage"]["paid_calls"] == 2 * PAIRS and results["usage"]["cached_calls"] == 0
    assert results["overall_accuracy"]["accuracy"] == 1.0 and results["invalid"]["failed_judgments"] == 0


@requires_shared
def test_no_calls_ahead_for_shards_that_prefect_serves_from_its_cache(prefect_server, gpt4o_pairs, tmp_path):
    with FakeOpenAIServer(oracle_responder(gpt4o_pairs, VERDICTS["arena_hard"]), latency=0.02) as server:
        first, _ = run_held_back(config_for(server, tmp_path, seed=4242), server, seconds=0)
        assert first["usage"]["paid_calls"] == 2 * PAIRS
        server.reset_counters()
        # A new results database has no call cache, but Prefect still holds every shard's result.
        again, ahead = run_held_back(config_for(server, tmp_path, db="fresh.db", seed=4242), server)
        assert ahead == 0 and server.requests == 0
    assert again["usage"]["cached_calls"] == 2 * PAIRS
    assert again["overall_accuracy"] == first["overall_accuracy"]


@requires_shared
def test_a_call_that_fails_ahead_is_retried_by_its_shard_not_recorded(prefect_server, gpt4o_pairs, tmp_path):
    responder = oracle_responder(gpt4o_pairs, VERDICTS["arena_hard"])
    with FakeOpenAIServer(responder, latency=0.02, fail_first=1, fail_kind="500") as server:
        config = config_for(server, tmp_path, max_retries=0, seed=7)
        results, ahead = run_held_back(config, server)
        assert ahead > 0
        # Every distinct request failed once, then was answered once: by a retry, never twice.
        assert set(server.answered_keys().values()) == {1} and server.answered == 2 * PAIRS
    assert results["invalid"]["failed_judgments"] == 0 and results["overall_accuracy"]["accuracy"] == 1.0


class CacheAtFlowStart(HeldBack):
    """Also reads what the call cache holds when the flow starts (answers made ahead, not yet taken)."""

    def __init__(self, server: FakeOpenAIServer, seconds: float, db_path: Path) -> None:
        super().__init__(server, seconds)
        self.db_path, self.cached_before_flow = db_path, []

    def wait_ready(self) -> None:
        super().wait_ready()
        time.sleep(0.3)  # the group-commit writer runs in a thread
        with sqlite3.connect(self.db_path) as connection:
            self.cached_before_flow = [row[0] for row in connection.execute("SELECT response FROM call_cache")]


@requires_shared
def test_valid_answers_made_ahead_are_cached_at_once_unparseable_ones_are_not(prefect_server, gpt4o_pairs, tmp_path):
    """A run killed while its flow starts must not pay again for what was answered ahead (the resume test
    in test_resilience_flow.py kills one), yet an answer without a verdict is not cached on its own: here
    arena-hard asks a follow-up for it, and only a judgment that ends in a verdict is cached."""
    oracle = oracle_responder(gpt4o_pairs, VERDICTS["arena_hard"])
    no_verdict = "I cannot decide between them."

    def responder(body: dict) -> str:
        return no_verdict if int(request_key(body), 16) % 4 == 0 else oracle(body)

    with FakeOpenAIServer(responder, latency=0.05) as server:
        prefect = CacheAtFlowStart(server, 1.0, tmp_path / "results.db")
        # A quarter of the answers hold no verdict: allowed past the default --max-failed-fraction here.
        results = asyncio.run(
            judge_with_head_start(config_for(server, tmp_path, max_retries=0, max_failed_fraction=1.0), prefect)
        )
        assert set(server.answered_keys().values()) == {1}, "no request was sent twice"
    assert 0 < len(prefect.cached_before_flow) < 2 * PAIRS
    assert no_verdict not in prefect.cached_before_flow
    assert all("[[" in text for text in prefect.cached_before_flow)
    assert results["usage"]["paid_calls"] == server.answered, "answers cached ahead still count as this run's calls"

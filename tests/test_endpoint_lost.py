"""An endpoint killed mid-run ends the run in bounded time (issue 42): once no call has been answered for
`--endpoint-lost-timeout` seconds and every attempt since failed to connect, one line and exit 9, also with
--no-progress; the same command with the endpoint back sends only the calls never answered.

Before: 195 s and 3,878 refused attempts, then exit 4, silent with --no-progress. Real parts: `judgebench
run` as a subprocess, the bundled OpenAI-compatible endpoint on loopback, stopped for real (its socket
closed: every connection refused) and started again on the same port.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._runs import GPT4O_PATH, run_argv
from tests.conftest import CANARY_KEY, requires_shared

VERDICT = "My final verdict is [[A>B]]"
PAIRS = 60  # 120 calls
LOST_AFTER = 5  # --endpoint-lost-timeout for the test (default 30)


@requires_shared
def test_an_endpoint_killed_mid_run_ends_it_with_exit_9_and_the_rerun_pays_nothing_twice(tmp_path, prefect_server):
    import subprocess

    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(GPT4O_PATH.read_text().splitlines(keepends=True)[:PAIRS]))
    out = tmp_path / "r"
    env = {**os.environ, "OPENAI_API_KEY": CANARY_KEY, "JUDGEBENCH_CACHE_DIR": str(tmp_path / "cache")}
    with FakeOpenAIServer(VERDICT, latency=0.1) as endpoint:
        port = endpoint.port
        command = run_argv(
            endpoint.base_url, out, None, "--concurrency", "4", "--shard-size", "10",
            "--endpoint-lost-timeout", str(LOST_AFTER), data_path=data,
        )  # fmt: skip
        run = subprocess.Popen(
            command, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 300
        while endpoint.answered < 30:
            assert run.poll() is None, run.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the run never started judging"
            time.sleep(0.05)
    killed = time.monotonic()  # the endpoint is gone: its socket closed, every connection refused
    first = endpoint.answered_keys()
    _, stderr = run.communicate(timeout=120)
    ended_after = time.monotonic() - killed
    assert run.returncode == 9, stderr[-3000:]
    assert ended_after < 60, ended_after
    assert "Traceback" not in stderr, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "unreachable" in errors[0] and "--endpoint-lost-timeout" in errors[0], stderr
    assert CANARY_KEY not in stderr
    print(f"measured: the run ended {ended_after:.1f} s after the endpoint's death, {len(first)} calls answered")

    with FakeOpenAIServer(VERDICT, port=port) as again:
        done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert not set(again.answered_keys()) & set(first), "calls answered before the death were paid again"
        assert again.answered + len(first) == 2 * PAIRS
    assert Path(f"{out}.json").exists()


def test_a_caller_stops_waiting_to_retry_once_its_endpoint_is_unreachable():
    """Calls waiting in their backoff (here up to 30 s) stop at once when one of them finds the endpoint
    gone; an endpoint that answers, even with errors, is not gone."""
    import asyncio

    import pytest

    from judgebench_flows.calls.retry import RetryPolicy
    from judgebench_flows.core.errors import EndpointUnreachable
    from tests._helpers import chat_caller

    with FakeOpenAIServer(VERDICT) as endpoint:
        url = endpoint.base_url
    retry = RetryPolicy(max_retries=20, initial_wait=0.2, max_wait=30.0)

    async def calls() -> float:
        caller = chat_caller(base_url=url, model="judge", retry=retry, endpoint_lost_timeout=1.0, concurrency=4)
        started = time.monotonic()
        try:
            outcomes = await asyncio.gather(
                *(caller.complete([{"role": "user", "content": f"q{i}"}], {}) for i in range(6)),
                return_exceptions=True,
            )
        finally:
            await caller.aclose()
        assert all(isinstance(o, EndpointUnreachable) for o in outcomes), outcomes
        assert "--endpoint-lost-timeout" in str(outcomes[0])
        return time.monotonic() - started

    assert asyncio.run(calls()) < 10

    with FakeOpenAIServer(VERDICT) as failing:  # 500s for 2 s: answers, not gone
        failing.configure(rate_500=1.0)

        async def busy() -> None:
            caller = chat_caller(
                base_url=failing.base_url, model="judge", retry=RetryPolicy(3, 0.5, 1.0), endpoint_lost_timeout=0.5
            )
            try:
                with pytest.raises(Exception) as failed:
                    await caller.complete([{"role": "user", "content": "q"}], {})
                assert not isinstance(failed.value, EndpointUnreachable)
            finally:
                await caller.aclose()

        asyncio.run(busy())

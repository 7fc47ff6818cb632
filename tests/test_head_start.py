"""A run's first pairs are judged while Prefect starts (judging/head_start.py), and nothing changes but when.

Real parts: `judgebench run` in a subprocess against the session's Prefect server and the bundled
OpenAI-compatible endpoint, and the head start itself on a real event loop against that endpoint and a
real SQLite results database. What must hold: the first call goes out before the flow run exists; every
call is sent once and counted as paid (none as a cache hit), the verdicts are those of a run without a
head start; a run stopped before its shards take the early pairs keeps what was answered in the call
cache and lets its configuration go; an identical run judging holds the head start back entirely.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from judgebench_flows.core.config import RunConfig
from judgebench_flows.data import db
from judgebench_flows.data.run_lock import ConfigurationLock
from judgebench_flows.judging.head_start import (
    head_start_of,
    head_start_refused,
    prepare_head_start,
    source_of,
    spec_for,
)
from judgebench_flows.judging.run_context import RunContext
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests.conftest import CANARY_KEY
from tests.test_bad_input import pair, write_jsonl

VERDICT = "My final verdict is [[A>B]]"


class Arrivals:
    """The endpoint's answer, and when each request arrived (epoch seconds)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._lock = threading.Lock()

    def __call__(self, body: dict) -> str:
        with self._lock:
            self.times.append(time.time())
        return VERDICT


# Loaded first by the run's interpreter (PYTHONPATH): the flow's module takes SLOW_FLOW_IMPORT seconds more
# to import, as on a cold disk, and says so in SLOW_FLOW_IMPORT_MARK. On a warm machine the first early call
# arrived only 0.07 s before the flow run was created (0.56 s on a cold first run), a margin a loaded CI
# machine once lost; a head start that waited for the flow run would wait out this delay too.
SLOW_FLOW_IMPORT = """
import os, sys, time
class SlowFlowImport:
    def find_spec(self, name, path=None, target=None):
        if name == "judgebench_flows.flows.judgebench_flow":
            sys.meta_path.remove(self)
            open(os.environ["SLOW_FLOW_IMPORT_MARK"], "a").write(name + "\\n")
            time.sleep(float(os.environ["SLOW_FLOW_IMPORT"]))
        return None
sys.meta_path.insert(0, SlowFlowImport())
"""


def judged(
    tmp_path: Path, endpoint: FakeOpenAIServer, name: str, data: Path, *extra: str, env: dict[str, str] | None = None
) -> dict:
    """`judgebench run` on `data` in a subprocess, its own database; its results.json."""
    out = tmp_path / name
    argv = [sys.executable, "-m", "judgebench_flows.cli.main", "run", "--data-path", str(data), "--model", "judge"]
    argv += ["--base-url", endpoint.base_url, "--concurrency", "8", "--no-progress", "--no-report"]
    argv += ["--db-url", f"sqlite:///{out}.db", "--result-path", f"{out}.json", "--output-dir", str(out), *extra]
    env = {**os.environ, "OPENAI_API_KEY": CANARY_KEY, "JUDGEBENCH_CACHE_DIR": str(tmp_path / "cache"), **(env or {})}
    done = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(Path(f"{out}.json").read_text())
    results["verdicts"] = sorted(
        (row["pair_id"], judgment["order"], judgment["decision"], judgment["status"])
        for row in map(json.loads, next(out.glob("*.jsonl")).read_text().splitlines())
        for judgment in row["judgments"]
    )
    return results


def flow_run_created(flow_run_id: str) -> float:
    from prefect.client.orchestration import get_client

    async def read() -> datetime:
        async with get_client() as client:
            return (await client.read_flow_run(flow_run_id)).created  # type: ignore[return-value]

    return asyncio.run(read()).timestamp()


@pytest.mark.slow
def test_the_first_calls_go_out_before_the_flow_run_exists_and_are_paid_once(tmp_path, prefect_server):
    data = write_jsonl(tmp_path / "pairs.jsonl", [pair(i) for i in range(40)])  # 80 calls, 8 at a time
    (probe := tmp_path / "probe").mkdir()
    (probe / "sitecustomize.py").write_text(SLOW_FLOW_IMPORT)
    mark = tmp_path / "slow-imports"
    slow = {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(probe), os.environ.get("PYTHONPATH")])),
        "SLOW_FLOW_IMPORT": "2",
        "SLOW_FLOW_IMPORT_MARK": str(mark),
    }
    arrivals = Arrivals()
    with FakeOpenAIServer(arrivals, latency=0.3) as endpoint:
        early = judged(tmp_path, endpoint, "early", data, env=slow)
        assert max(endpoint.answered_keys().values()) == 1 and endpoint.answered == 80, "a call was paid twice"
        first_early = arrivals.times[0]
        arrivals.times.clear()
        # judged again, not served from the shards Prefect's cache now holds
        late = judged(tmp_path, endpoint, "late", data, "--no-head-start", "--refresh-cache", env=slow)
        first_late = arrivals.times[0]
    assert mark.read_text().split() == ["judgebench_flows.flows.judgebench_flow"] * 2  # both runs were slowed
    assert first_early < flow_run_created(early["run"]["flow_run_id"])
    assert first_late > flow_run_created(late["run"]["flow_run_id"])  # the control: the check can fail
    usage = early["usage"]
    assert (usage["calls"], usage["paid_calls"], usage["cached_calls"], usage["attempts"]) == (80, 80, 0, 80)
    assert early["provenance"]["served"]["answers"] == 80  # what the early calls heard counts too
    assert early["run"]["cache"]["answers"] == 0
    assert early["verdicts"] == late["verdicts"] and len(early["verdicts"]) == 80
    assert early["overall_accuracy"] == late["overall_accuracy"]


async def nothing_held(spec, shards) -> bool:
    """Prefect's shard cache holds none of the run's shards (a run in a fresh result store)."""
    return False


async def started(config: RunConfig, run: RunContext, shard_cache_holds=nothing_held):
    early = await prepare_head_start(config, run)
    if early is not None:
        await early.start(run, shard_cache_holds)
    return early


@pytest.mark.slow
def test_no_call_is_made_ahead_of_shards_prefect_already_holds(tmp_path, prefect_server):
    """Another results database, the same Prefect result store: the flow serves the shards from Prefect's
    cache and pays nothing, so the head start, which cannot read that database's call cache, sends nothing."""
    data = write_jsonl(tmp_path / "pairs.jsonl", [pair(i, question=f"held {i}?") for i in range(6)])
    with FakeOpenAIServer(VERDICT, latency=0.2) as endpoint:
        judged(tmp_path, endpoint, "first", data)
        paid = endpoint.requests
        again = judged(tmp_path, endpoint, "again", data)  # a database of its own
        assert endpoint.requests == paid == 12
    assert again["usage"]["paid_calls"] == 0 and again["usage"]["cached_calls"] == 12


def config_for(tmp_path: Path, endpoint: FakeOpenAIServer, pairs: int, **options: object) -> RunConfig:
    data = write_jsonl(tmp_path / "pairs.jsonl", [pair(i) for i in range(pairs)])
    return RunConfig.model_validate(
        {
            "model": "judge",
            "data_path": str(data),
            "db_url": f"sqlite:///{tmp_path / 'r.db'}",
            "cache_dir": str(tmp_path / "cache"),
            "endpoint": {"base_url": endpoint.base_url, "concurrency": 4},
            **options,
        }
    )


def test_a_run_stopped_before_its_shards_keeps_what_was_answered(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    with FakeOpenAIServer(VERDICT, latency=0.4) as endpoint:
        config = config_for(tmp_path, endpoint, pairs=10)  # 20 calls, 4 at a time

        async def stopped_early() -> tuple[str, int]:
            run = RunContext()
            early = await started(config, run)
            assert early is not None
            deadline = time.monotonic() + 60
            while endpoint.answered < 4 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.1)  # the first answers parsed and remembered
            await early.stopped(KeyboardInterrupt())  # Ctrl-C before the flow came: recorded as the flow would
            await early.close(run)  # what is left is cancelled
            return early.run_id, endpoint.answered

        run_id, answered = asyncio.run(stopped_early())
        time.sleep(1.0)
        assert 4 <= answered < 20 and endpoint.answered <= answered + 4  # nothing sent after the stop
    engine = db.open_database(config.db_url)
    with engine.connect() as connection:
        paid = connection.execute(sa.text("select paid_by from call_cache")).scalars().all()
        locks = connection.execute(sa.text("select count(*) from run_locks")).scalar()
        runs = connection.execute(sa.text("select run_id, status, message from runs")).all()
    assert len(paid) >= 4 and set(paid) == {run_id}  # the answers a re-run will not pay for again
    assert locks == 0
    assert [(r.run_id, r.status) for r in runs] == [(run_id, "interrupted")] and "Ctrl-C" in runs[0].message


def test_an_identical_run_judging_holds_the_head_start_back(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    with FakeOpenAIServer(VERDICT) as endpoint:
        config = config_for(tmp_path, endpoint, pairs=3)
        engine = db.open_database(config.db_url)
        spec = spec_for(config, source_of(config), RunContext().calls, "other-run", datetime.now())
        other = ConfigurationLock(engine, config.config_key(None, spec.judge_fingerprint), "other-run")
        assert other.try_hold()
        try:
            assert asyncio.run(started(config, RunContext())) is None
        finally:
            other.release()
        assert endpoint.requests == 0


@pytest.mark.parametrize(
    "options, reason",
    [
        ({"head_start": False}, "--no-head-start"),
        ({"model": "gpt-4o-mini", "max_cost": 1.0}, "--max-cost"),
        ({"endpoint": {"base_url": "http://127.0.0.1:9/v1", "batch": True}}, "--batch"),
        ({"endpoint": {"base_url": "http://127.0.0.1:9/v1", "cache_reuse": "this-run"}}, "--cache-reuse this-run"),
        ({"task_runner": "dask", "dask_address": "tcp://127.0.0.1:9"}, "shards on Dask"),
    ],
)
def test_runs_the_flow_would_judge_otherwise_get_no_head_start(options, reason):
    config = RunConfig.model_validate({"model": "judge", "endpoint": {"base_url": "http://127.0.0.1:9/v1"}, **options})
    assert (head_start_refused(config) or "").startswith(reason)
    assert (
        head_start_refused(RunConfig.model_validate({"model": "judge", "endpoint": {"base_url": "http://x/v1"}}))
        is None
    )


def test_a_shard_cache_that_cannot_be_read_lets_the_head_start_go_without_a_call(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)

    async def unreadable(spec, shards) -> bool:
        raise OSError("the result store is away")

    with FakeOpenAIServer(VERDICT) as endpoint:
        config = config_for(tmp_path, endpoint, pairs=3)
        run = RunContext()
        asyncio.run(started(config, run, unreadable))
        assert endpoint.requests == 0 and head_start_of(run) is None
    with db.open_database(config.db_url).connect() as connection:
        assert connection.execute(sa.text("select count(*) from run_locks")).scalar() == 0

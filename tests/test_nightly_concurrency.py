"""Cells side by side: one limit per endpoint shared by every cell calling it, a matrix-wide cap on
cells in flight, batch cells cut off at the night's deadline, and bad new keys refused in one line."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from judgebench_flows.calls.state import CallState
from judgebench_flows.core.errors import UserError
from judgebench_flows.judging.matrix import cell_name, parse_matrix
from judgebench_flows.testing.fake_batches import FakeBatchServer
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._helpers import chat_caller, night_summary, run_night
from tests.conftest import CANARY_KEY, GPT4O_FILE, VERDICTS, oracle_responder

pytestmark = pytest.mark.usefixtures("release_prefect_workers")

BASE = {"judge_types": ["vanilla"], "data_files": [GPT4O_FILE]}


def test_cells_on_one_endpoint_share_its_limit_and_per_model_values_override_the_matrixs(monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    monkeypatch.delenv("BASE_URL", raising=False)
    monkeypatch.delenv("TOGETHER_BASE_URL", raising=False)
    matrix = parse_matrix(
        {
            **BASE,
            "concurrency": 16,
            "options": {"rpm": 600},
            "models": [
                "gpt-4o-mini",  # no URL anywhere: OpenAI's own, by the model's name
                {"model": "o3-mini", "concurrency": 4},  # same endpoint: its value is the endpoint's
                {"model": "local", "base_url": "http://gpu-host:8000/v1/", "rpm": 60},
                {"model": "claude-3-haiku-20240307", "provider": "anthropic"},
                {"model": "meta-llama/Meta-Llama-3.1-405B-Instruct", "rpm": 30},  # Together's, by its name
            ],
        }
    )
    limits = {
        e.config.model: (e.endpoint, e.config.endpoint.concurrency, e.config.endpoint.rpm) for e in matrix.entries()
    }
    assert limits == {
        "gpt-4o-mini": ("openai https://api.openai.com/v1", 4, 600),
        "o3-mini": ("openai https://api.openai.com/v1", 4, 600),
        "local": ("openai http://gpu-host:8000/v1", 16, 60),
        "claude-3-haiku-20240307": ("anthropic https://api.anthropic.com", 16, 600),
        "meta-llama/Meta-Llama-3.1-405B-Instruct": ("together https://api.together.xyz/v1", 16, 30),
    }


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"cells_in_fligth": 4}, "cells_in_fligth: unknown key"),
        (
            {"models": [{"model": "m", "concurrency": 0}]},
            "models.0.concurrency: Input should be greater than or equal to 1",
        ),
        ({"cells_in_flight": 0}, "cells_in_flight: Input should be greater than or equal to 1"),
        ({"finish_by": "7am"}, "finish_by: expected a time of day and a time zone"),
        ({"finish_by": "07:00 Europe/Atlantis"}, "finish_by: unknown time zone 'Europe/Atlantis'"),
        ({"finish_by": "07:00 UTC", "deadline_minutes": 30}, "give one deadline: finish_by or deadline_minutes"),
    ],
)
def test_bad_night_settings_are_one_line_naming_the_key(extra: dict, message: str, tmp_path: Path) -> None:
    data = {**BASE, "models": ["m"], **extra}
    with pytest.raises(UserError, match="^matrix: .*" + message.replace("(", r"\(").replace(")", r"\)")):
        parse_matrix(data, "matrix")
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(data))
    done = subprocess.run(
        [sys.executable, "-m", "judgebench_flows.deployments.matrix", str(path)], capture_output=True, text=True
    )
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and message in done.stderr


def test_finish_by_is_the_next_such_moment_in_its_time_zone() -> None:
    matrix = parse_matrix({**BASE, "models": ["m"], "finish_by": "07:00 Europe/Berlin"})
    at_two = datetime(2026, 11, 26, 1, 0, tzinfo=timezone.utc)  # 02:00 in Berlin
    assert matrix.deadline(at_two) == datetime(2026, 11, 26, 6, 0, tzinfo=timezone.utc)
    late = datetime(2026, 11, 26, 7, 30, tzinfo=timezone.utc)  # 08:30 in Berlin: tomorrow's 07:00
    assert matrix.deadline(late) == datetime(2026, 11, 27, 6, 0, tzinfo=timezone.utc)
    minutes = parse_matrix({**BASE, "models": ["m"], "deadline_minutes": 90}).deadline(at_two)
    assert minutes == datetime(2026, 11, 26, 2, 30, tzinfo=timezone.utc)


def test_callers_of_one_endpoint_in_one_loop_hold_one_limit_together() -> None:
    async def go(a_url: str, b_url: str) -> dict:
        night = CallState()  # one night's: its cells' callers share it
        callers = [
            chat_caller(base_url=url, model=model, api_key=CANARY_KEY, concurrency=3, state=night)
            for url, model in ((a_url, "judge-1"), (a_url, "judge-2"), (b_url, "judge-3"))
        ]
        messages = [[{"role": "user", "content": f"question {i}"}] for i in range(12)]
        try:
            await asyncio.gather(*(c.complete(m, {"temperature": 0}) for c in callers for m in messages))
        finally:
            for caller in callers:
                await caller.aclose()
        return night.endpoint_usage()

    with FakeOpenAIServer("ok", latency=0.1) as a, FakeOpenAIServer("ok", latency=0.1) as b:
        usage = asyncio.run(go(a.base_url, b.base_url))
        assert a.answered == 24 and a.max_in_flight == 3  # two callers, one limit of 3
        assert b.answered == 12 and b.max_in_flight == 3
        here = usage[f"openai http://127.0.0.1:{a.port}/v1"]
    assert here["calls"] == 24 and here["max_in_flight"] == 3 and here["busy_s"] >= 24 * 0.1 / 3


@pytest.mark.slow
def test_a_night_runs_its_cells_side_by_side_and_cuts_a_batch_off_at_its_deadline(
    prefect_server, judgebench_repo, gpt4o_pairs, tmp_path, monkeypatch
) -> None:
    """Two models on one endpoint at concurrency 2 never have more than 2 calls in flight there, while
    they and a third endpoint's model judge side by side; a batch that never finishes is cancelled at
    the deadline and its requests judged synchronously, the cell still measuring the oracle's 100%."""
    url, sha = judgebench_repo
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    oracle = oracle_responder(gpt4o_pairs, VERDICTS["vanilla"])
    with (
        FakeOpenAIServer(oracle, latency=0.2) as shared,
        FakeOpenAIServer(oracle, latency=0.2) as alone,
        FakeBatchServer(oracle, hold=True) as batches,
    ):
        matrix = {
            **BASE,
            "repo_url": url,
            "ref": sha,
            "db_url": f"sqlite:///{tmp_path}/history.db",
            "output_root": str(tmp_path / "nightly"),
            "max_samples": 6,
            "concurrency": 2,
            "deadline_minutes": 0.25,
            "models": [
                {"model": "judge-a", "base_url": shared.base_url},
                {"model": "judge-b", "base_url": shared.base_url},
                {"model": "judge-c", "base_url": alone.base_url, "concurrency": 3},
                {"model": "judge-batch", "base_url": batches.base_url, "batch": True},
            ],
            "options": {"cache_dir": str(tmp_path / "cache"), "bootstrap_resamples": 100, "batch_poll_seconds": 0.5},
        }
        path = tmp_path / "night.yaml"
        path.write_text(yaml.safe_dump(matrix))
        state = run_night(path)
        assert state.is_completed(), repr(state)
        assert shared.answered == 24 and shared.max_in_flight == 2  # one limit for both cells
        assert alone.answered == 12 and alone.max_in_flight == 3
        assert batches.batches_created == 1 and batches.cancelled_batches == 1 and batches.requests == 12
        shared_endpoint = f"openai http://127.0.0.1:{shared.port}/v1"
    results = json.loads(
        (tmp_path / "nightly" / cell_name("vanilla", "judge-batch", GPT4O_FILE) / "latest" / "results.json").read_text()
    )
    assert results["overall_accuracy"]["accuracy"] == 1.0
    assert results["usage"]["synchronous_calls"] == 12
    outcomes = state.result()
    a, b = (o for o in outcomes if o["name"] in {cell_name("vanilla", m, GPT4O_FILE) for m in ("judge-a", "judge-b")})
    assert a["wait_s"] < 30 and b["wait_s"] < 30  # neither waited for the other to finish
    summary = night_summary(state)
    assert "wall time" in summary and f"| {shared_endpoint} | 2 | 24 |" in summary, summary
    assert "| busy share |" in summary and re.search(
        rf"\| {re.escape(shared_endpoint)} \| 2 \| 24 \| [\d.]+ s \| \d+% \| 2 \|", summary
    )


def test_each_cell_has_a_subflow_identity_of_its_own() -> None:
    """A rerun night matches subflow calls to the earlier attempt's by the function's task key and call
    order: each cell has its own key, the same on every attempt, so it can only reuse its own subflow."""
    from prefect.tasks import Task

    from judgebench_flows.flows.nightly import cell_flow

    flows = [
        cell_flow(name, f"vanilla · {name[9]} · x") for name in ("vanilla__a__x", "vanilla__b__x", "vanilla__a__x")
    ]
    keys = [Task(name=f.name, fn=f.fn).task_key for f in flows]
    assert keys[0] == keys[2] != keys[1]
    assert {f.name for f in flows} == {"judgebench"} and all(f.persist_result for f in flows)
    assert flows[0].flow_run_name() == "vanilla · a · x"  # its runs' name: judge, model, data file


@pytest.mark.slow
def test_a_night_listed_endpoint_by_endpoint_starts_a_cell_on_every_endpoint_first(
    prefect_server, judgebench_repo, gpt4o_pairs, tmp_path, monkeypatch
) -> None:
    """3 endpoints x 2 models listed endpoint by endpoint, 3 cells in flight: the first 3 cells to start
    are one per endpoint (in the matrix's order the first endpoint's two would start first), and no
    endpoint's server ever had more calls in flight than its limit."""
    url, sha = judgebench_repo
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    oracle = oracle_responder(gpt4o_pairs, VERDICTS["vanilla"])
    with (
        FakeOpenAIServer(oracle, latency=0.2) as first,
        FakeOpenAIServer(oracle, latency=0.2) as second,
        FakeOpenAIServer(oracle, latency=0.2) as third,
    ):
        servers = [first, second, third]
        matrix = {
            **BASE,
            "repo_url": url,
            "ref": sha,
            "db_url": f"sqlite:///{tmp_path}/history.db",
            "output_root": str(tmp_path / "nightly"),
            "max_samples": 4,
            "concurrency": 2,
            "cells_in_flight": 3,
            "models": [
                {"model": f"judge-{e}-{m}", "base_url": server.base_url}
                for e, server in enumerate(servers)
                for m in range(2)
            ],
            "options": {"cache_dir": str(tmp_path / "cache"), "bootstrap_resamples": 100},
        }
        path = tmp_path / "night.yaml"
        path.write_text(yaml.safe_dump(matrix))
        state = run_night(path)
        assert state.is_completed(), repr(state)
        assert [s.answered for s in servers] == [16, 16, 16]
        assert all(s.max_in_flight <= 2 for s in servers), [s.max_in_flight for s in servers]
    outcomes = sorted(state.result(), key=lambda o: o["wait_s"])
    first_wave, second_wave = outcomes[:3], outcomes[3:]
    assert len({o["endpoint"] for o in first_wave}) == 3, [(o["name"], o["wait_s"]) for o in outcomes]
    assert min(o["wait_s"] for o in second_wave) > max(o["wait_s"] for o in first_wave)


def _night_log(state) -> list[tuple[float, str]]:
    """The night's own log records (time, message), oldest first."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=30)  # logs are sent in the background
    with get_client(sync_client=True) as client:
        logs = client.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[state.state_details.flow_run_id]))
        )
    return sorted((log.timestamp.timestamp(), log.message) for log in logs)


@pytest.mark.slow
def test_cells_that_cannot_run_fail_at_the_nights_start_while_the_others_judge(
    prefect_server, judgebench_repo, gpt4o_pairs, tmp_path, monkeypatch
) -> None:
    """A night with one cell whose key the endpoint refuses and one whose endpoint is down (a closed port),
    listed after a batch cell held until the night's deadline and a slow synchronous cell, one cell in
    flight: each of the two fails within seconds of the night's start with its preflight's one line, never
    reaching its turn, and the other two complete."""
    from tests._s3 import free_port

    url, sha = judgebench_repo
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    monkeypatch.setenv("JB_WRONG_KEY", "sk-not-the-key-0000")
    oracle = oracle_responder(gpt4o_pairs, VERDICTS["vanilla"])
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    with (
        FakeOpenAIServer(oracle, latency=1.0, api_key=CANARY_KEY) as endpoint,
        FakeBatchServer(oracle, hold=True) as batches,
    ):
        matrix = {
            **BASE,
            "repo_url": url,
            "ref": sha,
            "db_url": f"sqlite:///{tmp_path}/history.db",
            "output_root": str(tmp_path / "nightly"),
            "max_samples": 6,
            "concurrency": 1,
            "cells_in_flight": 1,
            "deadline_minutes": 0.5,
            "models": [
                {"model": "judge-batch", "base_url": batches.base_url, "batch": True},
                {"model": "judge-slow", "base_url": endpoint.base_url},
                {"model": "judge-wrong-key", "base_url": endpoint.base_url, "api_key_env": "JB_WRONG_KEY"},
                {"model": "judge-dead", "base_url": dead},
            ],
            "options": {"cache_dir": str(tmp_path / "cache"), "bootstrap_resamples": 100, "batch_poll_seconds": 0.5},
        }
        path = tmp_path / "night.yaml"
        path.write_text(yaml.safe_dump(matrix))
        state = run_night(path)
        assert endpoint.answered == 12 and endpoint.snapshot()["requests"] >= 12  # the slow cell's calls only
    assert state.is_failed() and "2 of 4 configurations need a look" in state.message, repr(state)
    log = _night_log(state)
    start = log[0][0]
    refused = {
        model: [
            (at - start, message) for at, message in log if f"· {model} ·" in message and "failed (error:" in message
        ]
        for model in ("judge-wrong-key", "judge-dead")
    }
    assert all(len(lines) == 1 for lines in refused.values()), log
    (wrong_at, wrong), (dead_at, down) = refused["judge-wrong-key"][0], refused["judge-dead"][0]
    assert wrong_at < 15 and dead_at < 15, log  # at the night's start, not at their turn
    assert re.search(r"rejected the API key \(HTTP 401.*\); check \$JB_WRONG_KEY\)$", wrong), wrong
    assert "sk-not-the-key" not in wrong
    assert re.search(rf"cannot reach the endpoint http://127\.0\.0\.1:{dead.split(':')[2][:-3]}: ", down), down
    summary = night_summary(state)
    assert summary.count("| completed | 100.00%") == 2 and summary.count("**FAILED**") == 2, summary
    done = [at - start for at, message in log if re.search(r"judge-(slow|batch) · .*: completed", message)]
    assert len(done) == 2 and min(done) > max(wrong_at, dead_at), log  # the bad cells did not wait for these


def test_a_cells_check_refuses_a_wrong_key_and_a_dead_endpoint_in_one_line_each(tmp_path, monkeypatch) -> None:
    """What a pool night's cell run and an ad-hoc run check on their worker before judging
    (flows/cell_preflight.refusal): the key the endpoint refuses and the endpoint nobody listens on, each one
    line naming where the key came from or the address; the right key passes, and no call is paid."""
    from judgebench_flows.core.config import build_config
    from judgebench_flows.flows.cell_preflight import check_line
    from judgebench_flows.judging.matrix import MatrixEntry
    from tests._s3 import free_port

    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    monkeypatch.setenv("JB_WRONG_KEY", "sk-not-the-key-0000")
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with FakeOpenAIServer("ok", api_key=CANARY_KEY) as endpoint:
        entries = [
            MatrixEntry(
                name=model,
                config=build_config(
                    judge_type="vanilla",
                    model=model,
                    data_path=str(tmp_path / "pairs.jsonl"),  # not read by the check
                    base_url=url,
                    db_url=f"sqlite:///{tmp_path}/h.db",
                    result_path=str(tmp_path / model / "results.json"),
                    output_dir=str(tmp_path / model),
                    api_key_env=key_env,
                ),
            )
            for model, url, key_env in (
                ("right", endpoint.base_url, None),
                ("wrong", endpoint.base_url, "JB_WRONG_KEY"),
                ("dead", dead, None),
            )
        ]
        right, wrong, down = (check_line(entry) for entry in entries)
        assert endpoint.answered == 0
        address = endpoint.base_url
    assert right is None
    assert wrong is not None and wrong.startswith(f"error: the endpoint {address} rejected the API key")
    assert wrong.endswith("check $JB_WRONG_KEY") and "sk-not-the-key" not in wrong
    assert down is not None and down.startswith(f"error: cannot reach the endpoint {dead[: -len('/v1')]}: ")


NIGHT_SCRIPT = """
import asyncio, sys
from judgebench_flows.flows.nightly import nightly_benchmarks
state = asyncio.run(nightly_benchmarks(sys.argv[1], retry_delay_seconds=0, return_state=True))
sys.exit(0 if state.is_completed() else 1)
"""


@pytest.mark.slow
def test_twin_nights_started_together_pay_each_call_once(
    prefect_server, judgebench_repo, gpt4o_pairs, tmp_path
) -> None:
    """Two identical nights started at once, each in its own process (a scheduled night and a manual run
    of the same matrix), 4 cells x 20 pairs on one endpoint at concurrency 8: each configuration is
    judged by one night while the other waits for it (`data/run_lock`) and then reuses that twin's
    answers, as its message says: 160 calls, each paid once. The endpoint's `concurrency` is each night's
    process's own (docs/operations-deployments.md), so the endpoint may see up to twice it."""
    import os

    url, sha = judgebench_repo
    models = ["judge-a", "judge-b", "judge-c", "judge-d"]
    # Each answer 1 s late, so a cell takes about 5 s: "together" means both nights have started before
    # either finishes a cell (a night started after its twin's cell finished is a later night, and pays
    # for itself; at 0.3 s a loaded machine started the second night after the first's first cell).
    with FakeOpenAIServer(oracle_responder(gpt4o_pairs, VERDICTS["vanilla"]), latency=1.0) as endpoint:
        matrix = {
            **BASE,
            "repo_url": url,
            "ref": sha,
            "db_url": f"sqlite:///{tmp_path}/history.db",
            "output_root": str(tmp_path / "nightly"),
            "max_samples": 20,
            "concurrency": 8,
            "base_url": endpoint.base_url,
            "models": models,
            "options": {"cache_dir": str(tmp_path / "cache"), "bootstrap_resamples": 100},
        }
        path = tmp_path / "night.yaml"
        path.write_text(yaml.safe_dump(matrix))
        # the lines counted below are INFO lines, whatever logging level this process carries
        env = {
            **os.environ,
            "PREFECT_API_URL": prefect_server,
            "OPENAI_API_KEY": CANARY_KEY,
            "PREFECT_LOGGING_LEVEL": "INFO",
        }
        nights = [
            subprocess.Popen(
                [sys.executable, "-c", NIGHT_SCRIPT, str(path)],
                env=env,
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for _ in range(2)
        ]
        logs = [night.communicate(timeout=600)[0] for night in nights]
        snapshot = endpoint.snapshot()
    assert [night.returncode for night in nights] == [0, 0], "\n".join(log[-3000:] for log in logs)
    both = " ".join(" ".join(logs).split())  # the console wraps long lines at its width (COLUMNS)
    waits = both.count("of the same configuration (on ")
    reused = both.count("of the same configuration tonight (")
    assert reused >= waits >= 1, both[-5000:]  # every wait ended reusing the twin's answers
    assert snapshot["distinct_answered"] == snapshot["answered"] == len(models) * 40, snapshot  # each call paid once
    assert snapshot["max_in_flight"] <= 2 * 8, snapshot  # each night's process holds its own limit of 8
    print(f"{waits} cells waited for their twin; most in flight {snapshot['max_in_flight']}")

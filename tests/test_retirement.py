"""Model retirement: price entries carry the provider's announced `shutdown_date`; `estimate`, a run and the
nightly preflight say in one line when a model is past it or within 30 days of it (a run once: its command
or else its flow, a night's cells not again), the leaderboard marks such rows, and `--prices` adds or
corrects dates."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest

from judgebench_flows.core.errors import UserError
from judgebench_flows.core.pricing import bundled_prices, retirement_notice, retirement_of, shutdown_date_of

TODAY = date(2026, 11, 25)


def _prices(tmp_path: Path, models: dict) -> str:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"models": models}))
    return str(path)


def test_bundled_dates_and_the_30_day_window() -> None:
    assert bundled_prices()["claude-3-5-sonnet-20240620"].shutdown_date == date(2025, 10, 22)
    assert bundled_prices()["gpt-4o"].shutdown_date is None
    assert retirement_notice("gpt-4o", today=TODAY) is None
    past = retirement_notice("claude-3-5-sonnet-20240620", today=TODAY)
    assert past == (
        "claude-3-5-sonnet-20240620 is past its provider's shutdown date 2025-10-22: calls to it may fail "
        "(see its price entry)"
    )
    assert retirement_notice("gpt-4", today=date(2026, 10, 1)) == (
        "gpt-4 shuts down in 22 days (2026-10-23, its provider's announced date): plan a replacement"
    )
    assert "shuts down in 30 days" in retirement_notice("gpt-4", today=date(2026, 9, 23))
    assert retirement_notice("gpt-4", today=date(2026, 9, 22)) is None  # 31 days ahead: nothing yet
    assert "shuts down today" in retirement_notice("gpt-4", today=date(2026, 10, 23))
    assert retirement_of("gpt-4", today=date(2026, 10, 24)) == {
        "shutdown_date": "2026-10-23",
        "days_left": -1,
        "retired": True,
    }


def test_prices_file_adds_and_corrects_dates(tmp_path) -> None:
    prices = _prices(
        tmp_path,
        {
            "gpt-4o": {"input_per_mtok": 2.5, "output_per_mtok": 10, "shutdown_date": "2026-12-01"},  # added
            "gpt-4": {"input_per_mtok": 30, "output_per_mtok": 60, "shutdown_date": "2027-06-30"},  # corrected
            "o1-mini": {"input_per_mtok": 1, "output_per_mtok": 4},  # new prices only: the bundled date stays
        },
    )
    assert shutdown_date_of("gpt-4o", prices) == date(2026, 12, 1)
    assert retirement_notice("gpt-4o", prices, today=TODAY) == (
        "gpt-4o shuts down in 6 days (2026-12-01, its provider's announced date): plan a replacement"
    )
    assert retirement_notice("gpt-4", prices, today=TODAY) is None
    assert shutdown_date_of("o1-mini", prices) == date(2025, 10, 27)
    bad = _prices(tmp_path, {"m": {"input_per_mtok": 1, "output_per_mtok": 1, "shutdown_date": "soon"}})
    with pytest.raises(UserError, match=r"models\.m\.shutdown_date"):
        shutdown_date_of("m", bad)


def test_estimate_says_it_in_one_line(tmp_path) -> None:
    data = tmp_path / "pairs.jsonl"
    data.write_text(
        json.dumps(
            {"pair_id": "p1", "source": "livebench-math", "question": "q", "response_A": "a", "response_B": "b"}
            | {"label": "A>B"}
        )
        + "\n"
    )
    soon = (datetime.now(timezone.utc).date() + timedelta(days=10)).isoformat()
    prices = _prices(tmp_path, {"judge-x": {"input_per_mtok": 1, "output_per_mtok": 2, "shutdown_date": soon}})
    result = subprocess.run(
        [sys.executable, "-m", "judgebench_flows.cli.main", "estimate", "--model", "judge-x"]
        + ["--base-url", "http://127.0.0.1:9/v1", "--data-path", str(data), "--prices", prices]
        + ["--db-url", f"sqlite:///{tmp_path}/j.db"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if "shuts down" in line]
    assert lines == [
        f"warning: judge-x shuts down in 10 days ({soon}, its provider's announced date): plan a replacement"
    ]


def test_the_nightly_preflight_names_each_model_once() -> None:
    from judgebench_flows.flows.nightly import retirements
    from judgebench_flows.judging.matrix import parse_matrix
    from tests.conftest import CLAUDE_FILE, GPT4O_FILE

    matrix = parse_matrix(
        {
            "judge_types": ["vanilla", "arena_hard"],
            "models": ["claude-3-5-sonnet-20240620", "gpt-4o"],
            "data_files": [GPT4O_FILE, CLAUDE_FILE],
        }
    )
    notices = retirements(matrix.entries(base_url="http://127.0.0.1:9/v1"))
    assert len(notices) == 1 and notices[0].startswith("claude-3-5-sonnet-20240620 is past its provider's shutdown")


def test_the_leaderboard_marks_retired_and_retiring_rows(tmp_path) -> None:
    from judgebench_flows.scoring.leaderboard import Entry, Leaderboard, mark_retirements
    from judgebench_flows.scoring.leaderboard_report import render_leaderboard
    from judgebench_flows.scoring.leaderboard_text import markdown, model_label
    from judgebench_flows.views.tables import leaderboard_rows

    soon = (datetime.now(timezone.utc).date() + timedelta(days=3)).isoformat()
    prices = _prices(tmp_path, {"judge-y": {"input_per_mtok": 1, "output_per_mtok": 2, "shutdown_date": soon}})
    accuracy = {"accuracy": 0.7, "ci_low": 0.6, "ci_high": 0.8}
    entries = [
        Entry.model_validate(
            {"judge_name": "arena_hard", "judge_model": m, "origin": "published", "pairs": 350, "rank": i + 1}
            | {"overall_accuracy": accuracy, "category_accuracy": {}, "response_model": "gpt-4o-2024-05-13"}
            | {"tier": 1, "dataset": "judgebench"}
        )
        for i, m in enumerate(["claude-3-5-sonnet-20240620", "judge-y", "gpt-4o"])
    ]
    mark_retirements(entries, prices)
    shown = [entry.model_dump() for entry in entries]
    assert shown[0]["retirement"]["retired"] is True and shown[1]["retirement"]["days_left"] == 3
    assert "retirement" not in shown[2]
    assert model_label(entries[0]) == "claude-3-5-sonnet-20240620 (shut down 2025-10-22)"
    assert model_label(entries[1]) == f"judge-y (shuts down {soon})"
    board = Leaderboard.model_validate(
        {"dataset": {"repo_url": "r", "commit": "c"}, "entries": entries, "generated": "", "db_url": ""}
        | {"notes": [], "seed": 0, "bootstrap_resamples": 0, "categories": [], "benchmark_pairs": {}}
        | {"tiers": {"alpha": 0.05, "method": ""}}
    )
    assert "claude-3-5-sonnet-20240620 (shut down 2025-10-22)" in markdown(board)
    assert f"judge-y (shuts down {soon})" in render_leaderboard(board)
    assert [row["shutdown_date"] for row in leaderboard_rows(board)] == ["2025-10-22", soon, None]


def _one_pair(tmp_path: Path) -> Path:
    data = tmp_path / "pairs.jsonl"
    pair = {"pair_id": "p1", "source": "livebench-math", "question": "q", "response_A": "a", "response_B": "b"}
    data.write_text(json.dumps(pair | {"label": "A>B"}) + "\n")
    return data


def _retiring_soon(tmp_path: Path, model: str) -> tuple[str, str]:
    """A prices file giving `model` a shutdown date 10 days ahead, and the notice a run says for it."""
    soon = (datetime.now(timezone.utc).date() + timedelta(days=10)).isoformat()
    prices = _prices(tmp_path, {model: {"input_per_mtok": 1, "output_per_mtok": 2, "shutdown_date": soon}})
    return prices, f"{model} shuts down in 10 days ({soon}, its provider's announced date): plan a replacement"


def test_a_command_run_says_the_notice_once(run_cli, tmp_path) -> None:
    """`judgebench run` says a retiring model's notice once, on stderr before the flow starts: the flow, told
    by the run's set-up that its door said it, does not log it again (the console shows the run's log)."""
    from judgebench_flows.testing.fake_openai import FakeOpenAIServer

    prices, notice = _retiring_soon(tmp_path, "judge-once")
    with FakeOpenAIServer("My final verdict is [[A>B]]") as server:
        result = run_cli(
            *("run", "--model", "judge-once", "--base-url", server.base_url, "--prices", prices),
            *("--data-path", str(_one_pair(tmp_path)), "--db-url", f"sqlite:///{tmp_path}/j.db"),
            *("--output-dir", "out", "--result-path", "out/results.json", "--no-progress", "--no-report"),
            env={"COLUMNS": "250"},
        )
    assert result.returncode == 0, result.stderr[-3000:]
    said = [line for line in (result.stdout + result.stderr).splitlines() if "shuts down" in line]
    assert said == [f"warning: {notice}"], said


def test_a_flow_run_without_a_door_logs_the_notice_once(
    prefect_server, tmp_path, monkeypatch, release_prefect_workers
) -> None:
    """The flow as a deployment's worker starts it (no door, no run context in force) logs the notice
    itself, once, as a warning in the run's log."""
    import asyncio
    import logging

    from judgebench_flows.core.config import RunConfig
    from judgebench_flows.flows.judgebench_flow import judgebench_flow
    from judgebench_flows.testing.fake_openai import FakeOpenAIServer
    from tests.conftest import CANARY_KEY

    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    monkeypatch.setenv("JUDGEBENCH_CACHE_DIR", str(tmp_path / "cache"))
    prices, notice = _retiring_soon(tmp_path, "judge-worker")
    logged: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = logged.append  # type: ignore[method-assign]
    flow_log = logging.getLogger("prefect.flow_runs")
    flow_log.addHandler(handler)
    try:
        with FakeOpenAIServer("My final verdict is [[A>B]]") as server:
            config = RunConfig.model_validate(
                {"model": "judge-worker", "endpoint": {"base_url": server.base_url}, "prices": prices}
                | {"data_path": str(_one_pair(tmp_path)), "db_url": f"sqlite:///{tmp_path}/j.db", "report": False}
                | {"output_dir": str(tmp_path / "out"), "result_path": str(tmp_path / "out" / "results.json")}
            )
            asyncio.run(judgebench_flow(config))
    finally:
        flow_log.removeHandler(handler)
    said = [(r.levelname, r.getMessage()) for r in logged if "shuts down" in r.getMessage()]
    assert said == [("WARNING", notice)], said


def test_a_run_set_up_says_the_notice_once_and_a_nights_cells_not_again(tmp_path) -> None:
    """The notice is computed and said once per run (`RunSetUp`); a night said each model's before its
    cells ran, so a cell in the night's context says nothing."""
    from judgebench_flows.core.config import RunConfig
    from judgebench_flows.core.run_setup import RunSetUp
    from judgebench_flows.flows.nightly import night_context

    prices, notice = _retiring_soon(tmp_path, "judge-setup")
    config = RunConfig.model_validate(
        {"model": "judge-setup", "endpoint": {"base_url": "http://127.0.0.1:9/v1"}, "prices": prices}
    )
    said: list[str] = []
    setup = RunSetUp()
    setup.say_retirement(config, said.append)
    setup.say_retirement(config, said.append)
    assert said == [notice]
    night = night_context(None)
    night.for_cell().setup.say_retirement(config, said.append)
    assert said == [notice]

"""Where the tests find the benchmark: the variable a newcomer sets wins, and a machine without the data
and without the network decides at once (no clone waited on) that those tests skip."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import _benchmark_data
from tests._benchmark_data import ENV_VAR, find_benchmark_data


def test_the_variable_names_the_checkout(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert find_benchmark_data() == tmp_path.resolve()


def test_without_data_or_network_the_answer_is_none_and_quick(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setattr(_benchmark_data, "BESIDE_REPO", tmp_path / "no-shared")
    monkeypatch.setattr(_benchmark_data, "_github_reachable", lambda: False)
    monkeypatch.setattr("judgebench_flows.data.dataset.DEFAULT_CACHE_DIR", tmp_path / "empty-cache")
    started = time.monotonic()
    assert find_benchmark_data() is None
    assert time.monotonic() - started < 10  # no clone attempt and no network wait (any machine load)


def test_none_turns_the_clone_off(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(ENV_VAR, "none")
    monkeypatch.setattr(_benchmark_data, "BESIDE_REPO", tmp_path / "no-shared")
    monkeypatch.setattr(_benchmark_data, "_github_reachable", lambda: pytest.fail("probed the network"))
    assert find_benchmark_data() is None


@pytest.mark.parametrize("script", ["bench_judging.py", "bench_end_to_end.py", "bench_nightly.py", "bench_recovery.py"])
@pytest.mark.parametrize("how", ["option", "env"])
def test_benchmarks_take_the_data_location_and_fail_in_one_line(tmp_path, script: str, how: str) -> None:
    """The benchmarks find the data as the tests do (--data, JUDGEBENCH_TEST_DATA, ../shared/judgebench);
    without it they say so in one line, exit 2, no traceback."""
    root = Path(__file__).resolve().parents[1]
    missing = tmp_path / "no-judgebench"
    env = {**os.environ, ENV_VAR: str(missing)}
    args = ["--data", str(missing)] if how == "option" else []
    done = subprocess.run(
        [sys.executable, str(root / "benchmarks" / script), *args], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"error: no JudgeBench data at {missing}")
    assert "--data" in done.stderr and ENV_VAR in done.stderr

"""Where the tests find the benchmark: the variable a newcomer sets wins, and a machine without the data
and without the network decides at once (no clone waited on) that those tests skip."""

from __future__ import annotations

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
    assert time.monotonic() - started < 2


def test_none_turns_the_clone_off(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(ENV_VAR, "none")
    monkeypatch.setattr(_benchmark_data, "BESIDE_REPO", tmp_path / "no-shared")
    monkeypatch.setattr(_benchmark_data, "_github_reachable", lambda: pytest.fail("probed the network"))
    assert find_benchmark_data() is None

"""Flow run names people read in Prefect's run list: judge, model, data file (and a night's date), at
most ~60 characters; the cells of a matrix keep distinct names."""

from __future__ import annotations

from datetime import date

from judgebench_flows.core.run_names import MAX_RUN_NAME, data_short_name, run_name
from judgebench_flows.judging.matrix import parse_matrix
from tests.conftest import CLAUDE_FILE, GPT4O_FILE

NIGHT = date(2026, 11, 27)


def test_judgebench_files_are_named_by_their_responses_model_family():
    assert data_short_name(GPT4O_FILE) == "gpt-4o"
    assert data_short_name(CLAUDE_FILE) == "claude"
    assert data_short_name("/data/pairs_2024-05-13.jsonl") == "pairs"
    assert data_short_name("dataset=judgebench,response_model=llama-3.1-405b.jsonl") == "llama-3.1-405b"


def test_a_run_says_judge_model_and_data_file():
    assert run_name("arena_hard", "gpt-4o-mini", GPT4O_FILE) == "arena_hard · gpt-4o-mini · gpt-4o"
    assert run_name("vanilla", "claude-3-haiku-20240307", CLAUDE_FILE, NIGHT) == (
        "2026-11-27 vanilla · claude-3-haiku-20240307 · claude"
    )


def test_a_long_model_is_shortened_first_and_the_name_stays_readable():
    name = run_name(
        "prometheus_2", "Qwen/Qwen2.5-72B-Instruct-GPTQ-Int4-and-a-very-long-suffix", "/tmp/my.jsonl", NIGHT
    )
    assert len(name) <= MAX_RUN_NAME
    assert name.startswith("2026-11-27 prometheus_2 · Qwen2.5-72B") and name.endswith("· my")


def test_every_cell_of_the_shipped_matrix_has_a_distinct_short_name():
    matrix = parse_matrix(
        {
            "judge_types": ["arena_hard", "vanilla", "prometheus_2"],
            "models": ["gpt-4o-mini", {"model": "gpt-4o-mini", "base_url": "http://other:8000/v1", "label": "mini-b"}],
            "data_files": [GPT4O_FILE, CLAUDE_FILE],
        },
        "test",
    )
    names = [entry.run_name(NIGHT) for entry in matrix.entries()]
    assert len(set(names)) == len(names) == 12
    assert all(len(name) <= MAX_RUN_NAME for name in names), names
    assert "2026-11-27 prometheus_2 · mini-b · claude" in names

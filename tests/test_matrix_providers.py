"""The nightly matrix names each model's provider and whether it is judged by batch."""

from __future__ import annotations

from judgebench_flows.deployments.matrix import parse_matrix
from tests.conftest import GPT4O_FILE


def test_a_matrix_model_can_be_judged_by_anthropic_message_batches() -> None:
    matrix = parse_matrix(
        {
            "judge_types": ["arena_hard"],
            "models": [
                "gpt-4o-mini",
                {"model": "claude-3-haiku-20240307", "provider": "anthropic", "batch": True},
            ],
            "data_files": [GPT4O_FILE],
            "base_url": "https://api.openai.com/v1",
            "options": {"batch_poll_seconds": 300},
        }
    )
    openai_cell, claude_cell = (entry.config.endpoint for entry in matrix.entries())
    assert (openai_cell.provider, openai_cell.batch, openai_cell.base_url) == (
        "openai",
        False,
        "https://api.openai.com/v1",
    )
    assert (claude_cell.provider, claude_cell.batch, claude_cell.base_url) == ("anthropic", True, None)
    assert claude_cell.batch_poll_seconds == 300

"""The nightly matrix names each model's provider and whether it is judged by batch."""

from __future__ import annotations

from judgebench_flows.judging.matrix import parse_matrix
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


def test_a_matrix_model_can_be_a_gemini_batch_or_a_vertex_judge() -> None:
    matrix = parse_matrix(
        {
            "judge_types": ["arena_hard"],
            "models": [
                {"model": "gemini-2.5-flash", "provider": "gemini", "batch": True},
                {
                    "model": "gemini-2.0-flash",
                    "provider": "vertex",
                    "vertex_project": "judges-1",
                    "label": "vertex-flash",
                },
            ],
            "data_files": [GPT4O_FILE],
            "base_url": "https://api.openai.com/v1",
            "api_key_env": "OPENAI_API_KEY",
        }
    )
    gemini_cell, vertex_cell = (entry.config for entry in matrix.entries())
    assert (gemini_cell.endpoint.provider, gemini_cell.endpoint.batch, gemini_cell.endpoint.base_url) == (
        "gemini",
        True,
        None,
    )
    assert gemini_cell.resolved_base_url() == "https://generativelanguage.googleapis.com/v1beta/openai"
    assert gemini_cell.endpoint.api_key_env is None  # GEMINI_API_KEY, not the matrix's OpenAI key
    assert (vertex_cell.endpoint.provider, vertex_cell.endpoint.api_key_env) == ("vertex", None)
    assert vertex_cell.resolved_base_url() == (
        "https://us-central1-aiplatform.googleapis.com/v1/projects/judges-1/locations/us-central1/endpoints/openapi"
    )

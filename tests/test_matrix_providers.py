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


def test_a_matrix_model_can_be_a_bedrock_or_azure_batch_judge(monkeypatch, tmp_path) -> None:
    """Bedrock's batch locations and role per model (or shared under `options`); an Azure batch deployment
    with the model it serves. A Bedrock batch model missing them is refused when the matrix is read."""
    import pytest

    from judgebench_flows.core.errors import UserError

    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", "https://example-resource.openai.azure.com")

    haiku = "anthropic.claude-3-haiku-20240307-v1:0"
    bedrock = {"model": haiku, "provider": "bedrock", "batch": True}
    locations = {
        "bedrock_batch_input": "s3://judging/in/",
        "bedrock_batch_output": "s3://judging/out/",
        "bedrock_role_arn": "arn:aws:iam::123456789012:role/Judging",
    }
    azure = {"model": "judge-batch", "provider": "azure", "batch": True, "priced_model": "gpt-4o-2024-08-06"}
    matrix = {"judge_types": ["arena_hard"], "data_files": [GPT4O_FILE]}
    bedrock_cell, azure_cell = (
        entry.config.endpoint
        for entry in parse_matrix({**matrix, "models": [{**bedrock, **locations}, azure]}).entries()
    )
    assert (bedrock_cell.provider, bedrock_cell.batch, bedrock_cell.bedrock_role_arn) == (
        "bedrock",
        True,
        locations["bedrock_role_arn"],
    )
    assert (azure_cell.provider, azure_cell.batch, azure_cell.priced_model) == ("azure", True, "gpt-4o-2024-08-06")
    [shared] = parse_matrix({**matrix, "models": [bedrock], "options": locations}).entries()
    assert shared.config.endpoint.bedrock_batch_output == "s3://judging/out/"
    with pytest.raises((UserError, ValueError), match="bedrock-batch-input"):
        list(parse_matrix({**matrix, "models": [bedrock]}).entries())

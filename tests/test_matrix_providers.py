"""The nightly matrix names each model's provider and whether it is judged by batch."""

from __future__ import annotations

import pytest

from judgebench_flows.core.endpoint import EndpointSettings
from judgebench_flows.core.errors import UserError
from judgebench_flows.judging.matrix import ModelSpec, parse_matrix
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


def test_a_models_endpoint_keys_are_declared_once_in_the_endpoint_settings() -> None:
    """A model's endpoint keys are `EndpointSettings`' options (their bounds and description), each
    optional: None leaves the matrix's value. The keys a model takes, in the order the error lists them,
    are those it always took."""
    own = {"model", "label", "max_cost"}
    for name in set(ModelSpec.model_fields) - own:
        spec, endpoint = ModelSpec.model_fields[name], EndpointSettings.model_fields[name]
        assert spec.annotation == endpoint.annotation | None and spec.default is None, name
        assert (spec.metadata, spec.description) == (endpoint.metadata, endpoint.description), name

    def refused(model: dict) -> str:
        with pytest.raises(UserError) as caught:
            parse_matrix({"judge_types": ["arena_hard"], "models": [model], "data_files": [GPT4O_FILE]})
        return str(caught.value)

    assert refused({"model": "m", "request_timeout": 5}) == (
        "matrix: models.0.request_timeout: unknown key (valid: model, base_url, api_key_env, api_key_secret, label, "
        "max_cost, provider, batch, concurrency, rpm, vertex_project, vertex_location, priced_model, "
        "bedrock_batch_input, bedrock_batch_output, bedrock_role_arn)"
    )
    assert refused({"model": "m", "concurrency": 0}) == (
        "matrix: models.0.concurrency: Input should be greater than or equal to 1"
    )
    assert refused({"model": "m", "rpm": 0}) == "matrix: models.0.rpm: Input should be greater than 0"

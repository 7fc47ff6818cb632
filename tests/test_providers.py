"""A provider is one object in one module (`core/providers`): no provider name is compared anywhere else,
every provider's missing credentials are one line naming the variable, and a model name with no provider
and no endpoint goes where JudgeBench's run_judge.py sends it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from judgebench_flows.core import providers
from judgebench_flows.core.config import build_config
from judgebench_flows.core.errors import UserError
from judgebench_flows.judging.preflight import check_credentials
from tests.test_layout import ROOT, source_files

ENDPOINT_VARIABLES = ("OPENAI_BASE_URL", "BASE_URL", "ANTHROPIC_BASE_URL", "TOGETHER_BASE_URL")


def compared_provider_names(path: Path) -> list[str]:
    """`x == "anthropic"`, `x in ("gemini", "vertex")`, `match x: case "openai"` outside the providers."""
    found = []
    names = set(providers.PROVIDERS)
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        operands: list[ast.expr] = []
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.MatchValue):
            operands = [node.value]
        for operand in operands:
            elements = operand.elts if isinstance(operand, ast.Tuple | ast.List | ast.Set) else [operand]
            for element in elements:
                if isinstance(element, ast.Constant) and element.value in names:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {element.value!r}")
    return found


def test_no_provider_name_is_compared_outside_the_providers_package() -> None:
    found = [
        hit
        for module, path in source_files().items()
        if not module.startswith("judgebench_flows.core.providers") and ".testing." not in module
        for hit in compared_provider_names(path)
    ]
    assert not found, "compare the provider's attributes instead:\n" + "\n".join(found)


def test_the_scan_sees_a_comparison() -> None:
    """The scan above would catch the kind of line it forbids."""
    sample = ROOT / "tests" / "_provider_scan_sample.py"
    sample.write_text('if provider == "anthropic" or p in ("gemini", "x"):\n    pass\n')
    try:
        assert len(compared_provider_names(sample)) == 2
    finally:
        sample.unlink()


@pytest.fixture
def no_endpoint_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ENDPOINT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize(
    ("model", "provider", "url"),
    [
        ("gpt-4o-mini", "openai", "https://api.openai.com/v1"),
        ("o1-preview-2024-09-12", "openai", "https://api.openai.com/v1"),
        ("claude-3-haiku-20240307", "anthropic", "https://api.anthropic.com"),
        ("meta-llama/Meta-Llama-3.1-405B-Instruct", "together", "https://api.together.xyz/v1"),
        ("meta-llama/Meta-Llama-3.1-8B-Instruct", "openai", "http://localhost:8000/v1"),
        ("Skywork/Skywork-Critic-Llama-3.1-8B", "openai", "http://localhost:8000/v1"),
    ],
)
def test_the_model_name_routes_as_run_judge_py_does(
    no_endpoint_env: pytest.MonkeyPatch, model: str, provider: str, url: str
) -> None:
    config = build_config(model=model)
    assert (config.endpoint.provider, config.resolved_base_url()) == (provider, url)
    line = config.routed()
    assert line is not None and url in line and "run_judge.py" in line


def test_explicit_options_and_the_environment_win(no_endpoint_env: pytest.MonkeyPatch) -> None:
    assert build_config(model="claude-3-haiku-20240307", base_url="http://127.0.0.1:9/v1").endpoint.provider == "openai"
    assert build_config(model="gpt-4o", provider="anthropic").endpoint.provider == "anthropic"
    no_endpoint_env.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    config = build_config(model="claude-3-haiku-20240307")
    assert (config.endpoint.provider, config.resolved_base_url(), config.routed()) == (
        "openai",
        "http://127.0.0.1:9/v1",
        None,
    )
    no_endpoint_env.delenv("OPENAI_BASE_URL")
    no_endpoint_env.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    assert build_config(model="claude-3-haiku-20240307").resolved_base_url() == "http://127.0.0.1:9"


def test_a_routed_config_validates_back_to_itself(no_endpoint_env: pytest.MonkeyPatch) -> None:
    """The flow's parameters hold the provider chosen: a worker with another environment keeps it."""
    config = build_config(model="meta-llama/Meta-Llama-3.1-8B-Instruct")
    no_endpoint_env.setenv("OPENAI_BASE_URL", "http://elsewhere:1/v1")
    again = build_config(**config.model_dump())
    assert again.resolved_base_url() == "http://localhost:8000/v1" and again.endpoint.provider == "openai"


@pytest.mark.parametrize("name", [p.name for p in providers.PROVIDERS.values() if p.takes_key])
def test_every_providers_missing_key_is_one_line_naming_its_variable(
    no_endpoint_env: pytest.MonkeyPatch, name: str
) -> None:
    source = providers.get(name)
    for variable in source.key_envs:
        no_endpoint_env.delenv(variable, raising=False)
    no_endpoint_env.setenv("AZURE_OPENAI_ENDPOINT", "https://example-resource.openai.azure.com")
    config = build_config(model="some-model", provider=name)
    with pytest.raises(UserError) as caught:
        check_credentials(config)
    assert f"(--provider {name}): set {source.key_envs[0]}" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_local_http_endpoint_needs_no_key(no_endpoint_env: pytest.MonkeyPatch) -> None:
    no_endpoint_env.delenv("TOGETHER_API_KEY", raising=False)
    check_credentials(build_config(model="m", provider="together", base_url="http://127.0.0.1:9/v1"))


def test_unknown_provider_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(UserError, match="--provider: unknown provider 'nope' \\(known: openai, anthropic"):
        build_config(model="m", provider="nope")


def test_together_sends_the_405b_model_as_run_judge_py_does() -> None:
    together = providers.get("together")
    assert together.wire_model("meta-llama/Meta-Llama-3.1-405B-Instruct").endswith("-Instruct-turbo")
    assert together.wire_model("other") == "other"

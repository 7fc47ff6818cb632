"""The providers a run can call, one object each (`base.Provider`), one module each, registered here.

Adding a provider is a module in this package holding its `Provider` (its wires, in `calls/`) and one
line in `PROVIDERS`. Nothing outside this package compares provider names (tests/test_providers.py).

`route` picks a provider by the model's name as JudgeBench's run_judge.py does (`utils/models.py`) when
the run names neither a provider nor an endpoint: each provider's `claims`, else the vLLM server
run_judge.py assumes on localhost:8000.
"""

from __future__ import annotations

from dataclasses import dataclass

from judgebench_flows.core.providers.anthropic import ANTHROPIC
from judgebench_flows.core.providers.azure import AZURE
from judgebench_flows.core.providers.base import CHAT, IMPLIED, Provider
from judgebench_flows.core.providers.bedrock import BEDROCK
from judgebench_flows.core.providers.google import GEMINI, VERTEX
from judgebench_flows.core.providers.openai import OPENAI
from judgebench_flows.core.providers.together import TOGETHER

PROVIDERS: dict[str, Provider] = {p.name: p for p in (OPENAI, ANTHROPIC, GEMINI, VERTEX, TOGETHER, AZURE, BEDROCK)}
# run_judge.py's `LocalAPI`: any model no provider claims, on a vLLM server of this machine
LOCAL_VLLM_URL = "http://localhost:8000/v1"


def names() -> list[str]:
    return list(PROVIDERS)


def get(name: str | None) -> Provider:
    """The provider of that name (None: the default, OpenAI-compatible one)."""
    return PROVIDERS[name or IMPLIED]


def check_name(name: str | None) -> str | None:
    if name is not None and name not in PROVIDERS:
        raise ValueError(f"unknown provider {name!r} (known: {', '.join(PROVIDERS)})")
    return name


def cache_name(name: str | None) -> str:
    """The provider name cache keys are made under (`core.identity`); a name no longer registered keys as
    itself."""
    provider = PROVIDERS.get(name or IMPLIED)
    return provider.cache_name if provider else str(name)


@dataclass(frozen=True)
class Route:
    """Where a model name goes when the run names no provider and no endpoint."""

    provider: Provider
    base_url: str | None  # None: the provider's own endpoint (or its environment's)
    title: str | None = None  # what the line calls the API, when not the provider's own (a local vLLM server)

    def line(self, model: str, url: str) -> str:
        return (
            f"{model}: {self.title or self.provider.title} at {url} (chosen by the model's name, as JudgeBench's "
            "run_judge.py does; --provider or --base-url choose another)"
        )


def route(model: str) -> Route:
    for provider in PROVIDERS.values():
        if provider.claims_model(model):
            return Route(provider, None)
    # spoken with OpenAI's wire, but not OpenAI's API: the line must not send a reader to OpenAI
    return Route(get(IMPLIED), LOCAL_VLLM_URL, title="a local vLLM server's OpenAI-compatible API")


def explicit_endpoint(base_url: str | None) -> bool:
    """Whether the run or the environment names an endpoint of the default provider (then no routing)."""
    return bool(base_url or get(IMPLIED).env_base_url())


__all__ = [
    "CHAT",
    "IMPLIED",
    "LOCAL_VLLM_URL",
    "PROVIDERS",
    "Provider",
    "Route",
    "cache_name",
    "check_name",
    "explicit_endpoint",
    "get",
    "names",
    "route",
]

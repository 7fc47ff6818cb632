"""The model-call layer's one interface: a wire per provider and endpoint API behind `ModelAPI` (as Inspect
AI's `ModelAPI`), chosen once, here, by `model_api` from the table `WIRES`.

`ChatCaller` composes the policies every call goes through (call cache, request rules and their 400
adjustments, retries, limits, budget); the wire underneath is one module per provider and API:

    provider   api            module                wire
    openai     chat           transport             Transport          /chat/completions
    openai     completions    openai_completions    OpenAICompletions  /completions (JudgeLM, PandaLM)
    openai     pooling        vllm_pooling          VLLMPooling        vLLM's /pooling (reward models)
    openai     transformers   local_reward          LocalRewardAPI     a reward model in this process
    anthropic  chat           anthropic_api         AnthropicTransport Messages API
    gemini     chat           google_api            GoogleTransport    Gemini's OpenAI-compatible API
    vertex     chat           google_api            GoogleTransport    Vertex AI's, with ADC tokens

`--batch` wraps the chat wire in `batch.BatchTransport` with the provider's batch API (`BATCHES`). Each
wire classifies its own failures into `errors.CallError`. A provider or API is one module and one line
in `WIRES` (and `BATCHES` if it has a batch API). Nothing outside this module compares API names.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import JsonValue
from sqlalchemy.engine import Engine

from judgebench_flows.calls.anthropic_rules import anthropic_rule
from judgebench_flows.calls.batch import BatchStore, BatchTransport
from judgebench_flows.calls.request_rules import RequestRule, rule_for
from judgebench_flows.core.completion import Completion, Sampling
from judgebench_flows.core.identity import call_endpoint

if TYPE_CHECKING:
    from judgebench_flows.calls.state import CallState

Provider = Literal["openai", "anthropic", "gemini", "vertex"]
GOOGLE = ("gemini", "vertex")
CHAT = "chat"


class ModelAPI(Protocol):
    """One attempt on the wire: `post` returns the answer as received (a parsed body, a score) or raises
    `errors.CallError` (`retry` decides what is retried), `answer` reads it (unusable: `BadAnswerBody`).
    `answers_scores`: a score API, whose answers carry `Completion.score` (and the call cache stores it);
    `checks_raw_scores`: a score API whose scores the caller checks are raw (`other_apis.RawScoreCheck`);
    `ignored`: a parameter the endpoint ignored and what shows it, or None; `model_entry`: what the
    endpoint lists about the model (a vLLM server's `/v1/models` entry), asked once per run."""

    base_url: str
    model: str
    answers_scores: bool
    checks_raw_scores: bool

    async def post(self, messages: list[dict[str, str]], sampling: Sampling) -> Any: ...

    def answer(self, response: Any) -> Completion: ...

    def ignored(self, params: Sampling, response: Any) -> tuple[str, str] | None: ...

    async def model_entry(self, timeout: float) -> dict[str, JsonValue] | None: ...

    async def aclose(self) -> None: ...


# (provider, endpoint API) -> "module:class" of its wire, imported when chosen (the anthropic and Google
# SDKs take most of a second to import). Every wire takes (base_url, model, api_key, timeout, concurrency).
WIRES: dict[tuple[str, str], str] = {
    ("openai", CHAT): "transport:Transport",
    ("openai", "completions"): "openai_completions:OpenAICompletions",
    ("openai", "pooling"): "vllm_pooling:VLLMPooling",
    ("openai", "transformers"): "local_reward:LocalRewardAPI",
    ("anthropic", CHAT): "anthropic_api:AnthropicTransport",
    ("gemini", CHAT): "google_api:GeminiTransport",
    ("vertex", CHAT): "google_api:VertexTransport",
}
# provider -> "module:class" of its batch API (`batch.BatchAPI`), built on the provider's chat wire.
BATCHES: dict[str, str] = {
    "openai": "openai_batch:OpenAIBatches",
    "anthropic": "anthropic_batch:AnthropicBatches",
    "gemini": "gemini_batch:GeminiBatches",
}


def _load(target: str) -> Any:
    module, name = target.split(":")
    return getattr(importlib.import_module(f"judgebench_flows.calls.{module}"), name)


def unserved(provider: str, api: str, batch: bool = False) -> tuple[str, str] | None:
    """The option and the reason a run cannot send `api` requests to `provider` (None: it can), for the
    check before any call."""
    if batch and api != CHAT:
        return "--batch", "which batch APIs do not serve"
    if (provider, api) not in WIRES:
        return f"--provider {provider}", "which only OpenAI-compatible endpoints serve (use --provider openai)"
    if batch and provider not in BATCHES:
        return "--batch", f"which --provider {provider} has no batch API for"
    return None


def model_api(
    provider: str,
    base_url: str,
    model: str,
    api_key: str,
    request_timeout: float,
    concurrency: int,
    batch_poll_seconds: float | None = None,
    engine: Engine | None = None,
    api: str = CHAT,
    state: CallState | None = None,
) -> ModelAPI:
    """The wire for a run's provider and its judge's endpoint API; with `batch_poll_seconds`, its batch API
    (`batch`), whose batches are stored in `engine` to be re-attached to. `state`: the run's, whose Vertex
    token a vertex wire uses."""
    if why := unserved(provider, api, batch_poll_seconds is not None):
        raise ValueError(f"{why[0]}: no wire for the {api} API, {why[1]}")
    if api == "transformers":  # no endpoint: the model runs here, on the device the environment names
        return _load(WIRES[provider, api])(model, os.environ.get("JUDGEBENCH_REWARD_DEVICE") or None)
    shared = {"token": state.vertex_token()} if provider == "vertex" and state is not None else {}
    wire = _load(WIRES[provider, api])(base_url, model, api_key, request_timeout, concurrency, **shared)
    if batch_poll_seconds is None:
        return wire
    batches = _load(BATCHES[provider]).for_wire(wire, api_key)
    store = BatchStore(engine, provider, call_endpoint(base_url, provider, CHAT), model)
    return BatchTransport(wire, batches, store, batch_poll_seconds)


def provider_rule(provider: str, model: str, request_style: str, drop_params: tuple[str, ...]) -> RequestRule:
    """The request rule for a model at its provider: the OpenAI table (`request_rules`, with the request
    style forced or not) or the Messages API's (`anthropic_rules`)."""
    if provider == "anthropic":
        return anthropic_rule(model, drop_params=drop_params)
    return rule_for(model, request_style, drop_params)


def wire_params(provider: str, model: str, params: Sampling) -> Sampling:
    """The parameters the provider's wire sends for these (what an answer may cost): Gemini 2.5 models
    get room to think on top of the judge's `max_tokens` (`google_api.token_budget`)."""
    if provider in GOOGLE:
        from judgebench_flows.calls.google_api import token_budget

        return token_budget(model, params)
    return params


__all__ = [
    "ModelAPI",
    "Provider",
    "model_api",
    "provider_rule",
    "unserved",
    "wire_params",
]

"""The model-call layer's one interface: a wire per provider and endpoint API behind `ModelAPI` (as Inspect
AI's `ModelAPI`), chosen once, here, by `model_api` from the run's provider (`core.providers`).

`ChatCaller` composes the policies every call goes through (call cache, request rules and their 400
adjustments, retries, limits, budget); the wire underneath is one module per provider and API, named by
the provider's `wires` ("module:Class" in this package, imported when chosen: the anthropic and Google
SDKs take most of a second to import). `--batch` wraps the chat wire in `batch.BatchTransport` with the
provider's `batch` API. Each wire classifies its own failures into `errors.CallError`.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import JsonValue
from sqlalchemy.engine import Engine

from judgebench_flows.calls.batch import BatchStore, BatchTransport
from judgebench_flows.calls.request_rules import RequestRule, rule_for
from judgebench_flows.core import providers
from judgebench_flows.core.completion import Completion, Sampling
from judgebench_flows.core.identity import call_endpoint
from judgebench_flows.core.providers import CHAT

if TYPE_CHECKING:
    from judgebench_flows.calls.state import CallState
    from judgebench_flows.core.endpoint import EndpointSettings


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


def _load(target: str) -> Any:
    module, name = target.split(":")
    return getattr(importlib.import_module(f"judgebench_flows.calls.{module}"), name)


def unserved(provider: str, api: str, batch: bool = False) -> tuple[str, str] | None:
    """The option and the reason a run cannot send `api` requests to `provider` (None: it can), for the
    check before any call."""
    if batch and api != CHAT:
        return "--batch", "which batch APIs do not serve"
    source = providers.get(provider)
    if api not in source.wires:
        return f"--provider {source.name}", "which only OpenAI-compatible endpoints serve (use --provider openai)"
    if batch and source.batch is None:
        return "--batch", f"which --provider {source.name} has no batch API for"
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
    settings: EndpointSettings | None = None,
) -> ModelAPI:
    """The wire for a run's provider and its judge's endpoint API; with `batch_poll_seconds`, its batch API
    (`batch`), whose batches are stored in `engine` to be re-attached to. `state`: the run's, whose shared
    tokens (Vertex's) a wire uses; `settings`: the endpoint's, for what a provider's wire takes beyond the
    uniform five (`Provider.wire_options`)."""
    if why := unserved(provider, api, batch_poll_seconds is not None):
        raise ValueError(f"{why[0]}: no wire for the {api} API, {why[1]}")
    source = providers.get(provider)
    if api == "transformers":  # no endpoint: the model runs here, on the device the environment names
        return _load(source.wires[api])(model, os.environ.get("JUDGEBENCH_REWARD_DEVICE") or None)
    options = source.wire_options(settings, state)
    wire = _load(source.wires[api])(
        base_url, source.wire_model(model), api_key, request_timeout, concurrency, **options
    )
    if batch_poll_seconds is None or source.batch is None:
        return wire
    batches = _load(source.batch).for_wire(wire, api_key, settings)
    store = BatchStore(engine, source.name, call_endpoint(base_url, source.name, CHAT), model)
    return BatchTransport(wire, batches, store, batch_poll_seconds)


def provider_rule(provider: str | None, model: str, request_style: str, drop_params: tuple[str, ...]) -> RequestRule:
    """The request rule for a model at its provider: the OpenAI table (`request_rules`, with the request
    style forced or not) or the provider's own (the Messages API's: `anthropic_rules`)."""
    if own := providers.get(provider).request_rule:
        rule: RequestRule = _load(own)(model, drop_params=drop_params)
        return rule
    return rule_for(model, request_style, drop_params)


def wire_params(provider: str | None, model: str, params: Sampling) -> Sampling:
    """The parameters the provider's wire sends for these (what an answer may cost): Gemini 2.5 models
    get room to think on top of the judge's `max_tokens` (`google_api.token_budget`)."""
    if budget := providers.get(provider).token_budget:
        sent: Sampling = _load(budget)(model, params)
        return sent
    return params


__all__ = [
    "ModelAPI",
    "model_api",
    "provider_rule",
    "unserved",
    "wire_params",
]

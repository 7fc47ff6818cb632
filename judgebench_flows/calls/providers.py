"""The model-client protocol: one wire per provider behind one interface (as Inspect AI's `ModelAPI`).

`ChatCaller` composes the policies every call goes through (call cache, request rules and their 400
adjustments, retries, limits); the wire underneath is a `ModelAPI`: the OpenAI-compatible one
(`transport.Transport`: chat, text completions, vLLM's pooling) or Anthropic's Messages API
(`anthropic_api.AnthropicTransport`), or Google's OpenAI-compatible endpoints (`google_api.GoogleTransport`:
the Gemini API and Vertex AI). A provider is one more implementation; so is a batch API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol

from sqlalchemy.engine import Engine

from judgebench_flows.calls.anthropic_rules import anthropic_rule
from judgebench_flows.calls.batch import BatchAPI, BatchStore, BatchTransport
from judgebench_flows.calls.openai_batch import OpenAIBatches
from judgebench_flows.calls.other_apis import endpoint_identity
from judgebench_flows.calls.request_rules import RequestRule, rule_for
from judgebench_flows.calls.transport import Transport
from judgebench_flows.core.completion import Completion

if TYPE_CHECKING:
    from judgebench_flows.calls.anthropic_api import AnthropicTransport
    from judgebench_flows.calls.google_api import GoogleTransport

Provider = Literal["openai", "anthropic", "gemini", "vertex"]
GOOGLE = ("gemini", "vertex")


class ModelAPI(Protocol):
    """One attempt on the wire: `post` returns the parsed response body or raises an openai exception
    class (`retry` decides what is retried), `answer` reads a body (an unusable one: `BadAnswerBody`)."""

    base_url: str
    model: str

    async def post(self, api: str, messages: list[dict[str, str]], sampling: dict[str, Any]) -> Any: ...

    def answer(self, api: str, response: Any) -> Completion: ...

    async def aclose(self) -> None: ...


def model_api(
    provider: str,
    base_url: str,
    model: str,
    api_key: str,
    request_timeout: float,
    concurrency: int,
    batch_poll_seconds: float | None = None,
    engine: Engine | None = None,
) -> ModelAPI:
    """The wire for a run's provider; with `batch_poll_seconds`, its batch API (`batch`), whose batches
    are stored in `engine` to be re-attached to. The anthropic SDK is imported for Anthropic runs only:
    it takes most of a second to import."""
    wire: Transport | AnthropicTransport | GoogleTransport
    batches: BatchAPI
    if provider == "anthropic":
        from judgebench_flows.calls.anthropic_api import AnthropicTransport
        from judgebench_flows.calls.anthropic_batch import AnthropicBatches

        wire = AnthropicTransport(base_url, model, api_key, request_timeout, concurrency)
        if batch_poll_seconds is None:
            return wire
        batches = AnthropicBatches(wire.clients[0], model)
    elif provider in GOOGLE:
        from judgebench_flows.calls.google_api import GoogleTransport

        wire = GoogleTransport(provider, base_url, model, api_key, request_timeout, concurrency)
        if batch_poll_seconds is None:
            return wire
        from judgebench_flows.calls.gemini_batch import GeminiBatches

        batches = GeminiBatches(wire, api_key)
    else:
        wire = Transport(base_url, model, api_key, request_timeout, concurrency)
        if batch_poll_seconds is None:
            return wire
        batches = OpenAIBatches(wire.clients[0], model)
    store = BatchStore(engine, provider, endpoint_identity(base_url, cache_api(provider, "chat")), model)
    return BatchTransport(wire, batches, store, batch_poll_seconds)


def provider_rule(provider: str, model: str, request_style: str, drop_params: tuple[str, ...]) -> RequestRule:
    """The request rule for a model at its provider: the OpenAI table (`request_rules`, with the request
    style forced or not) or the Messages API's (`anthropic_rules`)."""
    if provider == "anthropic":
        return anthropic_rule(model, drop_params=drop_params)
    return rule_for(model, request_style, drop_params)


def wire_params(provider: str, model: str, params: dict[str, Any]) -> dict[str, Any]:
    """The parameters the provider's wire sends for these (what an answer may cost): Gemini 2.5 models
    get room to think on top of the judge's `max_tokens` (`google_api.token_budget`)."""
    if provider in GOOGLE:
        from judgebench_flows.calls.google_api import token_budget

        return token_budget(model, params)
    return params


def cache_api(provider: str, api: str) -> str:
    """The API a call's cache key names (`other_apis.endpoint_identity`): the judge's, or the provider's
    when that is not OpenAI's (the same messages sent as chat and as Messages are different requests)."""
    return api if provider == "openai" else f"{provider}-{api}"


__all__ = ["ModelAPI", "Provider", "cache_api", "model_api", "provider_rule", "wire_params"]

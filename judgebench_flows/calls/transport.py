"""The OpenAI chat wire: openai clients that post one request to the endpoint, and the reading of its answer.

The other OpenAI-style APIs are the same wire with another request and answer (`send`, `read`):
`openai_completions` (text completions) and `vllm_pooling` (vLLM's Pooling API).

No retries, limits or cache here (`retry`, `limits`, `cache`); one attempt in, one response body or
a `CallError` out (the SDK's failure classified here, `openai_call_error`).
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import ssl
from typing import Any, cast

import httpx
import openai
from pydantic import JsonValue

from judgebench_flows.calls.errors import CallError, http_error
from judgebench_flows.core.completion import Completion, Sampling
from judgebench_flows.core.secrets import redact

CONNECTIONS_PER_CLIENT = 8
JsonBody = dict[str, JsonValue]
"""A body as JSON: a request a wire builds and posts (and a batch line holds), an answer before it is read."""


def json_messages(messages: list[dict[str, str]]) -> list[JsonValue]:
    """Chat messages as the JSON they are (only a list's invariance hides that from the type checker)."""
    return cast(list[JsonValue], messages)


def clients_for(concurrency: int) -> int:
    """How many SDK clients carry `concurrency` calls, at `CONNECTIONS_PER_CLIENT` each."""
    return max(1, math.ceil(concurrency / CONNECTIONS_PER_CLIENT))


def openai_call_error(exc: openai.APIError) -> CallError:
    """The `CallError` of an openai SDK failure (the OpenAI-compatible wire classifies its own errors)."""
    if isinstance(exc, openai.APITimeoutError):
        return CallError("timeout")
    if isinstance(exc, openai.APIConnectionError):
        return CallError("connection")
    if isinstance(exc, openai.APIStatusError):
        response = exc.response
        return http_error(exc.status_code, exc.body, response.headers, response.text if response is not None else "")
    return CallError("other", message=f"{type(exc).__name__}: {exc}")


class BadAnswerBody(CallError):
    """A 200 whose body is not a usable answer (not a JSON object): a broken answer, retried like a 5xx."""

    def __init__(self) -> None:
        super().__init__("bad_answer")

    def __reduce__(self):  # Prefect and Dask pickle exceptions
        return (BadAnswerBody, ())


@functools.cache
def tls_context() -> ssl.SSLContext:
    """One TLS context for every endpoint client of this process. httpx builds a new one per client by
    default, loading the CA bundle each time: 30-60 ms per client, several clients per run (and per shard
    on Dask), all before the first call."""
    return httpx.create_ssl_context()


def completion_from(response: Any) -> Completion:
    """The answer text and token counts of a chat-completions response body.

    We post the body through the SDK's own `post` (auth, errors and connection handling stay the SDK's)
    and read the JSON ourselves: the SDK's request transform and response models cost about 1 ms of CPU
    per call, a third of our whole overhead, for nothing we use. A body without a message is an empty
    answer, which the judge's parser then reports as invalid.
    """
    if not isinstance(response, dict):
        raise BadAnswerBody()
    choices = response.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    # The answer only: a reasoning model's `reasoning_content` (vLLM, DeepSeek) is never the verdict.
    text = message.get("content") if isinstance(message.get("content"), str) else ""
    text = redact(text or "")  # an API key echoed back must not reach the cache, the database or a report
    usage = response.get("usage") or {}
    details = usage.get("completion_tokens_details") or {}
    return Completion(
        text or "",
        int(usage.get("prompt_tokens") or 0),
        int(usage.get("completion_tokens") or 0),
        finish_reason=choice.get("finish_reason"),
        reasoning_tokens=int((details.get("reasoning_tokens") if isinstance(details, dict) else 0) or 0),
    )


def served_by(completion: Completion, response: Any) -> Completion:
    """`completion` with what the answer's body said about the model that answered: its `model` and
    `system_fingerprint` (OpenAI-compatible bodies, Anthropic's `model`). Two lookups: the caller counts
    the distinct values per run (`CallStats.served`)."""
    if isinstance(response, dict):
        model, fingerprint = response.get("model"), response.get("system_fingerprint")
        completion.served_model = model if isinstance(model, str) else None
        completion.system_fingerprint = fingerprint if isinstance(fingerprint, str) else None
    return completion


MODEL_ENTRY_FIELDS = ("id", "root", "max_model_len", "created", "owned_by")
"""What a `/models` entry says about the model behind a name: vLLM's `root` (the checkpoint served) and
`max_model_len`; every OpenAI-compatible server's `created`."""


def model_entry_in(listing: Any, model: str) -> dict[str, JsonValue] | None:
    """The `/models` listing's entry for `model`, its identifying fields only (None: not listed)."""
    data = listing.get("data") if isinstance(listing, dict) else None
    for entry in data if isinstance(data, list) else []:
        if isinstance(entry, dict) and entry.get("id") == model:
            return {k: entry[k] for k in MODEL_ENTRY_FIELDS if isinstance(entry.get(k), (str, int, float))}
    return None


class Transport:
    """Several openai clients for one endpoint, used in turn.

    Several clients, each with its own small connection pool: httpx scans its whole pool on every
    request and response, so one pool of C connections costs O(C) CPU per call (see the README's
    benchmark notes); with `CONNECTIONS_PER_CLIENT` per client that stays flat.
    """

    def __init__(self, base_url: str, model: str, api_key: str, request_timeout: float, concurrency: int):
        self.base_url = base_url
        self.model = model
        self.clients = [self.new_client(api_key, request_timeout) for _ in range(clients_for(concurrency))]
        self._next_client = itertools.cycle(self.clients)

    def new_client(self, api_key: str, request_timeout: float) -> openai.AsyncOpenAI:
        """One client of the pool; a provider whose SDK client differs (Azure's) makes its own here."""
        return openai.AsyncOpenAI(
            api_key=api_key,
            base_url=self.base_url,
            max_retries=0,
            timeout=request_timeout,
            http_client=openai.DefaultAsyncHttpxClient(verify=tls_context()),
        )

    # What this wire's answers are (`providers.ModelAPI`): chat text, checked by no extra probe.
    checks_raw_scores = False
    answers_scores = False

    async def post(self, messages: list[dict[str, str]], sampling: Sampling) -> Any:
        """One attempt: the response body as parsed JSON (a 200 that is not JSON: `BadAnswerBody`)."""
        try:
            return await self.send(next(self._next_client), messages, sampling)
        except json.JSONDecodeError as exc:
            raise BadAnswerBody() from exc
        except openai.APIError as exc:
            raise openai_call_error(exc) from None

    async def send(self, client: openai.AsyncOpenAI, messages: list[dict[str, str]], sampling: Sampling) -> Any:
        """The request through the SDK's own `post` (auth, errors, connections stay the SDK's)."""
        return await client.post(
            "/chat/completions", cast_to=dict, body={"model": self.model, "messages": messages, **sampling}
        )

    def answer(self, response: Any) -> Completion:
        """The `Completion` in a response body (not a usable body: `BadAnswerBody`)."""
        try:
            return served_by(self.read(response), response)
        except (ValueError, TypeError, AttributeError) as exc:
            raise BadAnswerBody() from exc

    async def model_entry(self, timeout: float) -> dict[str, JsonValue] | None:
        """The endpoint's `/models` entry for the model (a vLLM server's says which checkpoint it serves);
        None when it lists none or does not answer within `timeout`."""
        try:
            listing = await self.clients[0].get("/models", cast_to=dict, options={"timeout": timeout})
        except (openai.APIError, json.JSONDecodeError):
            return None
        return model_entry_in(listing, self.model)

    async def key_refused(self, timeout: float) -> CallError | None:
        """The endpoint's refusal of the key (HTTP 401 or 403 to an authenticated `GET /models`, which costs
        nothing), for the check before a night's cells call; None when it took the key or said nothing
        about it (no listing, another error, no answer within `timeout`: the calls will tell)."""
        try:
            await self.clients[0].get("/models", cast_to=dict, options={"timeout": timeout})
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            return openai_call_error(exc)
        except (openai.APIError, json.JSONDecodeError):
            return None
        return None

    @staticmethod
    def read(response: Any) -> Completion:
        return completion_from(response)

    def ignored(self, params: Sampling, response: Any) -> tuple[str, str] | None:
        """A parameter the endpoint ignored and what shows it (`request_rules.Learned.note_ignored`), or None."""
        return None

    async def aclose(self) -> None:
        for client in self.clients:
            await client.close()

"""Cache identities: every key that outlives a run, derived in one place, each with its version.

Four keys are stored and looked up again by later runs: the call cache's request key (`request_key`), a
shard's Prefect cache key (`shard_identity`), a configuration's history key (`configuration_key`) and a
batch line's custom id (`batch_line_id`). Each is `identity(scheme, payload)`: the sha256 of what
determines the thing stored, encoded as its `Scheme` says.

A scheme carries a version. Version 1 is the encoding the stored keys were made with, and it hashes the
payload alone. Fields a scheme took in after keys of it were stored enter it only when they differ from
the value every earlier key implied (`added`): keys from before stay what they were, which is the one
compatibility rule here. A change that cannot keep the stored keys is a new version, whose scheme name
and number are hashed with the payload, so its keys never meet the old ones.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass

from pydantic import JsonValue
from typing_extensions import TypedDict

from judgebench_flows.core.providers import CHAT, IMPLIED, cache_name


@dataclass(frozen=True)
class Scheme:
    """How one kind of key is made: its name, version and how many hex digits of the digest it keeps."""

    name: str
    version: int
    length: int = 64


REQUEST = Scheme("request", 1)
SHARD = Scheme("shard", 1)
CONFIGURATION = Scheme("configuration", 1, length=16)
BATCH_LINE = Scheme("batch-line", 1)
# The API a request key names when the endpoint's URL does not: OpenAI's chat API was the first keyed.
FIRST_API = (IMPLIED, CHAT)


# The epoch a request belongs to (`--epochs`): the K-th sample of one prompt is another call, never the
# first one's answer replayed from the cache or a batch. A context variable, set around one epoch of a
# pair by the judging code (`epoch_of`), so every layer between the judge and the wire keys alike without
# each passing it on; 0 outside any, which is what every key stored before epochs existed implied.
EPOCH: ContextVar[int] = ContextVar("judgebench_epoch", default=0)


@contextlib.contextmanager
def epoch_of(epoch: int) -> Iterator[None]:
    """Requests made inside are keyed as the `epoch`-th sample of their prompt (0: as before epochs)."""
    token = EPOCH.set(epoch)
    try:
        yield
    finally:
        EPOCH.reset(token)


def _with_epoch(payload: Mapping[str, object]) -> Mapping[str, object]:
    """The payload keyed with its epoch when it is not the first: epoch 0's keys are the old ones."""
    epoch = EPOCH.get()
    return {**payload, "epoch": epoch} if epoch else payload


def identity(scheme: Scheme, payload: str) -> str:
    """The key of `payload` under `scheme` (version 1: the payload's digest alone, as stored keys are)."""
    if scheme.version > 1:
        payload = f"{scheme.name} v{scheme.version}\0{payload}"
    return hashlib.sha256(payload.encode()).hexdigest()[: scheme.length]


def added(value: str, implied: str) -> list[str]:
    """A field taken in after keys were stored: in the key only when it is not what those keys implied."""
    return [] if value == implied else [value]


def call_endpoint(base_url: str, provider: str, api: str) -> str:
    """The endpoint as a request key names it: its URL, and the API when not OpenAI's chat (the same
    messages sent to /pooling, as Messages, or as chat are different requests). Batch records name their
    endpoint this way too (`calls.batch.BatchStore`)."""
    keyed = cache_name(provider)  # an OpenAI-compatible provider's requests are OpenAI's
    tag = api if keyed == IMPLIED else f"{keyed}-{api}"
    if (keyed, api) == FIRST_API:
        return base_url
    return f"{base_url.rstrip('/')}#{tag}"


def request_key(endpoint: str, model: str, messages: Sequence[dict[str, str]], sampling: dict[str, JsonValue]) -> str:
    """The call cache's key: everything that determines an answer (endpoint, model, messages, sampling)."""
    payload = {"endpoint": endpoint.rstrip("/"), "model": model, "messages": list(messages), "sampling": sampling}
    return identity(REQUEST, json.dumps(_with_epoch(payload), sort_keys=True, ensure_ascii=False))


def batch_line_id(body: dict[str, JsonValue]) -> str:
    """A batch line's custom id: its request body's key, so the same request posted after a restart finds
    the batch that holds it; a later epoch's line is another line (a batch refuses two lines of one id)."""
    keyed = {"body": body, "epoch": EPOCH.get()} if EPOCH.get() else body
    return identity(BATCH_LINE, json.dumps(keyed, sort_keys=True, ensure_ascii=False))


@dataclass(frozen=True)
class ShardIdentity:
    """What decides a shard's judgments besides its pairs: the judge as built, the model and endpoint, the
    sampling overrides, the orders, how requests are shaped, the provider."""

    judge_fingerprint: str
    model: str
    base_url: str
    sampling_overrides: dict[str, JsonValue]
    orders: tuple[int, ...]
    request_style: str = "auto"
    drop_params: Sequence[str] = ()
    provider: str = IMPLIED
    epochs: int = 1
    # --priced-model (an Azure deployment's model): it chooses the request rule, so the shape of the requests
    priced_model: str | None = None


def shard_identity(shard: ShardIdentity) -> str:
    """A shard's key (without its pairs' hash): the fields joined by NUL, request shaping, provider, epochs
    and --priced-model only when not the defaults every earlier key implied."""
    parts = [
        shard.judge_fingerprint,
        shard.model,
        shard.base_url,
        repr(sorted(shard.sampling_overrides.items())),
        repr(shard.orders),
        *added(repr((shard.request_style, sorted(shard.drop_params))), repr(("auto", []))),
        *added(cache_name(shard.provider), IMPLIED),
        *added(f"epochs={shard.epochs}", "epochs=1"),
        *added(f"priced_model={shard.priced_model}", "priced_model=None"),
    ]
    return identity(SHARD, "\0".join(parts))


class ConfigurationIdentity(TypedDict, total=False):
    """What makes two runs comparable (`core.config.RunConfig.identity`); `provider` only when not OpenAI."""

    judge_type: str
    external: tuple[str, str, dict[str, JsonValue]] | str | None
    model: str
    endpoint: str | None
    data: str
    commit: str | None
    single_game: bool
    shuffle: bool | int
    max_samples: tuple[int, int] | int | None
    sampling: dict[str, float | int | str]
    prompts: str | None
    templates_dir: str | None
    request: list[str | list[str] | None]
    provider: str
    benchmark: str  # only when not JudgeBench, which every earlier key implied


def configuration_key(fields: ConfigurationIdentity) -> str:
    """A configuration's history key: its identity as sorted JSON (non-JSON values by their text), the
    provider only when not the OpenAI every earlier key implied."""
    kept = ConfigurationIdentity(**fields)
    if "provider" in kept and cache_name(kept["provider"]) == IMPLIED:
        del kept["provider"]
    return identity(CONFIGURATION, json.dumps(kept, sort_keys=True, default=str))

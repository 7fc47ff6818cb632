"""Every key that outlives a run is pinned here (`core.identity`): the call cache's request key per API and
provider, a shard's cache identity, a configuration's history key and a batch line's custom id. Each value
was computed before the keys were made in one module; a change here means stored caches, shard results,
run histories or open batches stop being found."""

from __future__ import annotations

import pytest

from judgebench_flows.calls.cache import request_key
from judgebench_flows.core.config import RunConfig
from judgebench_flows.core.endpoint import EndpointSettings
from judgebench_flows.core.identity import REQUEST, Scheme, batch_line_id, call_endpoint, identity
from judgebench_flows.judging.shards import JudgeSpec

MESSAGES = [{"role": "user", "content": "hé"}]


@pytest.mark.parametrize(
    ("provider", "api", "key"),
    [
        ("openai", "chat", "9448c718d30a0b781579bca0bf7d64858795c2faa4266f9f4a61af58bf98e936"),
        ("openai", "pooling", "3d583676d3d9a6ce48a32864077d0b27adbf8f132a2945d03e44abfa2bc44f34"),
        ("openai", "completions", "a280e1e003218409394699ca76d4ddd60d47e6e9d7c081c24d3c88fa971f9b0f"),
        ("anthropic", "chat", "f28bc905b438ef3224a3f5c8e5cf1f28972daec143da1ce66c7d2a81d1d9f7c7"),
        ("gemini", "chat", "c793fcba376b10edfa6d7c08b19fb9d0edcd632e8347b4378a0bec0a693301ec"),
    ],
)
def test_request_keys_are_pinned_per_api_and_provider(provider: str, api: str, key: str) -> None:
    endpoint = call_endpoint("http://h/v1/", provider, api)
    assert request_key(endpoint, "m", MESSAGES, {"temperature": 0}) == key


def test_batch_records_name_the_endpoint_as_before() -> None:
    assert call_endpoint("http://h/v1/", "openai", "chat") == "http://h/v1/"
    assert call_endpoint("http://h/v1/", "anthropic", "chat") == "http://h/v1#anthropic-chat"


def test_batch_line_id_is_pinned() -> None:
    body = {"model": "m", "messages": MESSAGES, "temperature": 0}
    assert batch_line_id(body) == "5bb22019483f68665d72296ef2456cb6ebe6357087fa3aae0de34eb0eba2ec14"


def _spec(**endpoint: object) -> JudgeSpec:
    return JudgeSpec(
        judge_type="arena_hard",
        model="m",
        endpoint=EndpointSettings(base_url="http://h/v1", **endpoint),  # type: ignore[arg-type]
        judge_fingerprint="fp",
        sampling_overrides={"temperature": 0.5},
    )


def test_shard_identities_are_pinned() -> None:
    assert _spec().cache_identity() == "6316de89d95b0923053b7be8713e2a9746a6945172afb0e81cb89f997842bdaf"
    assert (
        _spec(request_style="o1", drop_params=["seed"]).cache_identity()
        == "e05147327b727fef440481b6db16f6a49b4d0593d7a8dd74564172de0fd6ba21"
    )
    assert _spec(drop_params=["seed"]).cache_identity() == (
        "5eb1168e9d0c034163567c30432b2bddd893af04bdb90aed55e2a57ea88d39c6"
    )
    assert _spec(provider="anthropic").cache_identity() == (
        "f4c5168b6010e095aa6476356316e70ed3e4f7b59130d485da8bbc7ac21f30c0"
    )


def test_a_priced_model_that_shapes_the_requests_keys_its_shards_apart() -> None:
    """--priced-model chooses a deployment's request rule (o1-mini's takes no temperature, gpt-4o's does):
    shards judged under one shape are not served to a run under the other; without it the key is as before."""
    plain = _spec().cache_identity()
    assert plain == "6316de89d95b0923053b7be8713e2a9746a6945172afb0e81cb89f997842bdaf"
    as_o1 = _spec(priced_model="o1-mini").cache_identity()
    as_4o = _spec(priced_model="gpt-4o").cache_identity()
    assert len({plain, as_o1, as_4o}) == 3
    assert _spec(priced_model="o1-mini").cache_identity() == as_o1


def test_configuration_keys_are_pinned() -> None:
    assert RunConfig(model="m", base_url="http://h/v1").config_key() == "5668afc5e889e655"
    assert RunConfig(model="m", base_url="http://h/v1", provider="anthropic").config_key() == "848d3c9770031f9d"
    assert RunConfig(model="m", base_url="http://h/v1").config_key("a" * 40, "prompts") == "156ed63abc44c364"


def test_a_new_version_never_meets_the_stored_keys() -> None:
    payload = '{"x": 1}'
    assert identity(REQUEST, payload) != identity(Scheme("request", 2), payload)
    assert identity(Scheme("request", 2), payload) != identity(Scheme("shard", 2), payload)
    assert len(identity(Scheme("configuration", 1, length=16), payload)) == 16

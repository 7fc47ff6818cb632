"""One priced model per run: the name a run is priced under (`RunConfig.priced_model_name`, what the price
table and the retirement notice read) is the name its calls are shaped for (`judging.shards.request_rule_of`,
the rule results.json's `run.requests` reports). Both ask `EndpointSettings.priced_name`; were they computed
apart again, a Bedrock profile or an Azure deployment could be priced as one model and shaped as another."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from judgebench_flows.calls.providers import provider_rule
from judgebench_flows.calls.request_rules import Learned
from judgebench_flows.core.config import RunConfig, build_config
from judgebench_flows.data import db
from judgebench_flows.judging.estimate import CallCacheView
from judgebench_flows.judging.shards import JudgeSpec, build_judge, judge_spec, request_rule_of

LOCAL = "http://127.0.0.1:8123/v1"  # an endpoint given: nothing is called, no AWS region or key is looked up
ACCOUNT = "arn:aws:bedrock:us-east-1:123456789012"
BEDROCK_IDS = (
    "anthropic.claude-3-haiku-20240307-v1:0",
    "anthropic.claude-sonnet-4-5-20250929-v1:0",
    "meta.llama3-1-70b-instruct-v1:0",
    "mistral.mixtral-8x7b-instruct-v0:1",
    "amazon.nova-pro-v1:0",
)
# (provider, --model, --priced-model)
NAMES: list[tuple[str | None, str, str | None]] = [
    *(
        ("bedrock", name, None)
        for model in BEDROCK_IDS
        for name in (
            model,
            f"us.{model}",
            f"eu.{model}",
            f"apac.{model}",
            f"global.{model}",
            f"{ACCOUNT.replace('123456789012', '')}:foundation-model/{model}",
            f"{ACCOUNT}:inference-profile/us.{model}",
            f"{ACCOUNT}:inference-profile/global.{model}",
        )
    ),
    ("bedrock", f"{ACCOUNT}:application-inference-profile/a1b2c3d4e5f6", None),
    ("bedrock", "my-gateway-alias", "anthropic.claude-3-haiku-20240307-v1:0"),
    *(("azure", deployment, None) for deployment in ("judge-batch", "gpt-4o", "o1-mini", "o3-mini")),
    *(("azure", "judge", served) for served in ("gpt-4o-2024-08-06", "o1-mini", "o1-preview", "o3-mini", "gpt-5")),
    *(("openai", model, None) for model in ("gpt-4o", "o1-preview", "o1-mini", "o3-mini", "gpt-5", "openai/o1-mini")),
    ("openai", "gateway-alias", "o1-mini"),
    (None, "o1-mini", None),
    *(("anthropic", model, None) for model in ("claude-3-5-sonnet-20240620", "claude-sonnet-4-5-20250929")),
    ("anthropic", "alias", "claude-sonnet-4-5-20250929"),
    *((google, model, None) for google in ("gemini", "vertex") for model in ("gemini-1.5-pro-002", "gemini-2.5-flash")),
    ("together", "meta-llama/Meta-Llama-3.1-405B-Instruct-Turbo", None),
]
# (--request-style, --drop-params)
STYLES: list[tuple[str, list[str] | None]] = [("auto", None), ("o1", None), ("standard", ["top_p"])]


def _config(
    provider: str | None, model: str, priced: str | None, style: str = "auto", drop: list[str] | None = None
) -> RunConfig:
    return build_config(
        model=model, provider=provider, priced_model=priced, base_url=LOCAL, request_style=style, drop_params=drop
    )


@pytest.mark.parametrize(("provider", "model", "priced"), NAMES, ids=[f"{p}:{m}:{s}" for p, m, s in NAMES])
def test_a_run_is_shaped_for_the_model_it_is_priced_for(provider: str | None, model: str, priced: str | None) -> None:
    for style, drop in STYLES:
        config = _config(provider, model, priced, style, drop)
        spec = judge_spec(config, None)
        endpoint = spec.endpoint
        priced_rule = provider_rule(endpoint.provider, config.priced_model_name, style, tuple(endpoint.drop_params))
        assert request_rule_of(spec) == priced_rule
        # What results.json reports of it (`run.requests`) is the priced model's rule too.
        assert Learned(request_rule_of(spec)).report() == Learned(priced_rule).report()
        # The rule of the name as given is the same (Bedrock's rules read the model id inside a profile or
        # ARN themselves), as when request_rule_of took `--priced-model or --model`: merging the two changed
        # no request.
        given = provider_rule(endpoint.provider, priced or model, style, tuple(endpoint.drop_params))
        assert request_rule_of(spec) == given


def test_the_priced_name_is_the_model_id_a_profile_names_and_the_rule_is_its_familys() -> None:
    """What the two uses agree on, for the names where the priced name is not the name given."""
    sonnet = "anthropic.claude-sonnet-4-5-20250929-v1:0"
    cases = [
        (_config("bedrock", f"eu.{sonnet}", None), sonnet),
        (_config("bedrock", f"{ACCOUNT}:inference-profile/us.{sonnet}", None), sonnet),
        (_config("bedrock", f"global.{sonnet}", None), f"global.{sonnet}"),  # priced apart, shaped as its family
        (_config("azure", "judge", "o1-mini"), "o1-mini"),
    ]
    for config, priced in cases:
        assert config.priced_model_name == priced
    rules = [request_rule_of(judge_spec(config, None)).name for config, _ in cases]
    assert rules == ["bedrock-anthropic.claude-sonnet-4-5"] * 3 + ["o1"]


def _call_key(spec: JudgeSpec, engine: Engine) -> str:
    judge = build_judge(spec)
    assert judge.first_turn is not None
    return CallCacheView(spec, judge, engine)._key(judge.first_turn("What is 2 + 2?", "4", "5"))


def test_the_priced_model_keys_no_call(tmp_path: Path) -> None:
    """The call cache's key holds the model as called and the request as shaped, never the priced name: two
    runs of one deployment priced as two models shaped alike send, and reuse, the same requests."""
    engine = db.open_database(f"sqlite:///{tmp_path / 'results.db'}")
    one, other = (judge_spec(_config("azure", "judge", served), None) for served in ("gpt-4o-2024-08-06", "gpt-4o"))
    assert request_rule_of(one) == request_rule_of(other)
    assert _call_key(one, engine) == _call_key(other, engine)
    # shaped for another model (o1: the system message folded, no sampling sent), the request is another
    assert _call_key(judge_spec(_config("azure", "judge", "o1-mini"), None), engine) != _call_key(one, engine)

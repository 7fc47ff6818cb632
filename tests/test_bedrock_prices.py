"""Bedrock's prices in the bundled table: the models `--provider bedrock` serves (Claude 3 and 3.5, Llama 3.1,
Mistral), on-demand and batch at half, applied on Bedrock Runtime's own endpoints only, a cross-region profile
priced by its model id, and `judgebench estimate` showing them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from judgebench_flows.core.config import build_config
from judgebench_flows.core.pricing import bundled_prices, price_for

US_EAST = "https://bedrock-runtime.us-east-1.amazonaws.com"
HAIKU = "anthropic.claude-3-haiku-20240307-v1:0"
# (model id, input, output) per million tokens, as AWS lists them in us-east-1
LISTED = [
    (HAIKU, 0.25, 1.25),
    ("anthropic.claude-3-sonnet-20240229-v1:0", 3.00, 15.00),
    ("anthropic.claude-3-5-sonnet-20240620-v1:0", 3.00, 15.00),
    ("anthropic.claude-3-5-sonnet-20241022-v2:0", 3.00, 15.00),
    ("anthropic.claude-3-5-haiku-20241022-v1:0", 0.80, 4.00),
    ("meta.llama3-1-8b-instruct-v1:0", 0.22, 0.22),
    ("meta.llama3-1-70b-instruct-v1:0", 0.72, 0.72),
    ("meta.llama3-1-405b-instruct-v1:0", 2.40, 2.40),
    ("mistral.mistral-7b-instruct-v0:2", 0.15, 0.20),
    ("mistral.mixtral-8x7b-instruct-v0:1", 0.45, 0.70),
    ("mistral.mistral-large-2402-v1:0", 4.00, 12.00),
]


@pytest.mark.parametrize(("model", "input_price", "output_price"), LISTED, ids=[m for m, _, _ in LISTED])
def test_each_bedrock_model_is_priced_on_demand_and_half_in_a_batch(
    model: str, input_price: float, output_price: float
) -> None:
    on_demand = price_for(model, base_url=US_EAST)
    batch = price_for(model, batch=True, base_url="https://bedrock-runtime.eu-west-3.amazonaws.com")
    assert on_demand is not None and batch is not None
    assert (on_demand.input_per_mtok, on_demand.output_per_mtok) == (input_price, output_price)
    assert on_demand.cost(1_000_000, 1_000_000) == pytest.approx(input_price + output_price)
    assert batch.cost(1_000_000, 1_000_000) == pytest.approx((input_price + output_price) / 2)
    assert bundled_prices()[model].source == "https://aws.amazon.com/bedrock/pricing/"


def test_bedrock_prices_apply_on_bedrock_runtime_only() -> None:
    """A stand-in, a gateway or another AWS service serving the same id bills what it bills: unpriced."""
    assert price_for(HAIKU, base_url="https://bedrock-runtime-fips.us-east-1.amazonaws.com") is not None
    for url in ("http://127.0.0.1:8123", "https://s3.us-east-1.amazonaws.com", "https://bedrock-runtime.example.com"):
        assert price_for(HAIKU, base_url=url) is None, url


def test_a_cross_region_profile_or_arn_is_priced_as_its_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    for name in ("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    arn = f"arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.{HAIKU}"
    for model in (f"us.{HAIKU}", f"eu.{HAIKU}", arn):
        assert build_config(model=model, provider="bedrock").priced_model_name == HAIKU
    # a global profile is priced apart (not the regional price): unpriced unless --prices names it
    assert build_config(model=f"global.{HAIKU}", provider="bedrock").priced_model_name == f"global.{HAIKU}"
    # other providers' names are priced as given
    assert build_config(model="gpt-4o", provider="openai").priced_model_name == "gpt-4o"


def _pairs(path: Path, n: int = 4) -> Path:
    rows = [
        {
            "pair_id": f"pair-{i}",
            "source": "livebench-math",
            "question": f"What is {i} + {i}?",
            "response_A": f"{2 * i}",
            "response_B": f"{2 * i + 1}",
            "label": "A>B",
        }
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_estimate_shows_bedrock_prices_on_demand_and_batch(tmp_path: Path) -> None:
    """No call is made: the region names Bedrock Runtime's endpoint, whose prices the estimate shows."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env |= {"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "not-used"}
    env |= {"JUDGEBENCH_CACHE_DIR": str(tmp_path / "cache"), "AWS_CONFIG_FILE": "/nonexistent"}
    common = [
        *("--provider", "bedrock", "--model", f"us.{HAIKU}", "--data-path", str(_pairs(tmp_path / "pairs.jsonl"))),
        *("--db-url", f"sqlite:///{tmp_path}/j.db", "--judge-type", "vanilla", "--max-tokens", "100"),
    ]
    batch_options = [
        "--batch",
        "--bedrock-batch-input",
        "s3://judging/in/",
        "--bedrock-batch-output",
        "s3://judging/out/",
    ]
    batch_options += ["--bedrock-role-arn", "arn:aws:iam::123456789012:role/Judging"]
    shown = {}
    for mode, extra in (("on-demand", []), ("batch", batch_options), ("batch without its options", ["--batch"])):
        shown[mode] = subprocess.run(
            [sys.executable, "-m", "judgebench_flows.cli.main", "estimate", *common, *extra],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    on_demand, batch = shown["on-demand"], shown["batch"]
    assert on_demand.returncode == 0 and batch.returncode == 0, on_demand.stderr[-2000:] + batch.stderr[-2000:]
    assert "prices: $0.25 / $1.25 per million tokens in / out (bundled, read 2026-11-27)" in on_demand.stdout
    assert "worst case: $" in on_demand.stdout and "unpriced" not in on_demand.stdout
    assert "prices: $0.25 / $1.25 per million tokens in / out, batch (bundled" in batch.stdout, batch.stdout
    refused = shown["batch without its options"]
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert refused.returncode == 2 and len(errors) == 1 and "--bedrock-batch-input" in errors[0], refused.stderr
    assert "Traceback" not in refused.stderr

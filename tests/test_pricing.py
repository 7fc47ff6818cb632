"""Dollars without a run: the bundled price table, a user's price file, the arithmetic, the budget and the
worst case a run is checked against before its first call."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from judgebench_flows.core.config import RunConfig
from judgebench_flows.core.errors import UserError
from judgebench_flows.core.pricing import (
    BudgetReached,
    Spend,
    bundled_prices,
    cost_usd,
    estimate_tokens,
    format_usd,
    price_for,
    run_cost_text,
)
from judgebench_flows.core.records import JudgmentRecord
from judgebench_flows.judging.estimate import Estimate, check_budget, worst_case
from judgebench_flows.judging.shards import judge_spec

# The judge models JudgeBench's paper, its data files and the nightly matrix name.
NAMED_MODELS = (
    "gpt-4o-2024-05-13",
    "gpt-4o-mini",
    "gpt-4o-mini-2024-07-18",
    "o1-preview-2024-09-12",
    "o1-mini-2024-09-12",
    "o3-mini-2025-01-31",
    "claude-3-5-sonnet-20240620",
    "claude-3-haiku-20240307",
)


def test_bundled_table_prices_the_models_judgebench_names_with_a_date_and_source() -> None:
    table = bundled_prices()
    for model in NAMED_MODELS:
        price = table[model]
        assert price.output_per_mtok >= price.input_per_mtok > 0, model
        assert price.read_on is not None and price.source and price.source.startswith("https://"), model
        assert price.batch_discount == 0.5
    assert table["gpt-4o-mini-2024-07-18"].input_per_mtok == 0.15
    assert table["claude-3-5-sonnet-20240620"].output_per_mtok == 15.0


def test_cost_is_tokens_times_prices_and_a_batch_pays_the_discount() -> None:
    price = bundled_prices()["gpt-4o-2024-05-13"]  # $5 in, $15 out per million
    assert cost_usd(price, 1_000_000, 0, batch=False) == pytest.approx(5.0)
    assert cost_usd(price, 200_000, 100_000, batch=False) == pytest.approx(1.0 + 1.5)
    assert cost_usd(price, 200_000, 100_000, batch=True) == pytest.approx((1.0 + 1.5) / 2)
    priced = price_for("gpt-4o-2024-05-13", batch=True)
    assert priced is not None and priced.batch and priced.cost(200_000, 100_000) == pytest.approx(1.25)


def test_an_unknown_model_is_unpriced_never_free() -> None:
    assert price_for("Qwen/Qwen2.5-7B-Instruct") is None
    assert format_usd(None) == "unpriced"
    assert run_cost_text(None, "unpriced") == "unpriced"
    assert run_cost_text(None, None) == ""  # a run from before costs were kept
    assert format_usd(0.0) == "$0.00" and format_usd(12.345) == "$12.35" and format_usd(0.01234) == "$0.0123"


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_a_user_file_overrides_and_extends_the_bundled_table(tmp_path: Path, suffix: str) -> None:
    document = {
        "models": {
            "gpt-4o-mini-2024-07-18": {"input_per_mtok": 0.1, "output_per_mtok": 0.4},
            "my-vllm-judge": {"input_per_mtok": 0.02, "output_per_mtok": 0.02, "batch_discount": 1.0},
        },
        "read_on": "2026-01-02",
    }
    path = tmp_path / f"prices{suffix}"
    path.write_text(json.dumps(document))  # JSON is YAML too
    mine = price_for("gpt-4o-mini-2024-07-18", str(path))
    assert mine is not None and (mine.input_per_mtok, mine.read_on, mine.table) == (0.1, "2026-01-02", str(path))
    extra = price_for("my-vllm-judge", str(path), batch=True)
    assert extra is not None and extra.cost(1_000_000, 0) == pytest.approx(0.02)  # no batch discount there
    bundled = price_for("claude-3-haiku-20240307", str(path))
    assert bundled is not None and bundled.table == "bundled"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("models:\n  m: {input_per_mtok: -1, output_per_mtok: 1}\n", "models.m.input_per_mtok"),
        ("models:\n  m: {input_per_mtok: 1}\n", "models.m.output_per_mtok"),
        ("models:\n  m: {input_per_mtok: 1, output_per_mtok: 1, per_call: 3}\n", "models.m.per_call"),
        ("models: [1, 2]\n", "`models:` must map model ids to prices"),
        ("models: {m: [1, 2]\n", "not valid YAML"),
    ],
)
def test_a_bad_price_file_is_one_line_naming_the_entry(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "prices.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as caught:
        price_for("m", str(path))
    assert fragment in str(caught.value) and "\n" not in str(caught.value)
    assert str(path) in str(caught.value)


def test_a_missing_price_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot read it"):
        price_for("m", str(tmp_path / "absent.yaml"))


def test_spend_stops_new_calls_once_the_budget_is_spent() -> None:
    price = price_for("gpt-4o-2024-05-13")
    assert price is not None
    spend = Spend(price, max_cost=1.0)
    spend.charge(100_000, 0)  # $0.50
    spend.check()
    spend.charge(0, 40_000)  # $0.60 more
    with pytest.raises(BudgetReached) as caught:
        spend.check()
    assert caught.value.spent == pytest.approx(1.1) and "$1.10 spent of --max-cost $1.00" in str(caught.value)


def _pairs_file(tmp_path: Path, n: int = 3) -> Path:
    rows = [
        {
            "pair_id": f"p{i}",
            "source": "mmlu-pro-math",
            "question": f"What is {i} + {i}? Explain.",
            "response_A": f"It is {2 * i}. " * 20,
            "response_B": f"It is {2 * i + 1}. " * 20,
            "label": "A>B",
        }
        for i in range(n)
    ]
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _estimate(tmp_path: Path, **options: object) -> tuple[Estimate, list[list[dict[str, str]]]]:
    from judgebench_flows.data.loading import read_pairs_at, select_pairs

    path = _pairs_file(tmp_path)
    config = RunConfig(data_path=str(path), base_url="https://api.openai.com/v1", **options)  # type: ignore[arg-type]
    spec = judge_spec(config, None)
    index = select_pairs(path, None, 42)
    from judgebench_flows.judging.shards import build_judge

    judge = build_judge(spec)
    assert judge.first_turn is not None
    prompts = [
        judge.first_turn(p.question, *((p.response_A, p.response_B) if order == 0 else (p.response_B, p.response_A)))
        for p in read_pairs_at(path, index.offsets)
        for order in spec.orders
    ]
    return worst_case(spec, index.path, index.offsets), prompts


def _bytes_over_3(messages: list[dict[str, str]]) -> int:
    return sum(math.ceil(len(m["content"].encode()) / 3) + 8 for m in messages)


def test_worst_case_counts_both_orders_caps_and_the_follow_up_turn(tmp_path: Path) -> None:
    estimate, prompts = _estimate(tmp_path, model="gpt-4o-mini-2024-07-18", judge_type="arena_hard")
    assert estimate.judgments == 6 and estimate.requests == 12  # arena_hard may ask a second time
    follow_up = math.ceil(len(_ARENA_FOLLOW_UP().encode()) / 3) + 8
    first = sum(_bytes_over_3(m) for m in prompts)
    assert estimate.prompt_tokens == 2 * first + 6 * (4096 + follow_up)
    assert estimate.output_tokens == 12 * 4096
    assert estimate.worst_usd == pytest.approx((estimate.prompt_tokens * 0.15 + estimate.output_tokens * 0.6) / 1e6)


def _ARENA_FOLLOW_UP() -> str:
    from judgebench_flows.judges.builtin import ARENA_HARD_FOLLOW_UP

    return ARENA_HARD_FOLLOW_UP


def test_worst_case_of_one_turn_judge_single_game_with_max_tokens(tmp_path: Path) -> None:
    estimate, prompts = _estimate(
        tmp_path, model="claude-3-haiku-20240307", judge_type="vanilla", single_game=True, max_tokens=100
    )
    assert (estimate.judgments, estimate.requests) == (3, 3)
    assert estimate.prompt_tokens == sum(_bytes_over_3(m) for m in prompts)
    assert estimate.output_tokens == 300


def test_a_reasoning_model_without_max_tokens_is_capped_by_its_own_limit(tmp_path: Path) -> None:
    """o1's requests send no max_tokens (JudgeBench's o1 shape): the worst case uses the model's cap."""
    estimate, _ = _estimate(tmp_path, model="o1-preview-2024-09-12", judge_type="vanilla", request_style="o1")
    assert estimate.output_tokens == 6 * 32768
    unknown, _ = _estimate(tmp_path, model="my-reasoner", judge_type="vanilla", request_style="o1")
    assert unknown.output_tokens is None and unknown.worst_usd is None


def test_budget_check_refuses_with_the_estimate_or_when_it_cannot_check(tmp_path: Path) -> None:
    estimate, _ = _estimate(tmp_path, model="gpt-4o-mini-2024-07-18", judge_type="vanilla")
    assert estimate.worst_usd is not None
    check_budget(estimate, estimate.worst_usd * 1.01, None)
    check_budget(estimate, None, None)
    with pytest.raises(UserError, match=r"--max-cost \$0\.\d+: the worst case is \$0\.\d+ \(6 judgments"):
        check_budget(estimate, estimate.worst_usd / 2, None)
    unpriced, _ = _estimate(tmp_path, model="judge-model", judge_type="vanilla")
    with pytest.raises(UserError, match="has no price in the bundled table"):
        check_budget(unpriced, 10.0, None)


def test_estimate_tokens_is_conservative_for_english() -> None:
    text = "The quick brown fox jumps over the lazy dog. " * 10
    assert estimate_tokens(text) >= len(text) / 4  # GPT tokenizers: ~4 characters per English token


def _record(pair_id: str, order: int, cached: bool) -> JudgmentRecord:
    return JudgmentRecord(
        pair_id=pair_id,
        order=order,  # type: ignore[arg-type]
        source="mmlu-pro-math",
        category="mmlu-pro",
        label="A>B",
        status="ok",
        decision="A>B",
        decision_for_pair="A>B" if order == 0 else "B>A",
        judge_model="gpt-4o-2024-05-13",
        calls=1,
        cached_calls=int(cached),
        prompt_tokens=100_000,
        completion_tokens=10_000,
    )


def test_without_the_clients_counts_paid_judgments_are_priced_from_the_records(tmp_path: Path) -> None:
    """On Dask the flow has no client counts: judgments none of whose calls came from a cache are paid."""
    from judgebench_flows.calls.caller import CallStats
    from judgebench_flows.flows.judgebench_flow import cost_of_calls
    from judgebench_flows.scoring.metrics import Tally

    config = RunConfig(
        model="gpt-4o-2024-05-13", data_path=str(_pairs_file(tmp_path)), base_url="https://api.openai.com/v1"
    )
    spec = judge_spec(config, None)
    tally = Tally.of(
        [_record("p0", 0, False), _record("p0", 1, True), _record("p1", 0, False), _record("p1", 1, False)]
    )
    usage = cost_of_calls(spec, None, tally)
    assert usage["cost_usd"] == pytest.approx(3 * (0.1 * 5 + 0.01 * 15))  # three paid judgments at $5 / $15
    assert usage["prices"]["model"] == "gpt-4o-2024-05-13" and usage["prices"]["batch"] is False
    sent = CallStats(prompt_tokens=200_000, completion_tokens=0)  # in process: what the clients sent
    assert cost_of_calls(spec, sent, tally)["cost_usd"] == pytest.approx(1.0)
    unpriced = judge_spec(config.model_copy(update={"model": "judge-model"}), None)
    assert cost_of_calls(unpriced, sent, tally) == {"cost_usd": None, "prices": None}


@pytest.mark.parametrize(
    ("base_url", "priced"),
    [
        ("https://api.openai.com/v1", True),
        ("https://API.openai.com/v1/", True),
        ("https://api.anthropic.com", True),
        (None, True),  # not known: the table applies
        ("http://127.0.0.1:8000/v1", False),  # the bundled stand-in, a local vLLM
        ("https://my-gateway.example.com/v1", False),  # a gateway bills what it bills
        ("https://api.openai.com.evil.example/v1", False),
    ],
)
def test_bundled_prices_apply_on_the_providers_own_endpoint_only(base_url: str | None, priced: bool) -> None:
    assert (price_for("gpt-4o-mini", base_url=base_url) is not None) is priced


def test_a_price_file_prices_a_model_on_any_endpoint(tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("models:\n  gpt-4o-mini: {input_per_mtok: 0.01, output_per_mtok: 0.02}\n")
    price = price_for("gpt-4o-mini", str(prices), base_url="http://127.0.0.1:8000/v1")
    assert price is not None and price.input_per_mtok == 0.01 and price.table == str(prices)

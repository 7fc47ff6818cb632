"""A run's cost before it runs: the worst case a budget is checked against, and the expected cost.

The worst case sends every judgment uncached: each order's first request with its prompt tokens
(`pricing.estimate_tokens`, a conservative count without the provider's tokenizer) and the request's
output-token cap (the judge's `max_tokens` as the model's request rule sends it, else the model's own
cap from the price table), plus the judge's follow-up turn where it has one (the first answer at its
cap goes back in with it). The expected cost scales the tokens the latest finished run of the same
configuration used per judgment to this run's judgments. Nothing here calls the model.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from sqlalchemy.engine import Engine

from judgebench_flows.calls.request_rules import shape
from judgebench_flows.core.config import RunConfig
from judgebench_flows.core.errors import UserError
from judgebench_flows.core.pricing import MESSAGE_OVERHEAD_TOKENS, PricedAs, estimate_tokens, format_usd
from judgebench_flows.core.records import FINISHED, Pair
from judgebench_flows.data import db
from judgebench_flows.data.loading import read_pairs_at
from judgebench_flows.judges.procedure import Judge, Messages
from judgebench_flows.judging.shards import JudgeSpec, build_judge, request_rule_of

CHUNK = 500  # pairs read at a time: memory holds a chunk, not the data file


@dataclass
class Estimate:
    model: str
    judgments: int
    requests: int
    prompt_tokens: int
    output_tokens: int | None  # None: some request has no output cap (no max_tokens, no model cap known)
    price: PricedAs | None
    expected_usd: float | None = None
    expected_from: str | None = None  # the earlier run the expectation scales

    @property
    def worst_usd(self) -> float | None:
        if self.price is None or self.output_tokens is None:
            return None
        return self.price.cost(self.prompt_tokens, self.output_tokens)

    def describe(self) -> str:
        tokens = f"{self.prompt_tokens:,} prompt tokens (estimated) + " + (
            f"{self.output_tokens:,} output tokens at their caps"
            if self.output_tokens is not None
            else "unbounded output"
        )
        return f"{self.judgments:,} judgments, up to {self.requests:,} requests, {tokens}"

    def as_json(self) -> dict[str, object]:
        return {
            "model": self.model,
            "judgments": self.judgments,
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "worst_case_usd": self.worst_usd,
            "expected_usd": self.expected_usd,
            "expected_from_run": self.expected_from,
            "prices": self.price.model_dump() if self.price else None,
        }


def _prompt_tokens(messages: Messages) -> int:
    return sum(estimate_tokens(m.get("content") or "") + MESSAGE_OVERHEAD_TOKENS for m in messages)


def output_cap(spec: JudgeSpec, judge: Judge, messages: Messages, price: PricedAs | None) -> int | None:
    """The most tokens one answer may have: what the request sends, else the model's own cap."""
    _, params = shape(request_rule_of(spec), messages, dict(judge.sampling))
    cap = params.get("max_completion_tokens") or params.get("max_tokens")
    return int(cap) if cap else price.max_output_tokens if price else None


def _pairs(path: str, offsets: list[int]) -> Iterator[Pair]:
    for start in range(0, len(offsets), CHUNK):
        yield from read_pairs_at(path, offsets[start : start + CHUNK])


def worst_case(spec: JudgeSpec, path: str, offsets: list[int]) -> Estimate:
    """Every judgment of these pairs sent uncached, each answer at its cap."""
    judge = build_judge(spec)
    follow_up = getattr(judge, "follow_up", None)
    estimate = Estimate(spec.model, 0, 0, 0, 0, spec.price)
    for pair in _pairs(path, offsets):
        for order in spec.orders:
            estimate.judgments += 1
            a, b = (pair.response_A, pair.response_B) if order == 0 else (pair.response_B, pair.response_A)
            if judge.first_turn is None:  # a reward model scores both responses, no output tokens
                estimate.requests += 1
                estimate.prompt_tokens += estimate_tokens(pair.question + a) + estimate_tokens(pair.question + b)
                continue
            messages = judge.first_turn(pair.question, a, b)
            prompt, cap = _prompt_tokens(messages), output_cap(spec, judge, messages, spec.price)
            turns = 2 if follow_up else 1
            estimate.requests += turns
            estimate.prompt_tokens += prompt
            if follow_up:  # the first answer at its cap and the follow-up go back in
                estimate.prompt_tokens += prompt + (cap or 0) + _prompt_tokens([{"content": follow_up}])
            if cap is None or estimate.output_tokens is None:
                estimate.output_tokens = None
            else:
                estimate.output_tokens += turns * cap
    return estimate


def expected_cost(engine: Engine | None, config_key: str, estimate: Estimate) -> None:
    """Fill in the expected cost from the latest finished run of the same configuration, if any."""
    if engine is None or estimate.price is None:
        return
    for run in db.list_runs(engine, limit=5, config_key=config_key, statuses=FINISHED):
        usage = json.loads(run.results_json or "{}").get("usage") or {}
        if usage.get("judgments"):
            per = estimate.judgments / usage["judgments"]
            estimate.expected_usd = estimate.price.cost(
                round(per * (usage.get("prompt_tokens") or 0)), round(per * (usage.get("completion_tokens") or 0))
            )
            estimate.expected_from = run.run_id
            return


def check_priced(model: str, price: PricedAs | None, max_cost: float | None, prices_file: str | None) -> None:
    """A budget needs a price: an unpriced model with --max-cost cannot be checked (one line, exit 2)."""
    if max_cost is not None and price is None:
        where = f"in {prices_file} or " if prices_file else ""
        raise UserError(
            f"--max-cost: '{model}' has no price {where}in the bundled table, so the budget cannot be "
            "checked: give its price with --prices FILE"
        )


def check_budget(estimate: Estimate, max_cost: float | None, prices_file: str | None) -> None:
    """Refuse a run whose worst case is above its budget, or that cannot be checked (one line, exit 2)."""
    if max_cost is None:
        return
    check_priced(estimate.model, estimate.price, max_cost, prices_file)
    worst = estimate.worst_usd
    if worst is None:
        raise UserError(
            f"--max-cost: the requests to '{estimate.model}' have no output-token cap, so the worst case is "
            "unbounded: pass --max-tokens, or give max_output_tokens in --prices"
        )
    if worst > max_cost:
        raise UserError(
            f"--max-cost {format_usd(max_cost)}: the worst case is {format_usd(worst)} ({estimate.describe()}); "
            "refused before any call"
        )


def estimate_run(config: RunConfig) -> Estimate:
    """`judgebench estimate`: the worst case of a run with this configuration and, when the results
    database holds a finished run of the same configuration, the expected cost. Clones the dataset like
    a run does (the commit is part of the configuration); calls no model."""
    from judgebench_flows.data.dataset import data_file_in, fetch_repository
    from judgebench_flows.data.loading import select_pairs
    from judgebench_flows.judging.shards import judge_spec

    commit = None
    if config.data_path:
        path, templates_dir = config.data_path, config.templates_dir
    else:
        checkout = fetch_repository(config.repo_url, config.ref, config.cache_dir)
        path, templates_dir = str(data_file_in(checkout, config.data_file)), config.templates_dir
        templates_dir, commit = templates_dir or str(checkout.templates_dir), checkout.commit
    spec = judge_spec(config, templates_dir)
    index = select_pairs(path, config.max_samples, config.seed)
    estimate = worst_case(spec, index.path, index.offsets)
    try:
        engine = db.open_existing(config.db_url)
    except UserError:  # no database yet: no earlier run to expect from
        engine = None
    expected_cost(engine, config.config_key(commit, spec.judge_fingerprint), estimate)
    return estimate

"""A run's cost before it runs: the worst case a budget is checked against, and the expected cost.

The worst case sends every judgment the call cache cannot answer: each order's first request with its
prompt tokens (`pricing.estimate_tokens`, a conservative count without the provider's tokenizer) and
the request's output-token cap (the judge's `max_tokens` as the model's request rule sends it, else the
model's own cap from the price table), plus the judge's follow-up turn where it has one (the first
answer at its cap goes back in with it). A judgment whose requests are all in the call cache (a resumed
or repeated run) costs nothing; one that is only partly there is counted whole. The expected cost scales
the tokens the latest finished run of the same configuration used per judgment to this run's
judgments. Nothing here calls the model.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

from sqlalchemy.engine import Engine

from judgebench_flows.calls.cache import request_key
from judgebench_flows.calls.providers import wire_params
from judgebench_flows.calls.request_rules import shape
from judgebench_flows.core.config import RunConfig
from judgebench_flows.core.errors import UserError
from judgebench_flows.core.identity import call_endpoint, epoch_of
from judgebench_flows.core.pricing import MESSAGE_OVERHEAD_TOKENS, PricedAs, estimate_tokens, format_usd
from judgebench_flows.core.records import FINISHED, Pair
from judgebench_flows.data import db
from judgebench_flows.data.loading import read_pairs_at
from judgebench_flows.judges.procedure import Judge, Messages, PlannedCall, PlansCalls, Prompted, Sampling
from judgebench_flows.judging.shards import JudgeSpec, build_judge, request_rule_of
from judgebench_flows.scoring.alerts import DEFAULT_WITHIN_VARIANCE, detectable_drop, epochs_to_detect
from judgebench_flows.scoring.noise import stored_noise_figure
from judgebench_flows.scoring.regression import plan_of
from judgebench_flows.scoring.sequential import nights_to_detect

CHUNK = 500  # pairs read at a time: memory holds a chunk, not the data file


@dataclass
class Planning:
    """What the regression check of a run like this one can see: the accuracy drop it detects 80% of the
    time (`scoring.alerts.detectable_drop`), from the judge's noise as measured or as assumed, and the
    epochs a wanted drop (`--detect`) needs."""

    within_variance: float
    noise_from: str  # "run <id>" whose noise was measured, or "assumed"
    alpha: float
    baseline_runs: int
    detectable: float
    detect: float | None = None
    epochs_needed: int | None = None
    nights_needed: int | None = None  # nights at the run's epochs the sequential test takes to catch `detect` 90%


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
    cached: int = 0  # judgments the call cache answers whole: not in the counts above
    epochs: int = 1
    pairs: int = 0
    plan: Planning | None = None  # what a run of this many epochs can detect (`plan_detection`)

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
        paid = self.judgments - self.cached
        cached = f" ({self.cached:,} more answered by the call cache)" if self.cached else ""
        return f"{paid:,} judgments{cached}, up to {self.requests:,} requests, {tokens}"

    def as_json(self) -> dict[str, object]:
        return {
            "model": self.model,
            "judgments": self.judgments,
            "cached_judgments": self.cached,
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


def output_cap(
    spec: JudgeSpec, judge: Judge, messages: Messages, price: PricedAs | None, sampling: Sampling | None = None
) -> int | None:
    """The most tokens one answer may have: what the request sends (`sampling`, else the judge's), else
    the model's own cap."""
    _, params = shape(request_rule_of(spec), messages, dict(judge.sampling if sampling is None else sampling))
    params = wire_params(spec.endpoint.provider, spec.model, params)
    cap = params.get("max_completion_tokens") or params.get("max_tokens")
    return int(cap) if isinstance(cap, (int, float, str)) and cap else price.max_output_tokens if price else None


def _chunks(path: str, offsets: list[int]) -> Iterator[list[Pair]]:
    for start in range(0, len(offsets), CHUNK):
        yield read_pairs_at(path, offsets[start : start + CHUNK])


def _first_turn(judge: Judge, pair: Pair, order: int) -> Messages | None:
    """The request one order's judgment opens with; None for a judge without one (a reward model)."""
    if judge.first_turn is None:
        return None
    a, b = (pair.response_A, pair.response_B) if order == 0 else (pair.response_B, pair.response_A)
    return judge.first_turn(pair.question, a, b)


class CallCacheView:
    """The call cache as a run with these settings reads it: which judgments it answers whole. Keys are
    computed as the caller computes them, under the model's request rule before any adjustment; a
    judgment whose key differs (a rule the endpoint made the last run adjust) is counted as paid."""

    def __init__(self, spec: JudgeSpec, judge: Judge, engine: Engine):
        self.spec, self.judge, self.engine = spec, judge, engine
        self.prompted = cast(Prompted, judge)  # a judge with a first turn formats and parses its prompts
        self.endpoint = call_endpoint(spec.base_url, spec.endpoint.provider_name, judge.api)

    def _key(self, messages: Messages) -> str:
        sent, params = shape(request_rule_of(self.spec), list(messages), dict(self.judge.sampling))
        return request_key(self.endpoint, self.spec.model, sent, params)

    def _answers(self, turns: list[Messages]) -> list[str | None]:
        keys = [self._key(messages) for messages in turns]
        rows = db.cache_get_many(self.engine, keys, self.spec.reuse())
        return [rows[key].response if key in rows else None for key in keys]

    def answered(self, firsts: list[Messages]) -> set[int]:
        """Indexes of the judgments (by their first turns) whose first turn and, when the judge asks one,
        follow-up are cached."""
        answers = self._answers(firsts)
        done = {i for i, text in enumerate(answers) if text is not None and not self.prompted.wants_follow_up(text)}
        asked = [i for i, text in enumerate(answers) if text is not None and i not in done]
        follow_ups = [
            [
                *firsts[i],
                {"role": "assistant", "content": answers[i] or ""},
                {"role": "user", "content": self.prompted.follow_up or ""},
            ]
            for i in asked
        ]
        return done | {i for i, text in zip(asked, self._answers(follow_ups), strict=True) if text is not None}


def _add_judgment(estimate: Estimate, spec: JudgeSpec, judge: Judge, pair: Pair, messages: Messages | None) -> None:
    """One judgment sent uncached, opening with `messages`, each answer at its cap."""
    estimate.requests += 1
    if messages is None:  # a reward model scores both responses, no output tokens
        a, b = pair.response_A, pair.response_B
        estimate.prompt_tokens += estimate_tokens(pair.question + a) + estimate_tokens(pair.question + b)
        return
    prompt, cap = _prompt_tokens(messages), output_cap(spec, judge, messages, spec.price)
    estimate.prompt_tokens += prompt
    turns = 1
    follow_up = getattr(judge, "follow_up", None)
    if follow_up:  # the first answer at its cap and the follow-up go back in
        turns = 2
        estimate.requests += 1
        estimate.prompt_tokens += prompt + (cap or 0) + _prompt_tokens([{"content": follow_up}])
    if cap is None or estimate.output_tokens is None:
        estimate.output_tokens = None
    else:
        estimate.output_tokens += turns * cap


def _add_planned(estimate: Estimate, spec: JudgeSpec, judge: Judge, calls: list[PlannedCall]) -> None:
    """A pair of a judge that plans its calls (`PlansCalls`): every call it may make, each answer at its cap."""
    for planned in calls:
        estimate.requests += 1
        estimate.prompt_tokens += _prompt_tokens(planned.messages) + planned.carried_tokens
        cap = output_cap(spec, judge, planned.messages, spec.price, planned.sampling)
        if cap is None or estimate.output_tokens is None:
            estimate.output_tokens = None
        else:
            estimate.output_tokens += cap


def worst_case(spec: JudgeSpec, path: str, offsets: list[int], engine: Engine | None = None) -> Estimate:
    """Every judgment of these pairs the call cache in `engine` does not answer, sent with each answer
    at its cap (no engine, or a run that does not read the cache: every judgment). A judge that plans its
    calls (LLMBar's) is priced by all of them, none taken from the cache: a worst case."""
    judge = build_judge(spec)
    if isinstance(judge, PlansCalls):
        return _planned_worst_case(spec, judge, path, offsets)
    cache = (
        CallCacheView(spec, judge, engine)
        if engine is not None and spec.endpoint.cache == "use" and judge.first_turn is not None
        else None
    )
    estimate = Estimate(spec.model, 0, 0, 0, 0, spec.price, epochs=spec.epochs, pairs=len(offsets))
    for chunk in _chunks(path, offsets):
        judgments = [(pair, _first_turn(judge, pair, order)) for pair in chunk for order in spec.orders]
        firsts = [messages for _, messages in judgments if messages is not None]  # all of them with a cache
        for epoch in range(spec.epochs):  # each epoch's calls are keyed, cached and paid apart
            with epoch_of(epoch):
                answered = cache.answered(firsts) if cache is not None else set()
            estimate.judgments += len(judgments)
            estimate.cached += len(answered)
            for i, (pair, messages) in enumerate(judgments):
                if i not in answered:
                    _add_judgment(estimate, spec, judge, pair, messages)
    return estimate


def _planned_worst_case(spec: JudgeSpec, judge: PlansCalls, path: str, offsets: list[int]) -> Estimate:
    estimate = Estimate(spec.model, 0, 0, 0, 0, spec.price, epochs=spec.epochs, pairs=len(offsets))
    for chunk in _chunks(path, offsets):
        for pair in chunk:
            calls = judge.planned_calls(pair, spec.orders)
            for _ in range(spec.epochs):
                estimate.judgments += len(spec.orders)
                _add_planned(estimate, spec, cast(Judge, judge), calls)
    return estimate


def measured_noise(engine: Engine | None, config_key: str) -> tuple[float, str] | None:
    """The judge's within-pair variance as the configuration's latest run that measured it says."""
    if engine is None:
        return None
    for run in db.list_runs(engine, limit=5, config_key=config_key, statuses=FINISHED):
        within = stored_noise_figure(run.results_json, "within_variance")
        if within is not None:
            return within, f"run {run.run_id[:8]}"
    return None


def plan_detection(
    config: RunConfig, estimate: Estimate, noise: tuple[float, str] | None, detect: float | None
) -> Planning:
    """What the run's regression check can detect with its epochs, and the epochs `detect` (points) needs."""
    within, source = noise or (DEFAULT_WITHIN_VARIANCE, "assumed")
    alpha = plan_of(config).accuracy_alpha
    pairs, runs = estimate.pairs, config.baseline_runs
    plan = Planning(within, source, alpha, runs, detectable_drop(within, pairs, estimate.epochs, runs, alpha))
    if detect is not None:
        plan.detect = detect
        plan.epochs_needed = epochs_to_detect(detect / 100, within, pairs, runs, alpha)
        sequential = plan_of(config).sequential_alpha
        plan.nights_needed = nights_to_detect(detect / 100, within, pairs, estimate.epochs, sequential)
    return plan


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
            f"--max-cost: '{model}' has no price {where}in the bundled table for this endpoint (the table "
            "prices the providers' own APIs only), so the budget cannot be checked: give its price with --prices FILE"
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


def estimate_run(config: RunConfig, detect: float | None = None) -> Estimate:
    """`judgebench estimate`: the worst case of a run with this configuration and, when the results
    database holds a finished run of the same configuration, the expected cost. Clones the dataset like
    a run does (the commit is part of the configuration); calls no model."""
    from judgebench_flows.data.benchmark_data import run_paths
    from judgebench_flows.data.dataset import fetch_repository
    from judgebench_flows.data.loading import select_pairs
    from judgebench_flows.judging.shards import judge_spec

    commit = None
    if config.data_path:
        path, templates_dir = config.data_path, config.templates_dir
    else:
        checkout = fetch_repository(config.repo_url, config.ref, config.cache_dir)
        data, templates_dir = run_paths(config, checkout)
        path, commit = str(data), checkout.commit
    spec = judge_spec(config, templates_dir)
    index = select_pairs(path, config.max_samples, config.seed)
    try:
        engine = db.open_existing(config.db_url)
    except UserError:  # no database yet: no earlier run to expect from, nothing cached
        engine = None
    estimate = worst_case(spec, index.path, index.offsets, engine)
    config_key = config.config_key(commit, spec.judge_fingerprint)
    expected_cost(engine, config_key, estimate)
    estimate.plan = plan_detection(config, estimate, measured_noise(engine, config_key), detect)
    return estimate

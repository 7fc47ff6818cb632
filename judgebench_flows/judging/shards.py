"""Judge pairs and shards of pairs: both orders at once, records out. No Prefect here.

A `JudgeSpec` is everything a worker needs to rebuild the judge and its endpoint caller, and nothing
secret, so it can travel to a Dask worker as a task parameter. `runtime_for` builds the judge and the
caller once per run (`run_context.RunContext`) and event loop, so all shards of a run in a process share
one connection limit and one client.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, JsonValue

from judgebench_flows.calls.caller import CallStats, ChatCaller
from judgebench_flows.calls.global_limits import limit_names
from judgebench_flows.calls.heard import heard_here
from judgebench_flows.calls.providers import provider_rule, unserved
from judgebench_flows.calls.request_rules import Adjustment, Learned, RequestReport, RequestRule
from judgebench_flows.core.api_keys import read_api_key
from judgebench_flows.core.config import RunConfig
from judgebench_flows.core.credentials import resolve as resolve_credentials
from judgebench_flows.core.endpoint import EndpointSettings
from judgebench_flows.core.errors import UserError
from judgebench_flows.core.identity import ShardIdentity, epoch_of, shard_identity
from judgebench_flows.core.pricing import PricedAs, Spend, batch_of, price_for
from judgebench_flows.core.records import JudgmentRecord, Pair, flip
from judgebench_flows.data import db
from judgebench_flows.data.journal import AnswerJournal, journal_dir
from judgebench_flows.data.loading import PairIndex, read_pairs_at, shuffle_responses
from judgebench_flows.judges import get_judge
from judgebench_flows.judges.procedure import Judge, Outcome
from judgebench_flows.judging.run_context import EarlyJudgment, ProgressHook, RunCalls, RunContext, Runtime


class JudgeSpec(BaseModel):
    judge_type: str
    judge_template: str | None = None
    templates_dir: str | None = None
    model: str
    # The run's endpoint settings, whole, with `base_url` resolved (None when no endpoint is called).
    # Names of where the key is, never the key: a spec travels to Dask workers and into Prefect.
    endpoint: EndpointSettings
    sampling_overrides: dict[str, Any] = {}
    orders: tuple[int, ...] = (0, 1)
    # Every pair judged this many times in each order (`--epochs`); each epoch's calls are keyed apart.
    epochs: int = 1
    db_url: str | None = None
    # The run judging (part of no cache key): noted with each answer it pays for (`db.paid_by_run`); runs
    # side by side in one process (the nightly matrix's cells) each get their own caller, counted and
    # closed apart, even when they judge alike.
    run_id: str | None = None
    # Which cached answers the run may reuse (part of no call-cache key): those paid under this flow run
    # (a night's or a deployment run's, `flows/cache_scope`; None: any run's), written at or after
    # `cache_newer_than` (the run's start less --cache-max-age). A scope also separates the shard cache.
    cache_scope: str | None = None
    cache_newer_than: datetime | None = None
    # Runs of the same configuration this run waited for (`data/run_lock`): their answers are reused too,
    # whatever flow run paid them (part of no cache key).
    cache_twins: tuple[str, ...] = ()
    external_judge_path: str | None = None
    external_judge_function: str = "evaluate"
    external_judge_config: dict[str, object] = {}  # the user's judge's alone: no shape of ours
    # Names of the Prefect global limits shared by all workers (see global_limits); None: in-process only.
    global_limit: str | None = None
    global_rate_limit: str | None = None
    reward_backend: str = "pooling"
    # Filled by the flow from the built judge: changes whenever prompts, sampling or parser source change.
    judge_fingerprint: str = ""
    # What the model's calls cost (None: unpriced) and the run's budget (--max-cost): each process's
    # caller tracks the spend of the calls it sends. Not part of any cache key: prices change no answer.
    price: PricedAs | None = None
    max_cost: float | None = None
    # Where answers the results database refused are journaled until it takes them (`data.journal`):
    # under the run's --cache-dir, one folder per database. Part of no cache key.
    journal_dir: str | None = None

    @property
    def base_url(self) -> str:
        return self.endpoint.base_url or "local:"

    def reuse(self) -> db.CacheReuse:
        return db.CacheReuse(self.cache_scope, self.cache_newer_than, self.cache_twins)

    def cache_identity(self) -> str:
        endpoint = self.endpoint
        return shard_identity(
            ShardIdentity(
                self.judge_fingerprint,
                self.model,
                self.base_url,
                self.sampling_overrides,
                self.orders,
                endpoint.request_style,
                endpoint.drop_params,
                endpoint.provider_name,
                self.epochs,
                endpoint.priced_model,
            )
        )


class Shard(BaseModel):
    """A shard by reference: the data file and where its pairs start, plus the shuffle seed if any.

    Prefect walks every task parameter (and Dask ships them): fifty pairs of long answers cost about a
    millisecond per judgment that way, offsets cost nothing. Workers read the pairs themselves.
    """

    index: int
    path: str
    offsets: list[int]
    shuffle_seed: int | None = None

    def load(self) -> list[Pair]:
        pairs = read_pairs_at(self.path, self.offsets)
        return shuffle_responses(pairs, self.shuffle_seed) if self.shuffle_seed is not None else pairs

    def content_hash(self) -> str:
        """Hash of the pairs as judged (after any shuffle): the shard cache key follows the data itself."""
        h = hashlib.sha256()
        for pair in self.load():
            h.update(pair.model_dump_json().encode())
        return h.hexdigest()


# What `build_judge` reads of a spec: specs equal in these have one judge (`judge_of`).
JUDGE_FIELDS = {
    "judge_type",
    "templates_dir",
    "judge_template",
    "external_judge_path",
    "external_judge_function",
    "external_judge_config",
    "model",
    "sampling_overrides",
    "reward_backend",
}


def judge_of(spec: JudgeSpec, calls: RunCalls) -> Judge:
    """The spec's judge, built once per run (its templates read and compiled once): the spec's
    fingerprint, the shards' calls and the published prompts all use this one."""
    key = spec.model_dump_json(include=JUDGE_FIELDS)
    judge = calls.judges.get(key)
    if judge is None:
        judge = calls.judges[key] = build_judge(spec)
    return judge


def build_judge(spec: JudgeSpec) -> Judge:
    return get_judge(
        spec.judge_type,
        spec.templates_dir,
        spec.judge_template,
        spec.external_judge_path,
        spec.external_judge_function,
        spec.external_judge_config,
        model=spec.model,
        sampling_overrides=spec.sampling_overrides,
        reward_backend=spec.reward_backend,
    )


def runtime_for(spec: JudgeSpec, run: RunContext) -> Runtime:
    """The judge and caller for this spec in the run and the running event loop (created on first use)."""
    per_loop = run.calls.runtimes.setdefault(asyncio.get_running_loop(), {})
    key = spec.model_dump_json()
    runtime = per_loop.get(key)
    if runtime is None:
        settings = spec.endpoint
        judge = judge_of(spec, run.calls)
        caller = ChatCaller(
            # The spec's URL has no user:password@; the caller's does.
            settings.model_copy(update={"base_url": resolve_credentials(spec.base_url)}),
            model=spec.model,
            api_key=read_api_key(settings.api_key_env, settings.api_key_secret, provider=settings.provider),
            engine=db.open_database(spec.db_url) if spec.db_url and settings.cache != "off" else None,
            global_rate_limit=spec.global_rate_limit,
            paid_by=spec.run_id,
            reuse=spec.reuse(),
            request_rule=request_rule_of(spec),
            spend=Spend(spec.price, spec.max_cost, night=run.night.spend) if spec.price is not None else None,
            api=judge.api,  # judge_lm/panda_lm: completions; reward_model: pooling
            state=run.calls.state,
            journal=AnswerJournal(Path(spec.journal_dir), spec.run_id or "run") if spec.journal_dir else None,
        )
        runtime = Runtime(judge, caller)
        per_loop[key] = runtime
    return runtime


def request_rule_of(spec: JudgeSpec) -> RequestRule:
    """The rule the spec's calls are shaped by: for the model the run is priced for (`priced_name`: a
    deployment is shaped for the model it serves, a Bedrock profile for its model id), as the settings'
    `RunConfig.priced_model_name` names it."""
    endpoint = spec.endpoint
    model = endpoint.priced_name(spec.model)
    return provider_rule(endpoint.provider, model, endpoint.request_style, tuple(endpoint.drop_params))


def learned_of(spec: JudgeSpec, calls: RunCalls) -> Learned:
    """What the run learned about the spec's endpoint and model from 400s, keyed as its caller keys it."""
    return calls.state.learned_for(resolve_credentials(spec.base_url), spec.model, request_rule_of(spec))


def request_report_of(spec: JudgeSpec, calls: RunCalls) -> RequestReport:
    """The request rule this run applied and what it adjusted on the way (for results.json's `run`): in
    this process, or on Dask workers and merged here from their shards' results (`merge_adjustments`)."""
    return learned_of(spec, calls).report()


def adjustments_of(spec: JudgeSpec, calls: RunCalls) -> list[Adjustment]:
    """The request adjustments the run knows here for the spec's endpoint and model (small, no secret)."""
    return list(learned_of(spec, calls).adjustments)


def merge_adjustments(spec: JudgeSpec, calls: RunCalls, adjustments: Iterable[Adjustment]) -> list[Adjustment]:
    """Take in adjustments another process learned (a worker's, or the flow's passed to a worker): applied to
    the run's requests here from now on and reported with its own. Returns the ones new here."""
    return learned_of(spec, calls).merge(adjustments)


class ShardRecords(list[JudgmentRecord]):
    """A shard's records, plus the request adjustments known to the process that judged them when it was
    done, what the endpoint said to the shard's calls (`served`, `model_entry`) and which runs paid the
    answers its calls read from the call cache (`cache_sources`; see `CallStats`): how what a Dask worker
    learned and heard gets back to the flow. A plain list to everything else; a shard result stored
    before this existed (a plain list) carries none."""

    def __init__(
        self,
        records: Iterable[JudgmentRecord] = (),
        adjustments: Iterable[Adjustment] = (),
        run_id: str | None = None,
        served: Counter[tuple[str, str]] | None = None,
        model_entry: dict[str, JsonValue] | None = None,
        cache_sources: Counter[str] | None = None,
    ) -> None:
        super().__init__(records)
        self.adjustments: list[Adjustment] = [change.copy() for change in adjustments]
        # The run that judged the shard: a later run served it from the shard cache has its answers from there.
        self.run_id = run_id
        self.from_shard_cache = False
        self.served: Counter[tuple[str, str]] = Counter(served or {})
        self.model_entry = model_entry
        self.cache_sources: Counter[str] = Counter(cache_sources or {})


def shard_cache_source(records: list[JudgmentRecord]) -> tuple[str, int] | None:
    """(the run that judged it, its calls) for a shard served whole from Prefect's shard cache, else None
    (a result stored before this was known names no run: "")."""
    if not getattr(records, "from_shard_cache", False):
        return None
    return getattr(records, "run_id", None) or "", sum(r.calls for r in records)


def heard_on_worker(records: list[JudgmentRecord]) -> CallStats:
    """What the endpoint said to a shard judged elsewhere (a Dask worker) and who paid the answers it read
    from the call cache, as `CallStats` to add up; a shard served from Prefect's shard cache heard nothing
    tonight (its answers are counted under the run that judged it: `shard_cache_source`)."""
    if getattr(records, "from_shard_cache", False):
        return CallStats()
    heard = CallStats(model_entry=getattr(records, "model_entry", None))
    heard.served.update(getattr(records, "served", None) or {})
    heard.cache_sources.update(getattr(records, "cache_sources", None) or {})
    return heard


async def close_runtimes(calls: RunCalls, spec: JudgeSpec | None = None) -> CallStats:
    """Close the run's endpoint clients of this loop, or only `spec`'s (a run ending while others go on in
    the same loop); returns what they sent, summed (see `usage_of_calls`)."""
    return await calls.close_runtimes(spec.model_dump_json() if spec is not None else None)


def _record(pair: Pair, order: int, outcome: Outcome, model: str, epoch: int = 0) -> JudgmentRecord:
    return JudgmentRecord(
        pair_id=pair.pair_id,
        order=order,  # type: ignore[arg-type]
        epoch=epoch,
        source=pair.source,
        category=pair.category,
        label=pair.label,
        status=outcome.status,
        decision=outcome.decision,  # type: ignore[arg-type]
        decision_for_pair=(outcome.decision if order == 0 else flip(outcome.decision)),  # type: ignore[arg-type]
        judge_model=model,
        prompt=outcome.prompt,
        response=outcome.response,
        error=outcome.error,
        latency_s=round(outcome.latency_s, 4),
        calls=len(outcome.completions) + _failed_calls(outcome),
        cached_calls=sum(1 for c in outcome.completions if c.cached),
        prompt_tokens=sum(c.prompt_tokens for c in outcome.completions),
        completion_tokens=sum(c.completion_tokens for c in outcome.completions),
        reasoning_tokens=sum(c.reasoning_tokens for c in outcome.completions),
        scores=outcome.scores,
    )


def _failed_calls(outcome: Outcome) -> int:
    """The calls of a judgment that got no answer (a failed one's last call, unless its judge counted them)."""
    if outcome.failed_calls is not None:
        return outcome.failed_calls
    return 1 if outcome.status == "failed" else 0


def _no_progress(judgments: int) -> None:
    pass


async def judge_pair(
    pair: Pair,
    runtime: Runtime,
    orders: tuple[int, ...] = (0, 1),
    tick: Callable[[int], None] = _no_progress,
    epochs: int = 1,
) -> list[JudgmentRecord]:
    """The judge decides the pair's orders (concurrently, or from shared calls) once per epoch, all epochs
    at once, and caches what it may; the records count its calls. Each epoch's requests are keyed as that
    epoch's (`identity.epoch_of`), so epoch 1 is asked again, never answered with epoch 0's reply."""
    if epochs == 1:  # the common case, without a task per epoch
        return await _judge_epoch(pair, runtime, orders, tick, 0)
    per_epoch = await asyncio.gather(*(_judge_epoch(pair, runtime, orders, tick, epoch) for epoch in range(epochs)))
    return [record for records in per_epoch for record in records]


async def _judge_epoch(
    pair: Pair, runtime: Runtime, orders: tuple[int, ...], tick: Callable[[int], None], epoch: int
) -> list[JudgmentRecord]:
    caller = runtime.caller
    with epoch_of(epoch):  # the judge's calls, and the tasks they start, inherit the epoch
        outcomes = await runtime.judge.judge(pair, orders, caller)
    tick(len(outcomes))
    return [
        _record(pair, order, outcome, caller.model, epoch) for order, outcome in zip(orders, outcomes, strict=False)
    ]


def with_prompts(pairs: list[Pair], records: list[JudgmentRecord], judge: Judge) -> list[JudgmentRecord]:
    """Fill in each record's prompt (the last user message of its first turn), rendered again from the
    pair: deterministic, cheaper than carrying ~10 KB per judgment through Prefect's results. A judge
    without a first turn keeps the prompt its outcome gave (none, or a reward model's question)."""
    first_turn = judge.first_turn
    if first_turn is None:
        return records
    by_id = {pair.pair_id: pair for pair in pairs}
    filled = []
    for record in records:
        pair = by_id[record.pair_id]
        a, b = (pair.response_A, pair.response_B) if record.order == 0 else (pair.response_B, pair.response_A)
        messages = first_turn(pair.question, a, b)
        prompt = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
        filled.append(record.model_copy(update={"prompt": prompt}))
    return filled


def first_turns(pairs: Iterable[Pair], judge: Judge, orders: tuple[int, ...]) -> Iterator[list[dict[str, str]]]:
    """The first-turn messages of every judgment of these pairs, in the order the flow judges them (none
    for a judge without first turns)."""
    first_turn = judge.first_turn
    if first_turn is None:
        return
    for pair in pairs:
        for order in orders:
            a, b = (pair.response_A, pair.response_B) if order == 0 else (pair.response_B, pair.response_A)
            yield first_turn(pair.question, a, b)


def request_keys(pairs: list[Pair], runtime: Runtime, orders: tuple[int, ...], epochs: int = 1) -> Iterator[str]:
    """The cache keys of every first-turn request in these pairs and epochs, for one prefetch query
    (computed only as the prefetch reads them: not at all when the cache is not read)."""
    key, sampling = runtime.caller.key, runtime.judge.sampling
    for epoch in range(epochs):
        for messages in first_turns(pairs, runtime.judge, orders):
            with epoch_of(epoch):
                keyed = key(messages, sampling)
            yield keyed


def expect_first_round(spec: JudgeSpec, run: RunContext, shards: int) -> None:
    """--batch: these `shards` start at once in this event loop, each to declare its first lines
    (`declare_first_round`) before posting them."""
    if spec.endpoint.batch and shards <= BATCH_SHARDS_IN_FLIGHT:
        first = runtime_for(spec, run).caller.first_round
        if first is not None:
            first.expect(shards)


def declare_first_round(pairs: list[Pair], runtime: Runtime, orders: tuple[int, ...], epochs: int = 1) -> None:
    """--batch: the batch lines these pairs' first turns will post (those the prefetched cache does not
    answer), declared to the run's first round, so its batch goes once they are in (`calls.batch_round`)."""
    first = runtime.caller.first_round
    if first is None or not first.open or runtime.judge.first_turn is None:
        return  # a judge whose first turns are not known ahead leaves the round to the gather window
    caller, sampling = runtime.caller, runtime.judge.sampling

    def lines() -> Iterator[str]:
        for epoch in range(epochs):
            for messages in first_turns(pairs, runtime.judge, orders):
                with epoch_of(epoch):
                    line = caller.line_to_post(messages, sampling)
                if line is not None:
                    yield line

    first.declare(lines())


async def claim_early(early: EarlyJudgment) -> list[JudgmentRecord]:
    """A pair judged ahead of its shard (`head_start`): its records, with what its calls heard counted in
    the shard's own (`calls.heard`), as if the shard had judged it."""
    records = await early.task
    shard = heard_here.get()
    if shard is not None:
        shard.served.update(early.heard.served)
        shard.cache_sources.update(early.heard.cache_sources)
    return records


async def judge_pairs(
    pairs: list[Pair],
    runtime: Runtime,
    orders: tuple[int, ...] = (0, 1),
    shard_index: int | None = None,
    progress: Sequence[ProgressHook] = (),
    epochs: int = 1,
) -> list[JudgmentRecord]:
    """The records of these pairs, every epoch of a pair together (the metric scores a pair whole);
    `progress`: the run's hooks, told of each judgment of shard `shard_index`."""
    early = {pair.pair_id: runtime.early.pop(pair.pair_id) for pair in pairs if pair.pair_id in runtime.early}
    todo = [pair for pair in pairs if pair.pair_id not in early]
    await runtime.caller.prefetch(request_keys(todo, runtime, orders, epochs))
    declare_first_round(todo, runtime, orders, epochs)
    tick = _no_progress
    if shard_index is not None and progress:
        planned = len(pairs) * len(orders) * epochs

        def tick(judgments: int) -> None:
            for hook in progress:
                hook(shard_index, judgments, planned)

    async def judged(pair: Pair) -> list[JudgmentRecord]:
        if pair.pair_id not in early:
            return await judge_pair(pair, runtime, orders, tick, epochs)
        records = await claim_early(early[pair.pair_id])  # judged while Prefect started, by `judge_pair`
        tick(len(records))
        return records

    # Every pair ends before an error ends the shard: the answers of calls in flight when the run stops
    # (its budget spent, its first calls all rejected) are paid for, so they reach the call cache too.
    per_pair = await asyncio.gather(*(judged(pair) for pair in pairs), return_exceptions=True)
    await runtime.caller.flush()  # a shard counts as done only once its answers are in the cache
    for outcome in per_pair:
        if isinstance(outcome, BaseException):
            raise outcome
    return [record for records in per_pair if not isinstance(records, BaseException) for record in records]


def make_shards(index: PairIndex, shard_size: int, shuffle_seed: int | None = None) -> list[Shard]:
    """Deterministic shards: consecutive runs of `shard_size` pairs in file order."""
    return [
        Shard(index=i, path=index.path, offsets=index.offsets[start : start + shard_size], shuffle_seed=shuffle_seed)
        for i, start in enumerate(range(0, len(index.offsets), shard_size))
    ]


# --batch: shards judged at once (all of a run's, in practice), so each round of calls is one batch.
BATCH_SHARDS_IN_FLIGHT = 100_000


def shards_in_flight(config: RunConfig) -> int:
    """Enough shards at once to keep every connection busy (twice the calls the limit allows), and no
    more: memory then holds a few shards, not the whole dataset."""
    if config.endpoint.batch:  # --batch: every shard at once, so a round of calls is one batch
        return BATCH_SHARDS_IN_FLIGHT
    calls_per_shard = config.shard_size * (1 if config.single_game else 2)
    return max(2, math.ceil(2 * config.endpoint.concurrency / calls_per_shard))


def _endpoint_url(config: RunConfig) -> str | None:
    """The URL calls go to (resolved from the environment if not given); None for a judge without one."""
    url = config.resolved_base_url()
    return None if url == "local:" else url


def judge_spec(config: RunConfig, templates_dir: str | None, calls: RunCalls | None = None) -> JudgeSpec:
    """The run's spec, its judge's fingerprint in it; the run's `calls` keep the judge built for it, and
    may hold the global limits to take slots from (a pool's cell: its endpoint's)."""
    calls = calls or RunCalls()
    spec = JudgeSpec(
        judge_type=config.judge_type,
        judge_template=config.judge_template,
        templates_dir=templates_dir,
        model=config.model,
        endpoint=config.endpoint.model_copy(update={"base_url": _endpoint_url(config)}),
        sampling_overrides=config.sampling_overrides(),
        orders=(0,) if config.single_game else (0, 1),
        epochs=config.epochs,
        db_url=config.db_url,
        external_judge_path=config.external_judge_path,
        external_judge_function=config.external_judge_function,
        external_judge_config=config.external_judge_config,
        reward_backend=config.reward_backend,
        price=price_for(config.priced_model_name, config.prices, batch_of(config), config.resolved_base_url())
        if config.needs_endpoint
        else None,
        max_cost=config.max_cost,
        journal_dir=str(journal_dir(config.cache_dir, config.db_url)) if config.endpoint.cache != "off" else None,
    )
    if config.uses_global_limit:
        concurrency_limit, rate_limit = calls.held_limits or limit_names(spec.base_url, spec.model)
        spec = spec.model_copy(
            update={"global_limit": concurrency_limit, "global_rate_limit": rate_limit if config.endpoint.rpm else None}
        )
    judge = judge_of(spec, calls)
    if refused := unserved(spec.endpoint.provider_name, judge.api, spec.endpoint.batch):
        option, why = refused
        raise UserError(f"{option}: the {config.judge_type} judge needs the {judge.api} API, {why}")
    return spec.model_copy(update={"judge_fingerprint": judge.fingerprint()})


def shard_cache_key_of(spec: JudgeSpec, shard: Shard) -> str:
    """The key of a shard's result in Prefect's cache: the judge as configured and the shard's pairs, and
    for a run that reuses only its own flow run's answers, that flow run (another night's shards never)."""
    key = f"judgebench-shard-{spec.cache_identity()[:32]}-{shard.content_hash()[:32]}"
    return key if spec.cache_scope is None else f"{key}-{spec.cache_scope}"

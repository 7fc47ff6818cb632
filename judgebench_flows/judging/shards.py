"""Judge pairs and shards of pairs: both orders at once, records out. No Prefect here.

A `JudgeSpec` is everything a worker needs to rebuild the judge and its endpoint caller, and nothing
secret, so it can travel to a Dask worker as a task parameter. `runtime_for` builds the judge and the
caller once per process and event loop, so all shards in a process share one connection limit and one
client.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from judgebench_flows.data import db
from judgebench_flows.core.api_keys import read_api_key
from judgebench_flows.core.config import RunConfig
from judgebench_flows.calls.global_limits import limit_names
from judgebench_flows.core.credentials import resolve as resolve_credentials
from judgebench_flows.calls.llm import CallStats, CacheMode, ChatCaller, RetryPolicy
from judgebench_flows.calls.request_rules import RequestRule, request_report, rule_for
from judgebench_flows.data.loading import PairIndex, read_pairs_at, shuffle_responses
from judgebench_flows.core.records import JudgmentRecord, Pair, flip
from judgebench_flows.judges import CustomJudge, PromptJudge, RewardJudge, get_judge
from judgebench_flows.judges.procedure import Outcome, is_final_verdict, judge_one_order

if TYPE_CHECKING:  # imported for real only by a run that uses it: it loads pandas
    from judgebench_flows.judges.external.pairwise import ExternalPairwiseJudge

ProgressHook = Callable[[int, int, int], None]
"""(shard index, judgments just done, judgments the shard plans): counted once per judgment of a shard,
however often the shard is retried; `settle_progress` then sets a finished shard's exact count."""
_progress_hooks: list[ProgressHook] = []
SettleHook = Callable[[int, int], None]
_settle_hooks: list[SettleHook] = []


def add_progress_hook(hook: ProgressHook, settle: SettleHook | None = None) -> None:
    _progress_hooks.append(hook)
    if settle is not None:
        _settle_hooks.append(settle)


def settle_progress(shard_index: int, judgments: int) -> None:
    """A shard is finished with this many judgments (judged here, on a Dask worker, or from Prefect's
    cache, where no judgment ticked): the progress bar counts exactly these for it."""
    for hook in _settle_hooks:
        hook(shard_index, judgments)


TotalHook = Callable[[int], None]
_total_hooks: list[TotalHook] = []


def add_total_hook(hook: TotalHook) -> None:
    """Called once with the number of judgments a run will make (known only after the data is read)."""
    _total_hooks.append(hook)


def announce_total(judgments: int) -> None:
    for hook in _total_hooks:
        hook(judgments)


def clear_progress_hooks() -> None:
    _progress_hooks.clear()
    _settle_hooks.clear()
    _total_hooks.clear()


class JudgeSpec(BaseModel):
    judge_type: str
    judge_template: str | None = None
    templates_dir: str | None = None
    model: str
    base_url: str
    # Where this endpoint's key is read (names only: a spec travels to Dask workers and into Prefect).
    api_key_env: str | None = None
    api_key_secret: str | None = None
    sampling_overrides: dict[str, Any] = {}
    orders: tuple[int, ...] = (0, 1)
    concurrency: int = 16
    rpm: float | None = None
    request_timeout: float = 120.0
    max_retries: int = 6
    retry_initial_wait: float = 1.0
    retry_max_wait: float = 60.0
    db_url: str | None = None
    cache: CacheMode = "use"
    external_judge_path: str | None = None
    external_judge_function: str = "evaluate"
    external_judge_config: dict[str, Any] = {}
    # Names of the Prefect global limits shared by all workers (see global_limits); None: in-process only.
    global_limit: str | None = None
    global_rate_limit: str | None = None
    adaptive_concurrency: bool = False
    reward_backend: str = "pooling"
    # How requests are shaped for the model (request_rules): a forced style and parameters never sent.
    request_style: str = "auto"
    drop_params: tuple[str, ...] = ()
    # Filled by the flow from the built judge: changes whenever prompts, sampling or parser source change.
    judge_fingerprint: str = ""

    def cache_identity(self) -> str:
        parts = [self.judge_fingerprint, self.model, self.base_url, repr(sorted(self.sampling_overrides.items())), repr(self.orders)]
        if self.request_style != "auto" or self.drop_params:  # only then: earlier shard keys stay valid
            parts.append(repr((self.request_style, sorted(self.drop_params))))
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()


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


def build_judge(spec: JudgeSpec) -> PromptJudge | CustomJudge | ExternalPairwiseJudge:
    judge = get_judge(
        spec.judge_type, spec.templates_dir, spec.judge_template,
        spec.external_judge_path, spec.external_judge_function, spec.external_judge_config, model=spec.model,
    )
    if spec.sampling_overrides:
        sampling = {**judge.sampling, **spec.sampling_overrides}
        if isinstance(judge, PromptJudge):
            judge = dataclasses.replace(judge, sampling=sampling)
        elif isinstance(judge, CustomJudge):
            judge.sampling = sampling
    if isinstance(judge, RewardJudge) and spec.reward_backend != "pooling":
        judge = judge.local(spec.model)
    return judge


@dataclasses.dataclass
class Runtime:
    judge: PromptJudge | CustomJudge | ExternalPairwiseJudge
    caller: ChatCaller


# Per event loop (an AsyncOpenAI client and a semaphore belong to the loop that made them), per spec.
_runtimes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Runtime]] = weakref.WeakKeyDictionary()


def runtime_for(spec: JudgeSpec) -> Runtime:
    """The judge and caller for this spec in the running event loop (created on first use)."""
    per_loop = _runtimes.setdefault(asyncio.get_running_loop(), {})
    key = spec.model_dump_json()
    runtime = per_loop.get(key)
    if runtime is None:
        caller = ChatCaller(
            base_url=resolve_credentials(spec.base_url),  # the spec carries the URL without user:password@
            model=spec.model,
            api_key=read_api_key(spec.api_key_env, spec.api_key_secret),
            concurrency=spec.concurrency,
            request_timeout=spec.request_timeout,
            retry=RetryPolicy(spec.max_retries, spec.retry_initial_wait, spec.retry_max_wait),
            rpm=spec.rpm,
            engine=db.open_database(spec.db_url) if spec.db_url and spec.cache != "off" else None,
            cache_mode=spec.cache,
            global_limit=spec.global_limit,
            global_rate_limit=spec.global_rate_limit,
            adaptive=spec.adaptive_concurrency,
            request_rule=request_rule_of(spec),
        )
        runtime = Runtime(build_judge(spec), caller)
        caller.api = getattr(runtime.judge, "api", "chat")  # judge_lm/panda_lm: completions; reward_model: pooling
        per_loop[key] = runtime
    return runtime


def request_rule_of(spec: JudgeSpec) -> RequestRule:
    return rule_for(spec.model, spec.request_style, spec.drop_params)


def request_report_of(spec: JudgeSpec) -> dict[str, Any]:
    """The request rule this run applied and what it adjusted on the way (for results.json's `run`)."""
    return request_report(resolve_credentials(spec.base_url), spec.model, request_rule_of(spec))  # as the caller keys it


async def close_runtimes() -> CallStats:
    """Close this loop's endpoint clients (their connections belong to the loop that is about to end);
    returns what they sent, summed: calls made ahead of the flow included (see `usage_of_calls`)."""
    total = CallStats()
    for runtime in _runtimes.pop(asyncio.get_running_loop(), {}).values():
        await runtime.caller.aclose()
        for name in ("calls", "answered", "attempts", "retries", "cache_hits", "failed"):
            setattr(total, name, getattr(total, name) + getattr(runtime.caller.stats, name))
    return total


def _record(pair: Pair, order: int, outcome: Outcome, model: str) -> JudgmentRecord:
    return JudgmentRecord(
        pair_id=pair.pair_id,
        order=order,  # type: ignore[arg-type]
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
        calls=len(outcome.completions) + (1 if outcome.status == "failed" else 0),
        cached_calls=sum(1 for c in outcome.completions if c.cached),
        prompt_tokens=sum(c.prompt_tokens for c in outcome.completions),
        completion_tokens=sum(c.completion_tokens for c in outcome.completions),
        reasoning_tokens=sum(c.reasoning_tokens for c in outcome.completions),
    )


def _decides_locally(judge: object) -> bool:
    """An external pairwise judge: decides in this process, no endpoint call."""
    return getattr(judge, "local", False)


def _decide_locally(judge: ExternalPairwiseJudge, pair: Pair, a: str, b: str) -> Outcome:
    started = time.perf_counter()
    text, decision, error = judge.decide(pair.model_dump(), a, b)
    status = "ok" if decision else "invalid"
    return Outcome(status, decision, "", text, error or (None if decision else "no decision"), [], time.perf_counter() - started)


def _no_progress(judgments: int) -> None:
    pass


async def judge_pair(pair: Pair, runtime: Runtime, orders: tuple[int, ...] = (0, 1),
                     tick: Callable[[int], None] = _no_progress) -> list[JudgmentRecord]:
    """Both orders concurrently; only judgments that reached a verdict are remembered in the cache."""
    judge, caller = runtime.judge, runtime.caller
    if getattr(judge, "scores_alone", False):  # a reward model: both orders from the same two scores
        return await _judge_by_scores(pair, runtime, orders, tick)

    async def one(order: int) -> JudgmentRecord:
        a, b = (pair.response_A, pair.response_B) if order == 0 else (pair.response_B, pair.response_A)
        if _decides_locally(judge):
            outcome = _decide_locally(judge, pair, a, b)
        else:
            outcome = await judge_one_order(judge, pair.question, a, b, caller.complete)
            if outcome.status == "ok":
                await caller.remember(outcome.completions)
        tick(1)
        return _record(pair, order, outcome, caller.model)

    return list(await asyncio.gather(*(one(order) for order in orders)))


async def _judge_by_scores(pair: Pair, runtime: Runtime, orders: tuple[int, ...], tick: Callable[[int], None]) -> list[JudgmentRecord]:
    """Each response scored once, every order decided from those scores (judges.reward); the scoring
    answers are cached only when the pair was decided."""
    from judgebench_flows.judges.reward import judge_by_scores

    results = await judge_by_scores(runtime.judge, pair.question, pair.response_A, pair.response_B, orders, runtime.caller.complete)  # type: ignore[arg-type]
    if all(outcome.status == "ok" for outcome, _ in results):
        await runtime.caller.remember([c for outcome, _ in results for c in outcome.completions])
    tick(len(results))
    return [_record(pair, order, outcome, runtime.caller.model).model_copy(update={"scores": scores})
            for order, (outcome, scores) in zip(orders, results)]


def with_prompts(pairs: list[Pair], records: list[JudgmentRecord], judge) -> list[JudgmentRecord]:
    """Fill in each record's prompt (the last user message of its first turn), rendered again from the
    pair: deterministic, cheaper than carrying ~10 KB per judgment through Prefect's results."""
    if _decides_locally(judge):
        return records
    by_id = {pair.pair_id: pair for pair in pairs}
    filled = []
    for record in records:
        pair = by_id[record.pair_id]
        a, b = (pair.response_A, pair.response_B) if record.order == 0 else (pair.response_B, pair.response_A)
        messages = judge.format(pair.question, a, b)
        prompt = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
        filled.append(record.model_copy(update={"prompt": prompt}))
    return filled


def first_turns(pairs: Iterable[Pair], judge, orders: tuple[int, ...]) -> Iterator[list[dict[str, str]]]:
    """The first-turn messages of every judgment of these pairs, in the order the flow judges them."""
    for pair in pairs:
        for order in orders:
            a, b = (pair.response_A, pair.response_B) if order == 0 else (pair.response_B, pair.response_A)
            yield judge.format(pair.question, a, b)


def request_keys(pairs: list[Pair], runtime: Runtime, orders: tuple[int, ...]) -> list[str]:
    """The cache keys of every first-turn request in these pairs, for one prefetch query."""
    if _decides_locally(runtime.judge):
        return []
    return [runtime.caller.key(messages, runtime.judge.sampling) for messages in first_turns(pairs, runtime.judge, orders)]


async def call_ahead(spec: JudgeSpec, shards: Iterable[Shard], max_calls: int) -> int:
    """Start the first calls of these shards now, in this event loop, before the flow's tasks ask for them
    (`ChatCaller.call_ahead`). Judges that make no endpoint calls have nothing to start."""
    runtime = runtime_for(spec)
    judge = runtime.judge
    if _decides_locally(judge):
        return 0
    requests = (messages for shard in shards for messages in first_turns(shard.load(), judge, spec.orders))
    return await runtime.caller.call_ahead(requests, judge.sampling, max_calls, keep=lambda text: is_final_verdict(judge, text))


async def judge_pairs(pairs: list[Pair], runtime: Runtime, orders: tuple[int, ...] = (0, 1),
                      shard_index: int | None = None) -> list[JudgmentRecord]:
    await runtime.caller.prefetch(request_keys(pairs, runtime, orders))
    tick = _no_progress
    if shard_index is not None and _progress_hooks:
        planned = len(pairs) * len(orders)

        def tick(judgments: int) -> None:
            for hook in _progress_hooks:
                hook(shard_index, judgments, planned)

    per_pair = await asyncio.gather(*(judge_pair(pair, runtime, orders, tick) for pair in pairs))
    await runtime.caller.flush()  # a shard counts as done only once its answers are in the cache
    return [record for records in per_pair for record in records]


def make_shards(index: PairIndex, shard_size: int, shuffle_seed: int | None = None) -> list[Shard]:
    """Deterministic shards: consecutive runs of `shard_size` pairs in file order."""
    return [
        Shard(index=i, path=index.path, offsets=index.offsets[start : start + shard_size], shuffle_seed=shuffle_seed)
        for i, start in enumerate(range(0, len(index.offsets), shard_size))
    ]


def judge_spec(config: RunConfig, templates_dir: str | None) -> JudgeSpec:
    spec = JudgeSpec(
        judge_type=config.judge_type,
        judge_template=config.judge_template,
        templates_dir=templates_dir,
        model=config.model,
        base_url=config.resolved_base_url(),
        api_key_env=config.api_key_env,
        api_key_secret=config.api_key_secret,
        sampling_overrides=config.sampling_overrides(),
        orders=(0,) if config.single_game else (0, 1),
        concurrency=config.concurrency,
        rpm=config.rpm,
        request_timeout=config.request_timeout,
        max_retries=config.max_retries,
        retry_initial_wait=config.retry_initial_wait,
        retry_max_wait=config.retry_max_wait,
        db_url=config.db_url,
        cache=config.cache,
        external_judge_path=config.external_judge_path,
        external_judge_function=config.external_judge_function,
        external_judge_config=config.external_judge_config,
        adaptive_concurrency=config.adaptive_concurrency,
        reward_backend=config.reward_backend,
        request_style=config.request_style,
        drop_params=tuple(config.drop_params),
    )
    if config.uses_global_limit:
        concurrency_limit, rate_limit = limit_names(spec.base_url, spec.model)
        spec = spec.model_copy(update={"global_limit": concurrency_limit, "global_rate_limit": rate_limit if config.rpm else None})
    return spec.model_copy(update={"judge_fingerprint": build_judge(spec).fingerprint()})


def shard_cache_key_of(spec: JudgeSpec, shard: Shard) -> str:
    """The key of a shard's result in Prefect's cache: the judge as configured and the shard's pairs."""
    return f"judgebench-shard-{spec.cache_identity()[:32]}-{shard.content_hash()[:32]}"

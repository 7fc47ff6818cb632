"""`ChatCaller`: the one object through which a run talks to its endpoint.

It composes the layers a call goes through, outermost first: the call cache (`cache`), the model's
request rule and its 400 adjustments (`request_rules`), the
retry policy (`retry`), the limits (`limits`) and the wire (`transport`). Everything about "nothing lost,
nothing paid twice" that concerns a single call is decided here; counting too (`CallStats`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NoReturn

from pydantic import JsonValue
from sqlalchemy.engine import Engine

from judgebench_flows.calls.batch import BatchTransport
from judgebench_flows.calls.batch_round import FirstRound
from judgebench_flows.calls.budget import AttemptLedger, not_sent_again
from judgebench_flows.calls.cache import CallCache, request_key
from judgebench_flows.calls.errors import CallError
from judgebench_flows.calls.heard import heard_here
from judgebench_flows.calls.limits import CallLimits, endpoint_label
from judgebench_flows.calls.other_apis import RawScoreCheck
from judgebench_flows.calls.providers import model_api
from judgebench_flows.calls.request_rules import STANDARD, Adjustment, RequestRule, not_sent, shape
from judgebench_flows.calls.retry import RetryPolicy
from judgebench_flows.calls.state import CallState
from judgebench_flows.calls.transport import BadAnswerBody
from judgebench_flows.core.api_keys import describe as describe_key_source
from judgebench_flows.core.completion import CallFailed, Completion, Sampling
from judgebench_flows.core.endpoint import EndpointSettings
from judgebench_flows.core.errors import EndpointUnreachable, RunFailed
from judgebench_flows.core.identity import call_endpoint
from judgebench_flows.core.pricing import Spend
from judgebench_flows.core.secrets import redact
from judgebench_flows.data.db import ANY_RUN, CacheReuse
from judgebench_flows.data.journal import AnswerJournal

# Early stop: when this many first calls of a run all fail alike and cannot be retried, stop the run.
EARLY_STOP_CALLS = 20
# A request as one attempt sent it: the rule it was shaped by, its messages and its parameters.
Shaped = tuple[RequestRule, list[dict[str, str]], Sampling]
# Adjustments one call may go through after 400s naming an unsupported parameter (one per parameter).
MAX_ADJUSTMENTS_PER_CALL = 8
# Calls that may wait for their batch at once (--batch): a whole run's round.
BATCH_IN_FLIGHT = 1_000_000
# How long the endpoint's model listing (`ModelAPI.model_entry`, asked once per run) may take.
MODEL_ENTRY_SECONDS = 10.0


@dataclass
class CallStats:
    """Calls this process sent (a cache hit sends nothing): `answered` ones are the paid calls, each of
    the `attempts` that got no answer (5xx, 429, timeout, bad body, rejected) is an error."""

    calls: int = 0
    answered: int = 0
    attempts: int = 0
    retries: int = 0
    cache_hits: int = 0
    failed: int = 0
    # Tokens of the answered calls (the paid ones): what the run's dollars are computed from.
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # Of those, a batch run's answers sent synchronously (deadline passed, batches expired), whose tokens
    # are paid at the synchronous price.
    synchronous: int = 0
    synchronous_prompt_tokens: int = 0
    synchronous_completion_tokens: int = 0
    # Answers read from the call cache, by the run that paid them ("": none recorded).
    cache_sources: Counter[str] = field(default_factory=Counter)
    # What the endpoint said about the model that answered: (model answered as, system_fingerprint) ->
    # answers ("" where unsaid), and its `/models` entry (`ModelAPI.model_entry`), asked once.
    served: Counter[tuple[str, str]] = field(default_factory=Counter)
    model_entry: dict[str, JsonValue] | None = None

    def add(self, other: CallStats) -> None:
        """Count `other`'s calls with these (a run's callers, summed); the first model entry stands."""
        for name in (f.name for f in dataclasses.fields(self)):
            mine, theirs = getattr(self, name), getattr(other, name)
            if name == "served":
                mine.update(theirs)
            elif name == "model_entry":
                self.model_entry = mine or theirs
            else:
                setattr(self, name, mine + theirs)


@dataclass
class ChatCaller:
    """The one object through which a run talks to its endpoint (create inside the running event loop).

    Configured from the run's endpoint settings, whole (`settings`: limits, retries, cache mode, provider,
    batching), plus what the run adds: the model, its key, the cache's engine, the global rate limit's
    name, the model's request rule, the spend, and the run's `CallState` (what its callers share)."""

    settings: EndpointSettings
    model: str
    api_key: str
    engine: Engine | None = None
    global_rate_limit: str | None = None
    # What requests this model accepts (request_rules); 400s naming a parameter refine it for the run.
    request_rule: RequestRule = STANDARD
    # The endpoint API the judge needs ("chat", or "completions", "pooling", "transformers"): with the
    # provider, it picks the wire once (`providers.model_api`).
    api: str = "chat"
    # The run's spend against its --max-cost (core.pricing); None for an unpriced model without a budget.
    spend: Spend | None = None
    # The run these calls are for, noted with each cached answer (its cost counts lost attempts' answers).
    paid_by: str | None = None
    # Which cached answers the run may read: a night's own flow run's only, or any run's; how old (`CacheReuse`).
    reuse: CacheReuse = ANY_RUN
    # What the run's callers share: learned request rules, rejections, limits per endpoint, tokens.
    state: CallState = field(default_factory=CallState)
    early_stop_calls: int = EARLY_STOP_CALLS
    stats: CallStats = field(default_factory=CallStats)
    # Where answers the database refused are kept until it takes them (`data.journal`); None: memory only.
    journal: AnswerJournal | None = None

    def __post_init__(self) -> None:
        settings = self.settings
        self.base_url = settings.base_url or "local:"
        self.provider = settings.provider_name
        # The endpoint's liveness (`_attempt_failed`): when it last replied at all, and whether an attempt
        # since then failed otherwise than by not connecting (a timeout: the endpoint may be busy, not gone).
        self._last_reply, self._not_only_refused = time.monotonic(), False
        self._unreachable: str | None = None
        self._wake = asyncio.Event()  # set once unreachable: calls waiting to retry stop waiting
        self.retry = RetryPolicy(
            settings.max_retries, settings.retry_initial_wait, settings.retry_max_wait, wake=self._wake
        )
        # Where the key came from (`api_keys.describe`), for the message when the endpoint rejects it.
        self.key_source = describe_key_source(settings.api_key_env, settings.api_key_secret, settings.provider)
        batch = settings.batch  # every call through the provider's batch API (`batch`)
        self.transport = model_api(
            self.provider,
            self.base_url,
            self.model,
            self.api_key,
            settings.request_timeout,
            1 if batch else settings.concurrency,
            settings.batch_poll_seconds if batch else None,
            self.engine,
            api=self.api,
            state=self.state,
            settings=settings,
        )
        if batch:  # a batch holds every request of a round: no in-process limit, no pacing
            self.transport.sync_concurrency = settings.concurrency  # type: ignore[attr-defined]
            if settings.batch_deadline:  # when open batches are cancelled and the rest is judged synchronously
                deadline = datetime.fromisoformat(settings.batch_deadline).timestamp()
                self.transport.deadline = deadline  # type: ignore[attr-defined]
            self.limits = CallLimits(BATCH_IN_FLIGHT, settings.request_timeout, None, False, self.global_rate_limit)
        else:  # one limit per endpoint for every caller of it in the run and event loop
            self.limits = self.state.shared_limits(
                endpoint_label(self.provider, self.base_url),
                settings.concurrency,
                settings.request_timeout,
                settings.rpm,
                settings.adaptive_concurrency,
                self.global_rate_limit,
            )
        self.cache = CallCache(
            self.engine,
            settings.cache,
            self.model,
            self.paid_by,
            self.transport.answers_scores,
            self.journal,
            reuse=self.reuse,
            sources=self.stats.cache_sources,
        )
        self._learned = self.state.learned_for(self.base_url, self.model, self.request_rule)
        # One retry budget per request for the run; deterministic rejections for the run's state (`budget`).
        self._ledger = AttemptLedger(rejected=self.state.rejections_for(self.base_url, self.model))
        self._raw_scores = RawScoreCheck()  # a Pooling API's scores are raw, not activated (`other_apis`)
        # Early stop: outcomes of the run's first calls, while every one failed alike (None: not anymore).
        self._first_failures: tuple[str, int] | None = ("", 0)
        self._stopped: str | None = None
        self._asking_entry: asyncio.Task[None] | None = None  # the model's `/models` entry, asked once

    @property
    def adjustments(self) -> list[Adjustment]:
        return list(self._learned.adjustments)

    def key(self, messages: Sequence[dict[str, str]], sampling: Sampling) -> str:
        """The cache key of the request actually sent for these messages and sampling (after the rules)."""
        return self._key_under(self._learned.rule, messages, sampling)

    def _key_under(self, rule: RequestRule, messages: Sequence[dict[str, str]], sampling: Sampling) -> str:
        sent_messages, params = shape(rule, list(messages), sampling)
        return request_key(call_endpoint(self.base_url, self.provider, self.api), self.model, sent_messages, params)

    async def prefetch(self, keys: Iterable[str]) -> None:
        """Load many cached answers in one query (a shard's worth), so lookups cost no round trip each."""
        await self.cache.prefetch(keys)

    @property
    def first_round(self) -> FirstRound | None:
        """--batch: the lines the run's shards will post first (`calls.batch_round`); None otherwise."""
        return self.transport.round if isinstance(self.transport, BatchTransport) else None

    def line_to_post(self, messages: list[dict[str, str]], sampling: Sampling) -> str | None:
        """--batch: the batch line this request will be, or None when the call cache answers it (after the
        shard's prefetch): shaped by the rule in force, as `_post` will shape it."""
        assert isinstance(self.transport, BatchTransport)
        rule = self._learned.rule
        if self.cache.answered(self._key_under(rule, messages, sampling)):
            return None
        return self.transport.line_id(*shape(rule, messages, sampling))

    async def complete(self, messages: list[dict[str, str]], sampling: Sampling) -> Completion:
        rule = self._learned.rule
        key = self._key_under(rule, messages, sampling)
        # An answer this run received is never asked for again, even with --refresh-cache.
        hit = await self.cache.lookup(key) if self.cache.reads else self.cache.received(key)
        if hit is not None:
            self.stats.cache_hits += 1
            return hit
        return await self._call(messages, sampling, key, rule)  # keyed by the request it finally sent

    async def remember(self, completions: list[Completion]) -> None:
        """Persist answered calls of a judgment that produced a verdict (never failures or invalid ones)."""
        self.cache.save([c for c in completions if not c.cached and c.key])

    async def flush(self) -> None:
        """Wait until every remembered answer is in the database (a failed write raises here)."""
        await self.cache.flush()

    async def _call(
        self,
        messages: list[dict[str, str]],
        sampling: Sampling,
        key: str | None = None,
        keyed_rule: RequestRule | None = None,
    ) -> Completion:
        """One call; a Pooling API's calls one at a time until its scores are shown raw (`RawScoreCheck`:
        the call holding the turn is the probe), so a server that ignores `use_activation` is stopped
        after the probe's requests, before any score is used."""
        probing = self.transport.checks_raw_scores and await self._raw_scores.admit(sampling)
        try:
            return await self._call_adjusted(messages, sampling, key, keyed_rule)
        finally:
            if probing:
                self._raw_scores.done()

    async def _call_adjusted(
        self,
        messages: list[dict[str, str]],
        sampling: Sampling,
        key: str | None = None,
        keyed_rule: RequestRule | None = None,
    ) -> Completion:
        """One call, shaped by the model's rule when it holds its slot; a 400 naming an unsupported
        parameter or value adjusts the rule for the run (`request_rules.Learned`) and the call is sent
        again in its new shape. `key` is the request's key under the rule in force when the caller
        computed it (saves hashing it again); it also names the call's retry budget (`budget`), which
        adjustments do not reset."""
        if self._stopped:
            raise RunFailed(self._stopped)
        if self._unreachable:
            raise EndpointUnreachable(self._unreachable)
        if self.spend is not None:
            self.spend.check()  # the budget is spent: no new call (the ones in flight still finish)
        self.stats.calls += 1
        budget_key = key or self._key_under(self._learned.rule, messages, sampling)
        made = 0  # requests this call sent, over its adjustments
        for _ in range(MAX_ADJUSTMENTS_PER_CALL):
            sent: list[Shaped] = []
            try:
                completion = await self._send(messages, sampling, sent, budget_key, made)
            except CallError as exc:
                if exc.status != 400:
                    self._call_failed(exc, {budget_key, *(self._sent_key(s) for s in sent[-1:])}, made + len(sent))
                made += len(sent)
                _, sent_messages, params = sent[-1]
                if self._learned.adjust(params, sent_messages, exc.error, exc.message):
                    continue
                self._call_failed(exc, {budget_key, self._sent_key(sent[-1])}, made)
            rule, sent_messages, params = sent[-1]
            self._answered(completion, budget_key)
            completion.key = key if key and rule is keyed_rule else self._sent_key(sent[-1])
            if self.transport.checks_raw_scores:
                await self._raw_scores.check(self.base_url, completion, params, self._probe(sent_messages))
            return completion
        raise CallFailed(f"the endpoint kept rejecting parameters after {MAX_ADJUSTMENTS_PER_CALL} adjustments")

    def _attempt_failed(self, exc: Exception) -> None:
        """Watch the endpoint's liveness: stop the run (`EndpointUnreachable`, exit 9) once it has not
        replied for `endpoint_lost_timeout` seconds and every attempt since failed to connect (refused or
        cut): an endpoint that is gone, not one that is slow or overloaded, which still answers or times out."""
        if not isinstance(exc, CallError):
            return
        if exc.kind in ("status", "bad_answer"):  # an HTTP answer, even an error: the endpoint is there
            self._last_reply, self._not_only_refused = time.monotonic(), False
            return
        if exc.kind != "connection":
            self._not_only_refused = True
            return
        silent = time.monotonic() - self._last_reply
        if self._not_only_refused or silent < self.settings.endpoint_lost_timeout or self._unreachable:
            return
        self._unreachable = redact(
            f"the endpoint {self.base_url} is unreachable: no call answered for {silent:.0f} s and every attempt "
            f"since failed to connect (--endpoint-lost-timeout {self.settings.endpoint_lost_timeout:g}); the calls "
            "never answered are sent by the same command once it is back"
        )
        self._wake.set()
        raise EndpointUnreachable(self._unreachable) from None

    def _answered(self, completion: Completion, budget_key: str) -> None:
        """Count an answer: the endpoint works, its tokens are used and paid for."""
        self._last_reply, self._not_only_refused = time.monotonic(), False
        self._first_failures = None
        self.stats.answered += 1
        self.stats.prompt_tokens += completion.prompt_tokens
        self.stats.completion_tokens += completion.completion_tokens
        if completion.synchronous:
            self.stats.synchronous += 1
            self.stats.synchronous_prompt_tokens += completion.prompt_tokens
            self.stats.synchronous_completion_tokens += completion.completion_tokens
        if self.spend is not None:
            self.spend.charge(completion.prompt_tokens, completion.completion_tokens, completion.synchronous)
        self._ledger.answered(budget_key)
        said = (completion.served_model or "", completion.system_fingerprint or "")
        self.stats.served[said] += 1
        shard = heard_here.get()  # a shard task's own share (`calls.heard`)
        if shard is not None:
            shard.served[said] += 1
        if self._asking_entry is None:  # the endpoint answers: ask it once what it serves under this name
            self._asking_entry = asyncio.ensure_future(self._ask_model_entry())

    async def _ask_model_entry(self) -> None:
        """The endpoint's listing of the model (`ModelAPI.model_entry`), beside the judging: no call waits."""
        timeout = min(MODEL_ENTRY_SECONDS, self.settings.request_timeout)
        with contextlib.suppress(Exception):  # a listing is a courtesy: the run's answers stand without it
            self.stats.model_entry = await asyncio.wait_for(self.transport.model_entry(timeout), timeout)

    def _sent_key(self, shaped: Shaped) -> str:
        """The call-cache key of a request as an attempt sent it."""
        _, sent_messages, params = shaped
        return request_key(call_endpoint(self.base_url, self.provider, self.api), self.model, sent_messages, params)

    def _call_failed(self, exc: CallError, keys: set[str], made: int) -> NoReturn:
        """Raise this call's failure after `made` requests (the request's budget is spent under each of
        its `keys`: `budget`; a deterministic rejection is remembered beyond the run). The reason keeps the
        server's message whole (`CallError.describe`)."""
        can_retry = exc.retryable
        budget = self.retry.max_retries + 1
        kind = f"{exc.failure_kind()}" + (f" after {made} attempts" if can_retry else "")
        said = exc.server_message
        reason = kind + (f": {said}" if said else "")
        self._ledger.exhaust(keys, budget, (kind, reason, made), deterministic=not can_retry)
        self._failed(kind, reason, can_retry)

    def _failed(self, kind: str, reason: str, can_retry: bool) -> NoReturn:
        """Raise a call's failure; stop the run when its first calls all failed alike and for good.
        "Alike" compares failures without the server's words (`kind`), so messages that differ only in
        their numbers (a context length's token counts) are one cause."""
        self.stats.failed += 1
        seen = self._first_failures
        if seen is not None:
            if can_retry or (seen[1] and seen[0] != kind):
                self._first_failures = None
            else:
                self._first_failures = (kind, seen[1] + 1)
                if seen[1] + 1 >= self.early_stop_calls:
                    self._stopped = redact(
                        f"stopped early: the first {seen[1] + 1} calls to {self.model} at {self.base_url} were all "
                        f"rejected with {reason}"
                    )
                    raise RunFailed(self._stopped)
        raise CallFailed(reason)

    async def _send(
        self, messages: list[dict[str, str]], sampling: Sampling, sent: list[Shaped], key: str, made: int = 0
    ) -> Completion:
        """One request with its retries (429, 5xx, timeouts, drops, a 200 that is not JSON), within what is
        left of the request's budget (`budget`: a request asked again does not start over). Each attempt
        is shaped by the model's rule once it holds a slot (`_post`), so a call that waited behind one the
        endpoint rejected goes out as the rule learned from it; `sent` gets each attempt's shape."""
        api = self.api
        budget = self.retry.max_retries + 1
        left = self._ledger.left(key, budget)
        if left == 0:  # asked again (a shard task's retry, a cell's second attempt): the same failure, nothing sent
            failure = self._ledger.why(key)
            self._failed(failure[0], not_sent_again(failure), " after " in failure[0])
        try:
            async for attempt in self.retry.attempts(left):
                with attempt:
                    if attempt.retry_state.attempt_number > 1:
                        self.stats.retries += 1
                    self.stats.attempts += 1
                    try:
                        response = await self.limits.run(self._post, messages, sampling, sent)
                        if ignored := self.transport.ignored(sent[-1][2], response):
                            self._learned.note_ignored(*ignored)
                        return self.transport.answer(response)
                    except Exception as exc:
                        self._attempt_failed(exc)
                        if self.retry.retries(
                            exc
                        ):  # failed attempts only: identical calls in flight each get their own
                            self._ledger.spend(key)
                        raise
        except BadAnswerBody as exc:
            self.stats.failed += 1
            reason = f"{exc.describe()} after {made + len(sent)} attempts"
            self._ledger.exhaust({key}, budget, (reason, reason, made + len(sent)))
            raise CallFailed(reason) from None
        except CallError as exc:
            if exc.fatal:  # a refused key, an unknown model: no later call can succeed either
                raise exc.fatal_error(self.base_url, self.model, api, self.key_source) from None
            raise
        raise AssertionError("unreachable: the retry loop returns or raises")

    async def _post(self, messages: list[dict[str, str]], sampling: Sampling, sent: list[Shaped]) -> Any:
        """One attempt, once the call holds its slot: not sent when the run stopped early or spent its
        budget while the call queued, and shaped by the rule in force now."""
        if self._stopped:  # queued behind the calls that stopped the run: never sent
            raise RunFailed(self._stopped)
        if self._unreachable:
            raise EndpointUnreachable(self._unreachable)
        if self.spend is not None:
            self.spend.check()
        rule = self._learned.rule
        sent_messages, params = shape(rule, messages, sampling)
        for name in not_sent(sampling, params, rule):  # a judge's logit_bias a provider takes no part in
            self._learned.note_not_sent(name)
        sent.append((rule, sent_messages, params))
        return await self.transport.post(sent_messages, params)

    def _probe(self, messages: list[dict[str, str]]) -> Callable[[Sampling], Awaitable[Completion | None]]:
        """One request of these messages with other parameters, no retries or cache (`RawScoreCheck`);
        None when it got no answer."""

        async def send(params: Sampling) -> Completion | None:
            self.stats.attempts += 1
            try:
                response = await self.limits.run(self.transport.post, messages, params)
                return self.transport.answer(response)
            except CallError:  # a broken answer (`BadAnswerBody`) too
                return None

        return send

    async def aclose(self) -> None:
        try:
            if self._asking_entry is not None:  # done long before, or ends within its own bound
                with contextlib.suppress(Exception):
                    await self._asking_entry
            await self.cache.close()  # answers the database still refuses stay in the run's journal
        finally:
            await self.transport.aclose()

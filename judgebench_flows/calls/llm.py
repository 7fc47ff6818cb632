"""Calls to an OpenAI-compatible endpoint: one connection limit, retries, and the persistent call cache.

Everything about "nothing lost, nothing paid twice" that concerns a single call lives here:
- one `asyncio.Semaphore` per process bounds calls in flight across all shards (plus an optional
  requests-per-minute pacer); with `--adaptive-concurrency` that limit halves on a 429 and grows back
  slowly; on Dask a Prefect global concurrency limit (`global_limits`) also bounds every worker together;
- 429, 5xx, timeouts and dropped connections are retried with exponential backoff and jitter (tenacity),
  waiting at least what `Retry-After` asks; a bad key or unknown model stops the run; any other 4xx
  (e.g. context too long) fails that one judgment with its reason;
- answers are looked up in and written to the results database by a hash of the exact request, so a
  re-run or a resumed run pays only for what was never answered.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import itertools
import json
import math
import random
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
import openai
from sqlalchemy.engine import Engine
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from judgebench_flows.data import db
from judgebench_flows.core.errors import FatalEndpointError, RunFailed
from judgebench_flows.calls.global_limits import GlobalSlots, wait_for_rate
from judgebench_flows.calls.other_apis import OTHER_APIS, answer_of, endpoint_identity, other_api_post
from judgebench_flows.calls.request_rules import STANDARD, RequestRule, learned_for, shape
from judgebench_flows.core.secrets import redact
from judgebench_flows.core.completion import CallFailed, Completion

CacheMode = Literal["use", "off", "refresh"]
CONNECTIONS_PER_CLIENT = 8


def request_key(base_url: str, model: str, messages: Sequence[dict[str, str]], sampling: dict[str, Any]) -> str:
    """sha256 of everything that determines the answer: endpoint, model, messages and sampling."""
    payload = json.dumps(
        {"endpoint": base_url.rstrip("/"), "model": model, "messages": list(messages), "sampling": sampling},
        sort_keys=True,
        ensure_ascii=False,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


class BadAnswerBody(Exception):
    """A 200 whose body is not a JSON object: a broken answer, retried like a 5xx."""


# Early stop: when this many first calls of a run all fail alike and cannot be retried, stop the run.
EARLY_STOP_CALLS = 20
# Adjustments one call may go through after 400s naming an unsupported parameter (one per parameter).
MAX_ADJUSTMENTS_PER_CALL = 8


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, BadAnswerBody):
        return True
    if isinstance(exc, (openai.APITimeoutError, openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError)):
        return True
    return isinstance(exc, openai.APIStatusError) and exc.status_code in (408, 409, 425) or (
        isinstance(exc, openai.APIStatusError) and exc.status_code >= 500
    )


def _retry_after(exc: BaseException | None) -> float | None:
    response = getattr(exc, "response", None)
    if response is None:
        return None
    headers = response.headers
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value:
            try:
                return max(0.0, float(value) * scale)
            except ValueError:
                continue
    return None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, openai.APITimeoutError):
        return "request timed out"
    if isinstance(exc, openai.APIConnectionError):
        return "connection failed or dropped"
    if isinstance(exc, BadAnswerBody):
        return "the endpoint answered 200 with a body that is not a JSON object"
    if isinstance(exc, openai.APIStatusError):
        body = exc.body if isinstance(exc.body, dict) else {}
        error = body.get("error", body) if isinstance(body, dict) else {}
        detail = error.get("code") or error.get("message") if isinstance(error, dict) else None
        return redact(f"HTTP {exc.status_code}" + (f" ({detail})" if detail else ""))
    return redact(f"{type(exc).__name__}: {exc}")


def _completion_from(response: Any) -> Completion:
    """The answer text and token counts of a chat-completions response body.

    We post the body through the SDK's own `post` (auth, errors and connection handling stay the SDK's)
    and read the JSON ourselves: the SDK's request transform and response models cost about 1 ms of CPU
    per call, a third of our whole overhead, for nothing we use. A body without a message is an empty
    answer, which the judge's parser then reports as invalid.
    """
    if not isinstance(response, dict):
        raise BadAnswerBody()
    choices = response.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    # The answer only: a reasoning model's `reasoning_content` (vLLM, DeepSeek) is never the verdict.
    text = message.get("content") if isinstance(message.get("content"), str) else ""
    text = redact(text or "")  # an API key echoed back must not reach the cache, the database or a report
    usage = response.get("usage") or {}
    details = usage.get("completion_tokens_details") or {}
    return Completion(
        text or "", int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0),
        finish_reason=choice.get("finish_reason"),
        reasoning_tokens=int((details.get("reasoning_tokens") if isinstance(details, dict) else 0) or 0),
    )


def _error_of(exc: openai.APIStatusError) -> dict[str, Any]:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error", body) if isinstance(body, dict) else {}
    return error if isinstance(error, dict) else {}


@dataclass
class RetryPolicy:
    max_retries: int = 6
    initial_wait: float = 1.0
    max_wait: float = 60.0

    def wait(self, state: RetryCallState) -> float:
        """Exponential backoff with full jitter, but never sooner than the server's Retry-After.

        `max_wait` caps our own backoff only: retrying before the server's Retry-After just earns another
        429 and burns an attempt, so an explicit Retry-After is honoured even when it is longer.
        """
        exponential = min(self.max_wait, self.initial_wait * 2 ** (state.attempt_number - 1))
        jittered = random.uniform(exponential / 2, exponential)
        asked = _retry_after(state.outcome.exception() if state.outcome else None)
        if asked is not None:
            return max(asked, 0.0) + random.uniform(0, 0.1 * max(asked, 0.01))
        return jittered


class RatePacer:
    """Spaces request starts to stay under a requests-per-minute budget (in this process)."""

    def __init__(self, rpm: float):
        self.interval = 60.0 / rpm
        self._next = 0.0
        self._lock = asyncio.Lock()

    async def wait(self) -> None:
        async with self._lock:
            now = time.monotonic()
            delay = self._next - now
            self._next = max(now, self._next) + self.interval
        if delay > 0:
            await asyncio.sleep(delay)


class AdaptiveLimit:
    """An in-process limit that halves on a 429 and grows back by one after `limit` successes in a row.

    An endpoint that throttles us is better served by fewer calls in flight than by every call backing
    off and retrying at once. Only a 429 to a call that started after the last cut cuts again, so one
    burst of 429s (all those calls were sent under the old limit) halves the limit once, not to 1.
    Waiting calls are let in first come, first served.
    """

    def __init__(self, maximum: int):
        self.maximum = maximum
        self.limit = maximum
        self.lowest = maximum
        self._in_use = 0
        self._successes = 0
        self._epoch = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def acquire(self) -> int:
        """Take a slot; returns the epoch the call starts in (for `rate_limited`)."""
        if self._in_use < self.limit and not self._waiters:
            self._in_use += 1
            return self._epoch
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # the releaser counted us in
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            raise
        return self._epoch

    def release(self) -> None:
        self._in_use -= 1
        self._let_in()

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[int]:
        epoch = await self.acquire()
        try:
            yield epoch
        finally:
            self.release()

    def rate_limited(self, epoch: int) -> None:
        if epoch == self._epoch:
            self.limit = max(1, self.limit // 2)
            self.lowest = min(self.lowest, self.limit)
            self._epoch += 1
            self._successes = 0

    def succeeded(self) -> None:
        self._successes += 1
        if self._successes >= self.limit and self.limit < self.maximum:
            self._successes = 0
            self.limit += 1
            self._let_in()

    def _let_in(self) -> None:
        while self._waiters and self._in_use < self.limit:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self._in_use += 1
                waiter.set_result(None)


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


@functools.cache
def tls_context() -> ssl.SSLContext:
    """One TLS context for every endpoint client of this process. httpx builds a new one per client by
    default, loading the CA bundle each time: 30-60 ms per client, several clients per run (and per shard
    on Dask), all before the first call."""
    return httpx.create_ssl_context()


@dataclass
class ChatCaller:
    """The one object through which a run talks to its endpoint (create inside the running event loop)."""

    base_url: str
    model: str
    api_key: str
    concurrency: int = 16
    request_timeout: float = 120.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    rpm: float | None = None
    engine: Engine | None = None
    cache_mode: CacheMode = "use"
    global_limit: str | None = None
    global_rate_limit: str | None = None
    adaptive: bool = False
    stats: CallStats = field(default_factory=CallStats)
    # What requests this model accepts (request_rules); 400s naming a parameter refine it for the run.
    request_rule: RequestRule = STANDARD
    early_stop_calls: int = EARLY_STOP_CALLS
    # "chat" (/chat/completions), or what the judge needs instead (other_apis): "completions", "pooling".
    api: str = "chat"

    def __post_init__(self) -> None:
        # Several clients, each with its own small connection pool: httpx scans its whole pool on every
        # request and response, so one pool of C connections costs O(C) CPU per call (measured: 1.9 ms
        # per call at C=64 with one client, 1.4 ms with eight).
        self._clients = [
            openai.AsyncOpenAI(api_key=self.api_key, base_url=self.base_url, max_retries=0, timeout=self.request_timeout,
                               http_client=openai.DefaultAsyncHttpxClient(verify=tls_context()))
            for _ in range(max(1, math.ceil(self.concurrency / CONNECTIONS_PER_CLIENT)))
        ]
        self._next_client = itertools.cycle(self._clients)
        self._slots = asyncio.Semaphore(self.concurrency)
        self._pacer = RatePacer(self.rpm) if self.rpm else None
        self._adaptive = AdaptiveLimit(self.concurrency) if self.adaptive else None
        self._global = GlobalSlots(self.global_limit, self.request_timeout) if self.global_limit else None
        self._prefetched: dict[str, Completion | None] = {}
        # Calls made ahead of the flow (see `call_ahead`), each waiting for the first `complete` to ask.
        self._early: dict[str, asyncio.Future[Completion]] = {}
        self._taken_over = False
        self._cached_ahead: set[str] = set()
        self._unsaved: list[dict[str, Any]] = []
        self._writer: asyncio.Task[None] | None = None
        self._learned = learned_for(self.base_url, self.model, self.request_rule)
        # Early stop: outcomes of the run's first calls, while every one failed alike (None: not anymore).
        self._first_failures: tuple[str, int] | None = ("", 0)
        self._stopped: str | None = None

    @property
    def adjustments(self) -> list[dict[str, str]]:
        return list(self._learned.adjustments)

    def key(self, messages: Sequence[dict[str, str]], sampling: dict[str, Any]) -> str:
        """The cache key of the request actually sent for these messages and sampling (after the rules)."""
        return self._key_under(self._learned.rule, messages, sampling)

    def _key_under(self, rule: RequestRule, messages: Sequence[dict[str, str]], sampling: dict[str, Any]) -> str:
        sent_messages, params = shape(rule, list(messages), sampling)
        return request_key(endpoint_identity(self.base_url, self.api), self.model, sent_messages, params)

    async def prefetch(self, keys: list[str]) -> None:
        """Load many cached answers in one query (a shard's worth), so lookups cost no round trip each."""
        self._taken_over = True
        if self.engine is None or self.cache_mode != "use" or not keys:
            return
        rows = await asyncio.to_thread(db.cache_get_many, self.engine, keys)
        for key in keys:  # a known miss (None) is remembered too, so it costs no second query
            row = rows.get(key)
            self._prefetched[key] = row and Completion(row.response, row.prompt_tokens, row.completion_tokens, cached=True, key=key)

    async def complete(self, messages: list[dict[str, str]], sampling: dict[str, Any]) -> Completion:
        self._taken_over = True
        rule = self._learned.rule
        key = self._key_under(rule, messages, sampling)
        early = self._early.pop(key, None)
        if early is not None:  # a fresh call made ahead for this request: its answer (or failure) is ours
            self._prefetched.pop(key, None)
            return await early
        if self.cache_mode == "use":
            known = key in self._prefetched
            hit = self._prefetched.pop(key, None)  # used once: memory holds only the shards in flight
            if not known and self.engine is not None:
                rows = await asyncio.to_thread(db.cache_get_many, self.engine, [key])
                if key in rows:
                    row = rows[key]
                    hit = Completion(row.response, row.prompt_tokens, row.completion_tokens, cached=True, key=key)
            if hit is not None:
                self.stats.cache_hits += 1
                return hit
        return await self._call(messages, sampling, key, rule)  # keyed by the request it finally sent

    async def call_ahead(
        self, requests: Iterator[list[dict[str, str]]], sampling: dict[str, Any], max_calls: int,
        keep: Callable[[str], bool] = lambda text: False,
    ) -> int:
        """Send the first requests of a run before the flow asks for them, to use the seconds Prefect takes
        to start (its temporary server boots for several).

        Each answer waits in memory for the first `complete` of the same request, which takes it as its own
        fresh call: counted, cached and recorded exactly as if made then. Issuing stops for good the moment
        the flow asks for anything, so no request is ever sent twice; also after `max_calls`, on a fatal
        endpoint error, or when `requests` run out. Requests already in the call cache are skipped (the
        flow will find them there). An answer for which `keep(text)` holds (a valid verdict) is cached as
        soon as it arrives, so a run killed before its flow takes it over does not pay for it again.
        Returns how many calls were made ahead.
        """
        issued = 0

        async def worker() -> None:
            nonlocal issued
            for messages in requests:  # one iterator shared by all workers
                if self._taken_over or issued >= max_calls:
                    return
                rule = self._learned.rule
                key = self._key_under(rule, messages, sampling)
                if key in self._early:
                    continue
                if self.cache_mode == "use" and self.engine is not None:
                    if key in await asyncio.to_thread(db.cache_get_many, self.engine, [key]) or self._taken_over:
                        continue
                future: asyncio.Future[Completion] = asyncio.get_running_loop().create_future()
                future.add_done_callback(lambda f: f.cancelled() or f.exception())  # never "exception was never retrieved"
                self._early[key] = future
                issued += 1
                try:
                    completion = await self._call(messages, sampling, key, rule)
                    if completion.key != key:  # a rule adjusted on the way: the flow will ask under the new key
                        if self._early.get(key) is future:
                            del self._early[key]
                            self._early[completion.key] = future
                        key = completion.key
                except (CallFailed, FatalEndpointError) as exc:
                    future.set_exception(exc)
                    if isinstance(exc, FatalEndpointError):
                        return
                    continue
                except BaseException as exc:
                    future.set_exception(CallFailed(f"call made ahead of the flow ended: {type(exc).__name__}"))
                    raise
                future.set_result(completion)
                if keep(completion.text):
                    self._cached_ahead.add(key)
                    self._save([completion])

        await asyncio.gather(*(worker() for _ in range(self.concurrency)))
        return issued

    async def remember(self, completions: list[Completion]) -> None:
        """Persist answered calls of a judgment that produced a verdict (never failures or invalid ones)."""
        fresh = [c for c in completions if not c.cached and c.key]
        if self._cached_ahead:  # `call_ahead` already wrote these
            fresh = [c for c in fresh if c.key not in self._cached_ahead]
            self._cached_ahead.difference_update(c.key for c in completions)
        self._save(fresh)

    def _save(self, completions: list[Completion]) -> None:
        if self.engine is None or self.cache_mode == "off" or not completions:
            return
        self._unsaved.extend(
            {"key": c.key, "model": self.model, "response": c.text, "prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens, "created": db.utcnow()}
            for c in completions
        )
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_cache())

    async def _write_cache(self) -> None:
        """Group commit: write what is waiting at once; what arrives meanwhile goes in the next write.

        A write starts the moment an answer is remembered, so nothing waits for a timer, but a thousand
        answers arriving together cost a few transactions instead of a thousand (one transaction per
        answer was most of our CPU per judgment).
        """
        while self._unsaved:
            batch, self._unsaved = self._unsaved, []
            await asyncio.to_thread(db.cache_put_many, self.engine, batch)

    async def flush(self) -> None:
        """Wait until every remembered answer is in the database (a failed write raises here)."""
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)
        if self._writer is not None and self._writer.done() and self._writer.exception():
            raise self._writer.exception()  # type: ignore[misc]

    async def _call(self, messages: list[dict[str, str]], sampling: dict[str, Any], key: str | None = None,
                    keyed_rule: RequestRule | None = None) -> Completion:
        """One call, shaped by the model's rule; a 400 naming an unsupported parameter or value adjusts the
        rule for the run (`request_rules.Learned`) and the call is sent again in its new shape. `key` is
        the request's key under the rule in force when the caller computed it (saves hashing it again)."""
        if self._stopped:
            raise RunFailed(self._stopped)
        self.stats.calls += 1
        for _ in range(MAX_ADJUSTMENTS_PER_CALL):
            rule = self._learned.rule
            sent_messages, params = shape(rule, messages, sampling)
            try:
                completion = await self._send(sent_messages, params)
            except openai.BadRequestError as exc:
                if self._learned.adjust(params, sent_messages, _error_of(exc)):
                    continue
                self._call_failed(exc)
            except openai.APIError as exc:
                self._call_failed(exc)
            self._first_failures = None  # an answer: the run's endpoint works
            self.stats.answered += 1
            completion.key = key if key and rule is keyed_rule else request_key(endpoint_identity(self.base_url, self.api), self.model, sent_messages, params)
            return completion
        raise CallFailed(f"the endpoint kept rejecting parameters after {MAX_ADJUSTMENTS_PER_CALL} adjustments")

    def _call_failed(self, exc: openai.APIError) -> None:
        """Raise this call's failure; stop the run when its first calls all failed alike and for good."""
        self.stats.failed += 1
        retryable = _retryable(exc)
        tries = f" after {self.retry.max_retries + 1} attempts" if retryable else ""
        reason = f"{_describe(exc)}{tries}"
        seen = self._first_failures
        if seen is not None:
            if retryable or (seen[1] and seen[0] != reason):
                self._first_failures = None
            else:
                self._first_failures = (reason, seen[1] + 1)
                if seen[1] + 1 >= self.early_stop_calls:
                    said = _error_of(exc).get("message") if isinstance(exc, openai.APIStatusError) else None
                    self._stopped = redact(
                        f"stopped early: the first {seen[1] + 1} calls to {self.model} at {self.base_url} were all "
                        f"rejected with {reason}" + (f": {str(said)[:300]}" if said else "")
                    )
                    raise RunFailed(self._stopped)
        raise CallFailed(reason)

    async def _send(self, messages: list[dict[str, str]], sampling: dict[str, Any]) -> Completion:
        """One request with its retries (429, 5xx, timeouts, drops, a 200 that is not JSON)."""
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.retry.max_retries + 1),
            wait=self.retry.wait,
            retry=retry_if_exception(_retryable),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    if attempt.retry_state.attempt_number > 1:
                        self.stats.retries += 1
                    self.stats.attempts += 1
                    if self._pacer:
                        await self._pacer.wait()
                    if self.global_rate_limit:
                        await wait_for_rate(self.global_rate_limit)
                    try:
                        if self._adaptive is None and self._global is None:  # the default: nothing but the semaphore
                            async with self._slots:
                                response = await self._post(messages, sampling)
                        else:
                            response = await self._limited_post(messages, sampling)
                    except json.JSONDecodeError as exc:  # a 200 whose body is not JSON
                        raise BadAnswerBody() from exc
                    try:
                        return _completion_from(response) if self.api == "chat" else answer_of(self.api, response)
                    except (ValueError, TypeError, AttributeError) as exc:
                        raise BadAnswerBody() from exc
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            raise FatalEndpointError(f"the endpoint {self.base_url} rejected the API key ({_describe(exc).split(' (')[0]}); check OPENAI_API_KEY") from None
        except openai.NotFoundError as exc:
            raise FatalEndpointError(f"the endpoint {self.base_url} does not know model '{self.model}' or its chat API ({_describe(exc)})") from None
        except BadAnswerBody as exc:
            self.stats.failed += 1
            raise CallFailed(f"{_describe(exc)} after {self.retry.max_retries + 1} attempts") from None
        raise AssertionError("unreachable: the retry loop returns or raises")

    async def _post(self, messages: list[dict[str, str]], sampling: dict[str, Any]) -> Any:
        if self.api in OTHER_APIS:
            return await other_api_post(next(self._next_client), self.api, self.base_url, self.model, messages, sampling)
        return await next(self._next_client).post("/chat/completions", cast_to=dict, body={"model": self.model, "messages": messages, **sampling})

    async def _limited_post(self, messages: list[dict[str, str]], sampling: dict[str, Any]) -> Any:
        """One attempt: an in-process slot (adaptive, or the semaphore), then a slot of the global limit.

        The in-process slot is freed first and the global one given back a loop tick later, so the call
        that was waiting for the in-process slot is already waiting for a global one and takes the lease
        over directly. With equal limits (in-process runs) every lease would otherwise go back to the
        Prefect server and be asked for again.
        """
        epoch = 0
        if self._adaptive:
            epoch = await self._adaptive.acquire()
        else:
            await self._slots.acquire()
        lease = None
        try:
            if self._global:
                lease = await self._global.take()
            try:
                response = await self._post(messages, sampling)
            except openai.RateLimitError:
                if self._adaptive:
                    self._adaptive.rate_limited(epoch)
                raise
        finally:
            if self._adaptive:
                self._adaptive.release()
            else:
                self._slots.release()
            if lease is not None:
                await asyncio.sleep(0)
                await self._global.give_back(lease)  # type: ignore[union-attr]
        if self._adaptive:
            self._adaptive.succeeded()
        return response

    async def aclose(self) -> None:
        await self.flush()
        for client in self._clients:
            await client.close()


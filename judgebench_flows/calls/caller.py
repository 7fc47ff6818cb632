"""`ChatCaller`: the one object through which a run talks to its endpoint.

It composes the layers a call goes through, outermost first: the call cache (`cache`), the model's
request rule and its 400 adjustments (`request_rules`), the
retry policy (`retry`), the limits (`limits`) and the wire (`transport`). Everything about "nothing lost,
nothing paid twice" that concerns a single call is decided here; counting too (`CallStats`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import openai
from sqlalchemy.engine import Engine

from judgebench_flows.calls.cache import CallCache, request_key
from judgebench_flows.calls.limits import CallLimits
from judgebench_flows.calls.other_apis import endpoint_identity
from judgebench_flows.calls.request_rules import STANDARD, RequestRule, learned_for, shape
from judgebench_flows.calls.retry import FATAL, RetryPolicy, describe, error_of, fatal_error, retryable
from judgebench_flows.calls.transport import BadAnswerBody, Transport
from judgebench_flows.core.completion import CallFailed, Completion
from judgebench_flows.core.endpoint import CacheMode, EndpointSettings
from judgebench_flows.core.errors import RunFailed
from judgebench_flows.core.secrets import redact

# Early stop: when this many first calls of a run all fail alike and cannot be retried, stop the run.
EARLY_STOP_CALLS = 20
# Adjustments one call may go through after 400s naming an unsupported parameter (one per parameter).
MAX_ADJUSTMENTS_PER_CALL = 8


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

    @classmethod
    def from_settings(cls, settings: EndpointSettings, *, model: str, api_key: str, **parts: Any) -> ChatCaller:
        """The caller a run's endpoint settings describe (the one place they become a caller's fields);
        `parts` are what a run adds: the cache's engine, global limit names, the request rule."""
        return cls(
            base_url=settings.base_url or "local:",
            model=model,
            api_key=api_key,
            concurrency=settings.concurrency,
            request_timeout=settings.request_timeout,
            rpm=settings.rpm,
            cache_mode=settings.cache,
            retry=RetryPolicy(settings.max_retries, settings.retry_initial_wait, settings.retry_max_wait),
            adaptive=settings.adaptive_concurrency,
            **parts,
        )

    def __post_init__(self) -> None:
        self.transport = Transport(self.base_url, self.model, self.api_key, self.request_timeout, self.concurrency)
        self.limits = CallLimits(
            self.concurrency, self.request_timeout, self.rpm, self.adaptive, self.global_limit, self.global_rate_limit
        )
        self.cache = CallCache(self.engine, self.cache_mode, self.model)
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

    async def prefetch(self, keys: Iterable[str]) -> None:
        """Load many cached answers in one query (a shard's worth), so lookups cost no round trip each."""
        await self.cache.prefetch(keys)

    async def complete(self, messages: list[dict[str, str]], sampling: dict[str, Any]) -> Completion:
        rule = self._learned.rule
        key = self._key_under(rule, messages, sampling)
        if self.cache.reads:
            hit = await self.cache.lookup(key)
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
        sampling: dict[str, Any],
        key: str | None = None,
        keyed_rule: RequestRule | None = None,
    ) -> Completion:
        """One call, shaped by the model's rule; a 400 naming an unsupported parameter or value adjusts the
        rule for the run (`request_rules.Learned`) and the call is sent again in its new shape. `key` is
        the request's key under the rule in force when the caller computed it (saves hashing it again)."""
        if self._stopped:
            raise RunFailed(self._stopped)
        self.stats.calls += 1
        for _ in range(MAX_ADJUSTMENTS_PER_CALL):
            sent: list[tuple[RequestRule, list[dict[str, str]], dict[str, Any]]] = []
            try:
                completion = await self._send(messages, sampling, sent)
            except openai.BadRequestError as exc:
                _, sent_messages, params = sent[-1]
                if self._learned.adjust(params, sent_messages, error_of(exc)):
                    continue
                self._call_failed(exc)
            except openai.APIError as exc:
                self._call_failed(exc)
            rule, sent_messages, params = sent[-1]
            self._first_failures = None  # an answer: the run's endpoint works
            self.stats.answered += 1
            completion.key = (
                key
                if key and rule is keyed_rule
                else request_key(endpoint_identity(self.base_url, self.api), self.model, sent_messages, params)
            )
            return completion
        raise CallFailed(f"the endpoint kept rejecting parameters after {MAX_ADJUSTMENTS_PER_CALL} adjustments")

    def _call_failed(self, exc: openai.APIError) -> None:
        """Raise this call's failure; stop the run when its first calls all failed alike and for good."""
        self.stats.failed += 1
        can_retry = retryable(exc)
        tries = f" after {self.retry.max_retries + 1} attempts" if can_retry else ""
        reason = f"{describe(exc)}{tries}"
        seen = self._first_failures
        if seen is not None:
            if can_retry or (seen[1] and seen[0] != reason):
                self._first_failures = None
            else:
                self._first_failures = (reason, seen[1] + 1)
                if seen[1] + 1 >= self.early_stop_calls:
                    said = error_of(exc).get("message") if isinstance(exc, openai.APIStatusError) else None
                    self._stopped = redact(
                        f"stopped early: the first {seen[1] + 1} calls to {self.model} at {self.base_url} were all "
                        f"rejected with {reason}" + (f": {str(said)[:300]}" if said else "")
                    )
                    raise RunFailed(self._stopped)
        raise CallFailed(reason)

    async def _send(
        self,
        messages: list[dict[str, str]],
        sampling: dict[str, Any],
        sent: list[tuple[RequestRule, list[dict[str, str]], dict[str, Any]]],
    ) -> Completion:
        """One request with its retries (429, 5xx, timeouts, drops, a 200 that is not JSON). Each attempt
        is shaped by the model's rule once it holds a slot (`_post`), so a call that waited behind one
        the endpoint rejected goes out as the rule learned from it; `sent` gets each attempt's shape."""
        api = self.api
        try:
            async for attempt in self.retry.attempts():
                with attempt:
                    if attempt.retry_state.attempt_number > 1:
                        self.stats.retries += 1
                    self.stats.attempts += 1
                    response = await self.limits.run(self._post, api, messages, sampling, sent)
                    return self.transport.answer(api, response)
        except FATAL as exc:
            raise fatal_error(exc, self.base_url, self.model) from None
        except BadAnswerBody as exc:
            self.stats.failed += 1
            raise CallFailed(f"{describe(exc)} after {self.retry.max_retries + 1} attempts") from None
        raise AssertionError("unreachable: the retry loop returns or raises")

    async def _post(
        self,
        api: str,
        messages: list[dict[str, str]],
        sampling: dict[str, Any],
        sent: list[tuple[RequestRule, list[dict[str, str]], dict[str, Any]]],
    ) -> Any:
        if self._stopped:  # queued behind the calls that stopped the run: never sent
            raise RunFailed(self._stopped)
        rule = self._learned.rule
        sent_messages, params = shape(rule, messages, sampling)
        sent.append((rule, sent_messages, params))
        return await self.transport.post(api, sent_messages, params)

    async def aclose(self) -> None:
        await self.flush()
        await self.transport.aclose()

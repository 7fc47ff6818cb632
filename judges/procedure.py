"""The judge protocol, and one prompted judgment: format, call, parse, the judge's own follow-up turn.

Every judge the judging code runs (prompted, tokenized, custom, external pairwise, reward model) is a
`Judge`: it decides the orders of one pair given a `ModelCall`, and says what its judgments open with so
the call cache can be prefetched and calls made ahead. The judging code asks nothing else of it.

A prompted judgment gets `complete(messages, sampling) -> Completion` from its caller, so the same
procedure runs against the real endpoint, a cache, or a test double. Transport problems are the caller's
to retry; here a call either answers or raises `CallFailed`, and an answer that does not parse becomes
"invalid", never a decision. No network, no Prefect.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from judgebench_flows.core.completion import CallFailed, Complete, Completion, Sampling
from judgebench_flows.judges.parsing import strip_reasoning

if TYPE_CHECKING:
    from judgebench_flows.core.records import Pair

Messages = list[dict[str, str]]


class ParseFailed(Exception):
    """The judge's parser could not read this answer; the judgment is invalid, the run goes on."""


@dataclass
class Outcome:
    status: Literal["ok", "invalid", "failed"]
    decision: str
    prompt: str
    response: str
    error: str | None = None
    completions: list[Completion] = field(default_factory=list)
    latency_s: float = 0.0
    # A reward model's scores of [the first shown response, the second]; None for every other judge.
    scores: list[float] | None = None
    # Calls of this judgment that got no answer: one for a failed judgment unless the judge says (a call
    # shared by both orders fails once: LLMBar's auxiliary generation counts in the first order only).
    failed_calls: int | None = None


class ModelCall(Protocol):
    """How a judge reaches its model: the run's endpoint caller (retries, limits, call cache) or a double."""

    async def complete(self, messages: Messages, sampling: Sampling) -> Completion: ...

    async def remember(self, completions: list[Completion]) -> None:
        """Cache these answered calls: only those of judgments that reached a verdict."""


@runtime_checkable
class Judge(Protocol):
    """The one interface the judging code uses, whatever the kind of judge."""

    @property
    def name(self) -> str: ...

    @property
    def api(self) -> str:
        """The endpoint API its calls use: "chat", "completions", "pooling" or "transformers"."""

    @property
    def sampling(self) -> Sampling: ...

    @property
    def first_turn(self) -> Callable[[str, str, str], Messages] | None:
        """`(question, answer_A, answer_B) -> messages`: the request one order's judgment opens with, known
        before it runs (the call cache is prefetched and calls made ahead with it; its last user message is
        the record's prompt). None when a judge has no such request: it calls no model (external pairwise),
        or its calls are shared between orders (reward model)."""

    def is_final(self, text: str) -> bool:
        """Whether a first-turn answer made ahead is a whole valid judgment, so may be cached at once."""

    def fingerprint(self) -> str:
        """Everything that must change the cache keys of shard results when it changes."""

    async def judge(self, pair: Pair, orders: tuple[int, ...], call: ModelCall) -> list[Outcome]:
        """One outcome per order (0: A shown first, 1: B first). Caches through `call.remember` only the
        answers of judgments that reached a verdict; a failed or unparseable call is never a decision."""


@dataclass(frozen=True)
class PlannedCall:
    """One call a pair's judgment may make, as `estimate` prices it before any call: its request, with
    what earlier answers it carries left out and counted in `carried_tokens` at their caps (an
    auxiliary generation's answer in an LLMBar comparison, two explanations in its synthesis)."""

    messages: Messages
    sampling: Sampling
    carried_tokens: int = 0


@runtime_checkable
class PlansCalls(Protocol):
    """A judge whose judgment is more than one request per order (LLMBar's auxiliary generations and
    syntheses): it lists every call a pair may cost at most, so `estimate` and budgets count them all."""

    def planned_calls(self, pair: Pair, orders: tuple[int, ...]) -> list[PlannedCall]: ...


class Prompted(Protocol):
    """What `judge_one_order` needs: a judge that formats a prompt and parses the model's answer."""

    sampling: Sampling
    follow_up: str | None

    def format(self, question: str, answer_A: str, answer_B: str) -> Messages: ...
    def parse(self, text: str) -> str: ...
    def wants_follow_up(self, text: str) -> bool: ...


class PromptProcedure:
    """The `Judge` protocol for any judge with `format`/`parse`/`wants_follow_up` (built-in, tokenized and
    custom judges): each order is one `judge_one_order`, its answers cached when it gives a verdict."""

    api = "chat"

    def first_turn(self: Any, question: str, answer_A: str, answer_B: str) -> Messages:
        return self.format(question, answer_A, answer_B)

    def is_final(self: Any, text: str) -> bool:
        return is_final_verdict(self, text)

    async def judge(self: Any, pair: Pair, orders: tuple[int, ...], call: ModelCall) -> list[Outcome]:
        return await asyncio.gather(*(_judge_and_remember(self, pair, order, call) for order in orders))


async def _judge_and_remember(judge: Prompted, pair: Pair, order: int, call: ModelCall) -> Outcome:
    a, b = (pair.response_A, pair.response_B) if order == 0 else (pair.response_B, pair.response_A)
    outcome = await judge_one_order(judge, pair.question, a, b, call.complete)
    if outcome.status == "ok":
        await call.remember(outcome.completions)
    return outcome


def _parse(judge: Prompted, text: str) -> tuple[str, str | None]:
    """The verdict of the answer text alone: a `<think>` scratchpad is reasoning, not the answer."""
    try:
        return judge.parse(strip_reasoning(text)), None
    except ParseFailed as exc:
        return "", str(exc)


def is_final_verdict(judge: Prompted, text: str) -> bool:
    """Whether a first answer is already its judgment's whole answer, and a valid verdict: no follow-up
    turn wanted and it parses. Only such an answer may be cached before its judgment is recorded."""
    return not judge.wants_follow_up(text) and bool(_parse(judge, text)[0])


async def judge_one_order(judge: Prompted, question: str, answer_A: str, answer_B: str, complete: Complete) -> Outcome:
    """Judge A against B once; the texts of a follow-up turn are joined and parsed together."""
    started = time.perf_counter()
    messages = judge.format(question, answer_A, answer_B)
    prompt = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    completions: list[Completion] = []
    response = ""
    while True:
        try:
            completion = await complete(messages, judge.sampling)
        except CallFailed as exc:
            return Outcome("failed", "", prompt, response, str(exc), completions, time.perf_counter() - started)
        completions.append(completion)
        response = completion.text if len(completions) == 1 else f"{response}\n{completion.text}"
        if completion.finish_reason == "length" and not strip_reasoning(completion.text).strip():
            # The whole token budget went to reasoning: there is no answer to parse, and asking again
            # with the same budget would end the same way.
            spent = f" ({completion.reasoning_tokens} reasoning tokens)" if completion.reasoning_tokens else ""
            reason = f"empty answer: the token limit was reached before the answer (finish_reason length){spent}"
            return Outcome("invalid", "", prompt, response, reason, completions, time.perf_counter() - started)
        if len(completions) == 1 and judge.wants_follow_up(response):
            messages = [
                *messages,
                {"role": "assistant", "content": completion.text},
                {"role": "user", "content": judge.follow_up or ""},
            ]
            continue
        break
    decision, parse_error = _parse(judge, response)
    elapsed = time.perf_counter() - started
    if decision:
        return Outcome("ok", decision, prompt, response, None, completions, elapsed)
    return Outcome(
        "invalid", "", prompt, response, parse_error or "no verdict found in the judge's answer", completions, elapsed
    )

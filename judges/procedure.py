"""One judgment: format, call, parse, and the judge's own follow-up turn. No network, no Prefect.

The caller supplies `complete(messages, sampling) -> Completion`, so the same procedure runs against the
real endpoint, a cache, or a test double. Transport problems are the caller's to retry; here a call either
answers or raises `CallFailed`, and an answer that does not parse becomes "invalid", never a decision.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from judgebench_flows.core.completion import CallFailed, Complete, Completion
from judgebench_flows.judges.custom import ParseFailed
from judgebench_flows.judges.parsing import strip_reasoning


class Judge(Protocol):
    name: str
    sampling: dict[str, Any]
    follow_up: str | None

    def format(self, question: str, answer_A: str, answer_B: str) -> list[dict[str, str]]: ...
    def parse(self, text: str) -> str: ...
    def wants_follow_up(self, text: str) -> bool: ...


@dataclass
class Outcome:
    status: Literal["ok", "invalid", "failed"]
    decision: str
    prompt: str
    response: str
    error: str | None = None
    completions: list[Completion] = field(default_factory=list)
    latency_s: float = 0.0


def _parse(judge: Judge, text: str) -> tuple[str, str | None]:
    """The verdict of the answer text alone: a `<think>` scratchpad is reasoning, not the answer."""
    try:
        return judge.parse(strip_reasoning(text)), None
    except ParseFailed as exc:
        return "", str(exc)


def is_final_verdict(judge: Judge, text: str) -> bool:
    """Whether a first answer is already its judgment's whole answer, and a valid verdict: no follow-up
    turn wanted and it parses. Only such an answer may be cached before its judgment is recorded."""
    return not judge.wants_follow_up(text) and bool(_parse(judge, text)[0])


async def judge_one_order(judge: Judge, question: str, answer_A: str, answer_B: str, complete: Complete) -> Outcome:
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
            messages = [*messages, {"role": "assistant", "content": completion.text}, {"role": "user", "content": judge.follow_up or ""}]
            continue
        break
    decision, parse_error = _parse(judge, response)
    elapsed = time.perf_counter() - started
    if decision:
        return Outcome("ok", decision, prompt, response, None, completions, elapsed)
    return Outcome("invalid", "", prompt, response, parse_error or "no verdict found in the judge's answer", completions, elapsed)

"""What one model call gives back, and how it fails: the vocabulary shared by model clients and judges.

It sits in the core so that the model-call layer and the judges both use it without importing each other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from pydantic import JsonValue


@dataclass
class Completion:
    """One call's answer: the text of a chat or completions API, or the `score` of a score API (a reward
    model's raw score, whose `text` is empty), with the tokens it cost."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False
    key: str = ""
    # Why the answer ended ("stop", "length", ...) and the tokens a reasoning model spent thinking.
    finish_reason: str | None = None
    reasoning_tokens: int = 0
    # A batch run's answer sent synchronously (past its deadline, or after its batches expired): it is
    # paid at the synchronous price.
    synchronous: bool = False
    # A score API's answer (vLLM's Pooling API, a local reward model); None for a text answer.
    score: float | None = None
    # What the endpoint said about the model that answered (its answer's `model` and, OpenAI-compatible,
    # `system_fingerprint`): how a model changed behind one name shows. None from a cache or when unsaid.
    served_model: str | None = None
    system_fingerprint: str | None = None


# Claude's stop reasons (Anthropic's Messages API and Bedrock's Converse API name them alike) as the
# judging code reads finish reasons, OpenAI's words ("length": out of tokens).
STOP_REASONS = {"max_tokens": "length", "end_turn": "stop", "stop_sequence": "stop"}


def finish_reason(stop: object) -> str | None:
    """An answer's stop reason as a `Completion.finish_reason`: Claude's in OpenAI's words, another kept as
    it is, none when the answer gave none."""
    return STOP_REASONS.get(stop, stop) if isinstance(stop, str) else None


class CallFailed(Exception):
    """A call that produced no answer after its retries, or one the endpoint rejected for this request."""


Sampling = dict[str, JsonValue]
"""A request's parameters besides its messages: JSON fields sent as they are (temperature, max_tokens,
use_activation, ...), after the model's request rule shaped them."""
Complete = Callable[[list[dict[str, str]], Sampling], Awaitable[Completion]]

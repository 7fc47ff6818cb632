"""What request each judge model accepts: model-family rules as data, CLI overrides, and what a run learns.

Reasoning models reject parts of an ordinary chat request: o1-mini takes no system message, o1/o3/o4/gpt-5
take no sampling parameters but the defaults and want `max_completion_tokens` instead of `max_tokens`. A
request they reject is a failed judgment, so a run against them used to measure nothing. One table below
decides, per model family, how a judge's messages and sampling become the request actually sent; the
request actually sent is what the call cache keys on, so a rule change never serves a stale answer.

o1 models get exactly what JudgeBench's `run_judge.py` sends them (`utils/models.py`): no sampling
parameter at all, and a system message folded into the first user turn with JudgeBench's markers, so our
numbers stay comparable with the paper's.

For models the table does not know, a 400 naming an unsupported parameter or value makes the run drop
(or rename, or fold) that one thing for that endpoint and model, once, and remember it: `Learned`.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Literal

from pydantic import JsonValue
from typing_extensions import TypedDict

from judgebench_flows.core.completion import Sampling
from judgebench_flows.core.secrets import redact
from judgebench_flows.core.text import shorten

RequestStyle = Literal["auto", "standard", "o1", "reasoning"]
REQUEST_STYLES: tuple[str, ...] = ("auto", "standard", "o1", "reasoning")
REASONING_EFFORTS: tuple[str, ...] = ("low", "medium", "high")
SYSTEM_BEGIN = "<|BEGIN_SYSTEM_MESSAGE|>\n"
SYSTEM_END = "\n<|END_SYSTEM_MESSAGE|>\n\n"


class Adjustment(TypedDict):
    """One change a run made to a rule after a 400 (or a parameter an endpoint ignored): the parameter,
    what was done (`FOLDED`, `RENAMED`, `DROPPED`, `IGNORED`, `NOT_SENT`) and the endpoint's words, secrets redacted."""

    param: str
    action: str
    endpoint_said: str


class RuleDescription(TypedDict):
    """A rule as results.json's `run.requests` and the report show it."""

    rule: str
    fold_system: bool
    keep_only: list[str] | None
    drop: list[str]
    rename: dict[str, str]


class RequestReport(RuleDescription):
    """results.json's `run.requests`: the rule applied and what the run adjusted on the way."""

    adjustments: list[Adjustment]


@dataclass(frozen=True)
class RequestRule:
    """How a family's requests differ from a plain chat request.

    `keep_only`: when set, every sampling parameter not named is dropped (o1: JudgeBench sends none).
    `drop`: parameters never sent. `rename`: parameter names the family wants instead (max_tokens ->
    max_completion_tokens). `fold_system`: the system message goes into the first user turn.
    """

    name: str
    fold_system: bool = False
    keep_only: frozenset[str] | None = None
    drop: frozenset[str] = frozenset()
    rename: tuple[tuple[str, str], ...] = ()

    @property
    def is_identity(self) -> bool:
        return not self.fold_system and self.keep_only is None and not self.drop and not self.rename

    def describe(self) -> RuleDescription:
        return {
            "rule": self.name,
            "fold_system": self.fold_system,
            "keep_only": sorted(self.keep_only) if self.keep_only is not None else None,
            "drop": sorted(self.drop),
            "rename": dict(self.rename),
        }


STANDARD = RequestRule("standard")
# o1 family: what JudgeBench sends (only reasoning_effort passes, and only when the user asks for it).
O1 = RequestRule("o1", fold_system=True, keep_only=frozenset({"reasoning_effort"}))
# o3, o4, gpt-5: system messages are fine; only default sampling; a token budget under its new name.
REASONING = RequestRule(
    "reasoning",
    drop=frozenset(
        {"temperature", "top_p", "presence_penalty", "frequency_penalty", "logprobs", "top_logprobs", "logit_bias"}
    ),
    rename=(("max_tokens", "max_completion_tokens"),),
)

# Model-name prefix -> rule; the longest matching prefix wins. Names are matched after any provider path
# ("openai/o3-mini" is o3-mini), case-insensitively. gpt-5-chat is the non-reasoning chat model.
MODEL_RULES: dict[str, RequestRule] = {
    "o1": O1,
    "o3": REASONING,
    "o4": REASONING,
    "gpt-5": REASONING,
    "gpt-5-chat": STANDARD,
}
STYLES: dict[str, RequestRule] = {"standard": STANDARD, "o1": O1, "reasoning": REASONING}


def rule_for(model: str, style: str = "auto", drop_params: tuple[str, ...] | list[str] = ()) -> RequestRule:
    """The rule for a model: the table's (or the style forced from the CLI), plus parameters to drop."""
    if style != "auto":
        rule = STYLES[style]
    else:
        name = model.rsplit("/", 1)[-1].lower()
        matches = [prefix for prefix in MODEL_RULES if name.startswith(prefix)]
        rule = MODEL_RULES[max(matches, key=len)] if matches else STANDARD
    if drop_params:
        rule = replace(rule, drop=rule.drop | frozenset(drop_params))
    return rule


def fold_system(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """A leading system message folded into the first user turn, byte for byte as JudgeBench does."""
    if len(messages) < 2 or messages[0].get("role") != "system":
        return messages
    system, user = messages[0], messages[1]
    folded = {**user, "content": f"{SYSTEM_BEGIN}{str(system['content']).strip()}{SYSTEM_END}{user['content']}"}
    return [folded, *messages[2:]]


def shape(
    rule: RequestRule, messages: list[dict[str, str]], sampling: Sampling
) -> tuple[list[dict[str, str]], Sampling]:
    """The messages and parameters actually sent for a judge's messages and sampling under `rule`."""
    if rule.is_identity:
        return messages, sampling
    if rule.fold_system:
        messages = fold_system(messages)
    params: Sampling = {}
    renames = dict(rule.rename)
    for name, value in sampling.items():
        if name in rule.drop or (rule.keep_only is not None and name not in rule.keep_only):
            continue
        params[renames.get(name, name)] = value
    return messages, params


def not_sent(sampling: Sampling, params: Sampling, rule: RequestRule) -> list[str]:
    """The parameters of `NOTED_WHEN_NOT_SENT` a judge asked for that `rule` left out of the request."""
    renames = dict(rule.rename)
    return [name for name in sampling if name in NOTED_WHEN_NOT_SENT and renames.get(name, name) not in params]


ADJUSTABLE_CODES = ("unsupported_parameter", "unsupported_value")
# What an adjustment did, as recorded (results.json's `run.requests.adjustments[].action`).
FOLDED = "folded the system message into the first user turn"
RENAMED = "sent as max_completion_tokens"
DROPPED = "dropped"
IGNORED = "ignored by the endpoint"  # sent, accepted, not acted on (no beam search): noted, nothing changed
NOT_SENT = "not sent: the request rule takes no such parameter"  # the judge asked for it: noted, nothing changed
# Parameters a judge's own protocol relies on, whose leaving out by a request rule (a provider without
# them, --drop-params, a reasoning model's rule) changes what is measured: the run's report says so.
# LLMBar's judges force their answer's form with `logit_bias`.
NOTED_WHEN_NOT_SENT = frozenset({"logit_bias"})
# How servers other than OpenAI's say a parameter is not accepted, in words only (LiteLLM's
# `UnsupportedParamsError: O-series models don't support temperature=0.0` with code "400" and no param;
# pydantic's "Extra inputs are not permitted" from vLLM and other FastAPI servers; "unrecognized request
# argument"). A 400 without such words (a context-length error naming max_tokens, a value out of range)
# never drops anything.
REJECTION_WORDING = re.compile(
    r"unsupported|not supported|(?:do|does|don't|doesn't|cannot|can't|can not)(?: not)? (?:support|accept|allow)"
    r"|not (?:allowed|permitted)|unrecognized|unknown (?:parameter|field|argument)|extra (?:inputs|fields)",
    re.IGNORECASE,
)
# Never dropped, whatever a message says: without them there is no request.
NEVER_DROPPED = frozenset({"model", "messages", "prompt", "input"})


def rejected_parameter(message: str, sent_params: Sampling) -> str | None:
    """The sent parameter a 400's message says is not accepted (the first one it names), if it says so."""
    if not REJECTION_WORDING.search(message):
        return None
    named = []
    for name in sent_params:
        if name in NEVER_DROPPED:
            continue
        # A short name ("n") only quoted or as `n=`: a lone letter in prose names nothing.
        pattern = (
            rf"(?<![\w.]){re.escape(name)}(?!\w)"
            if len(name) > 2
            else rf"['\"`]{re.escape(name)}['\"`]|\b{re.escape(name)}="
        )
        found = re.search(pattern, message)
        if found:
            named.append((found.start(), name))
    return min(named)[1] if named else None


@dataclass
class Learned:
    """What one run learned about one endpoint and model from its 400s, on top of the configured rule.

    Shared by every call of the run to that endpoint and model (`state.CallState`), and changed only
    under a lock; a change is recorded once, however many calls in flight were rejected for the same
    reason. What another process learned (a Dask worker's, carried back with its shard's result) is taken in by `merge`.
    """

    base: RequestRule
    rule: RequestRule = field(init=False)
    adjustments: list[Adjustment] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.rule = self.base

    def adjust(
        self,
        sent_params: Sampling,
        sent_messages: list[dict[str, str]],
        error: dict[str, JsonValue],
        message: str | None = None,
    ) -> bool:
        """Change the rule so that what this 400 rejected is not sent again. True if the request should
        be resent (the rule changed now, or another call already changed it since this one was sent).

        OpenAI names the parameter (`code` unsupported_parameter/unsupported_value, `param`); any other
        server is read by its words (`rejected_parameter`). `message`: the server's, on one line."""
        code = str(error.get("code") or "")
        param = str(error.get("param") or "")
        message = message if message is not None else str(error.get("message") or "")
        if code not in ADJUSTABLE_CODES or not param:
            param = rejected_parameter(message, sent_params) or ""
            if not param:
                return False
        with self._lock:
            rule = self.rule
            if param.startswith("messages") and "system" in message.lower():
                if any(m.get("role") == "system" for m in sent_messages):
                    if not rule.fold_system:
                        self.rule = replace(rule, fold_system=True)
                        self._note(param, FOLDED, message)
                    return True
                return False
            name = param.split(".")[0].split("[")[0]
            if name not in sent_params:
                return False
            renames = dict(rule.rename)
            if name == "max_tokens" and "max_completion_tokens" in message:
                if renames.get("max_tokens") != "max_completion_tokens":
                    self.rule = replace(rule, rename=tuple({**renames, "max_tokens": "max_completion_tokens"}.items()))
                    self._note(name, RENAMED, message)
                return True
            original = next((k for k, v in renames.items() if v == name), name)
            if original not in rule.drop:
                self.rule = replace(rule, drop=rule.drop | {original})
                self._note(name, DROPPED, message)
            return True

    def merge(self, adjustments: Iterable[Adjustment]) -> list[Adjustment]:
        """Apply adjustments another process recorded (as `adjustments` lists them), each as `adjust` made
        it, and note those not known here yet (same param and action), in their order. Returns those."""
        added: list[Adjustment] = []
        with self._lock:
            for change in adjustments:
                param, action = str(change.get("param") or ""), str(change.get("action") or "")
                if not param or any(a["param"] == param and a["action"] == action for a in self.adjustments):
                    continue
                rule = self.rule
                renames = dict(rule.rename)
                if action == FOLDED:
                    self.rule = replace(rule, fold_system=True)
                elif action == RENAMED:
                    self.rule = replace(rule, rename=tuple({**renames, "max_tokens": "max_completion_tokens"}.items()))
                elif action == DROPPED:
                    original = next((k for k, v in renames.items() if v == param), param)
                    self.rule = replace(rule, drop=rule.drop | {original})
                elif action != IGNORED and not action.startswith(NOT_SENT):  # another version's: nothing to apply
                    continue
                self._note(param, action, str(change.get("endpoint_said") or ""))
                added.append(self.adjustments[-1])
        return added

    def note_ignored(self, param: str, observed: str) -> bool:
        """Record, once, that the endpoint accepted `param` but did not act on it (what we `observed`):
        the run's report names it. True the first time."""
        with self._lock:
            if any(a["param"] == param and a["action"] == IGNORED for a in self.adjustments):
                return False
            self._note(param, IGNORED, observed)
            return True

    def note_not_sent(self, param: str) -> bool:
        """Record, once, that the rule leaves out `param`, which the judge asked for (`NOTED_WHEN_NOT_SENT`):
        the run's report names it. True the first time."""
        with self._lock:
            if any(a["param"] == param and a["action"].startswith(NOT_SENT) for a in self.adjustments):
                return False
            self._note(param, f"{NOT_SENT} ({self.rule.name})", "")
            return True

    def report(self) -> RequestReport:
        """The rule applied and what the run adjusted (`RequestReport`)."""
        return {**self.base.describe(), "adjustments": list(self.adjustments)}

    def _note(self, param: str, action: str, message: str) -> None:
        # Kept, printed, and carried between processes (a shard's result): never with a secret in it.
        # Whole (a cut message reads like another one), bounded only against a pathological body.
        self.adjustments.append({"param": param, "action": action, "endpoint_said": redact(shorten(message, 2000))})


__all__ = [
    "MODEL_RULES",
    "REASONING_EFFORTS",
    "REQUEST_STYLES",
    "RequestRule",
    "Adjustment",
    "Learned",
    "RequestReport",
    "fold_system",
    "not_sent",
    "rule_for",
    "shape",
]

"""LLMBar's evaluators as judges: auxiliary generations, both orders, Swap-and-synthesize, as LLMBar runs them.

Order 0 is LLMBar's `swap = False` (the pair's response A shown as Output (a)), order 1 its `swap = True`.
A decision is given as shown, like every judge's: "A>B" when the order's final winner is Output (a).

- Auxiliary strategies (Metrics, Reference, Metrics_Reference): the auxiliary generations are asked once
  per pair, from the question alone, and shared by both orders, as LLMBar does. An auxiliary answer the
  provider's content filter stopped (finish reason `content_filter`, or a refusal naming its "content
  management policy", LLMBar's own test) is an empty auxiliary input, as LLMBar takes it; any other failed
  auxiliary call fails the pair.
- Swap strategies: both orders' first judgments are always made (the synthesis needs both); when their
  winners are "1" and "2" (mapped back to the pair's outputs), each order asked for is decided by the
  synthesis prompt, given the two explanations as LLMBar gives them (`explanations`).

Every call goes through `call.complete` (cached, paid, retried, counted) and is counted once: the shared
ones (auxiliary generations, an order's first judgment made for the other) in the first outcome's
completions. An answer is cached (`call.remember`) when a judgment that used it reached a verdict. No
Prefect, no network of its own.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from judgebench_flows.core.completion import CallFailed, Completion, Sampling
from judgebench_flows.core.errors import UserError
from judgebench_flows.judges.llmbar.config import Messages, Stage, Strategy, load_strategy
from judgebench_flows.judges.parsing import strip_reasoning
from judgebench_flows.judges.procedure import ModelCall, Outcome, PlannedCall

if TYPE_CHECKING:
    from judgebench_flows.core.records import Pair

COMPARISON_STRATEGIES: tuple[str, ...] = (
    "Vanilla",
    "Vanilla_NoRules",
    "Vanilla_1shot",
    "Vanilla_2shot",
    "CoT",
    "Metrics",
    "Reference",
    "Metrics_Reference",
)
SWAP_STRATEGIES: tuple[str, ...] = ("Swap", "Swap_CoT")
LLMBAR_STRATEGIES: tuple[str, ...] = (*COMPARISON_STRATEGIES, *SWAP_STRATEGIES)
JUDGE_PREFIX = "llmbar:"
# LLMBar's test for an Azure refusal it records as an empty answer ("content management policy").
CONTENT_POLICY = "content management policy"
NO_VERDICT = "no verdict: none of LLMBar's patterns ({}) is in the answer"


def other(winner: str | None) -> str | None:
    """A winner seen from the other order ("1" <-> "2"): LLMBar's `reverse_label`."""
    return {"1": "2", "2": "1"}.get(winner or "")


def exchange_outputs(text: str) -> str:
    """An explanation as the other order would have written it: "Output (a)" and "Output (b)" exchanged,
    then "output (a)" and "output (b)", by the same placeholders LLMBar's `reverse_OutputAB` uses."""
    for word in ("Output", "output"):
        a, b = f"{word} (a)", f"{word} (b)"
        text = text.replace(a, f"**********{a}**********").replace(b, f"##########{b}##########")
        text = text.replace(f"**********{a}**********", b).replace(f"##########{b}##########", a)
    return text


def explanations(first: dict[int, str], winners: dict[int, str], order: int) -> dict[str, str]:
    """The synthesis prompt's `explanation_1` and `explanation_2` for `order`, given each order's first
    answer and its winner mapped to the pair ("1", "2": they disagree). In the order's own terms, Assistant
    (a) argues for Output (a): explanation_1 is the answer that chose the output shown as (a)."""
    by_winner = {winner: shown_order for shown_order, winner in winners.items()}
    as_seen = {
        winner: first[source] if source == order else exchange_outputs(first[source])
        for winner, source in by_winner.items()
    }
    if order == 0:
        return {"explanation_1": as_seen["1"], "explanation_2": as_seen["2"]}
    return {"explanation_1": as_seen["2"], "explanation_2": as_seen["1"]}


def decision_of(winner: str | None) -> str:
    """A winner of one order's own prompt as that order's decision (as shown)."""
    return {"1": "A>B", "2": "B>A"}.get(winner or "", "")


@dataclass
class _Asked:
    """One order's judgment so far: its last answer and winner (in the order's own terms), the calls it
    made itself (`own`: counted in its outcome) and every call its verdict rests on (`used`: cached when
    it reaches one)."""

    prompt: str
    text: str = ""
    winner: str | None = None
    failure: str | None = None
    patterns: str = ""  # the verdict patterns the answer was read with, named when none is found
    own: list[Completion] = field(default_factory=list)
    used: list[Completion] = field(default_factory=list)


@dataclass(frozen=True)
class LLMBarJudge:
    """One LLMBar strategy as a judge (see the module docstring); built by `llmbar_judge`."""

    strategy: Strategy
    model: str | None = None
    sampling_overrides: Sampling = field(default_factory=dict)
    api: str = "chat"
    follow_up: str | None = None

    @property
    def name(self) -> str:
        return f"{JUDGE_PREFIX}{self.strategy.name}"

    @property
    def swap(self) -> bool:
        return self.strategy.name in SWAP_STRATEGIES

    @property
    def auxiliaries(self) -> tuple[Stage, ...]:
        return () if self.swap else self.strategy.stages[:-1]

    @property
    def comparison(self) -> Stage:
        return self.strategy.stages[0] if self.swap else self.strategy.stages[-1]

    @property
    def notes(self) -> tuple[str, ...]:
        """What this judge does otherwise than LLMBar (no logit_bias for a model without its tokenizer)."""
        return self.strategy.notes

    @property
    def sampling(self) -> Sampling:
        """The comparison's request settings (the first turn's, when there is one)."""
        return self.sampling_of(self.comparison)

    def sampling_of(self, stage: Stage) -> Sampling:
        return {**stage.sampling, **self.sampling_overrides}

    @property
    def first_turn(self) -> Callable[[str, str, str], Messages] | None:
        """The comparison request, known ahead only for a strategy without auxiliary generations."""
        if self.auxiliaries:
            return None
        stage = self.comparison
        return lambda question, a, b: stage.render(input=question, output_1=a, output_2=b)

    def wants_follow_up(self, text: str) -> bool:
        return False

    def is_final(self, text: str) -> bool:
        """A comparison answer with a winner is the whole judgment, except for Swap, which may synthesize."""
        return not self.swap and not self.auxiliaries and self.comparison.winner(strip_reasoning(text)) is not None

    def fingerprint(self) -> str:
        strategy = self.strategy
        parts = [self.name, f"config={strategy.folder}", f"files={strategy.digest}", f"tokens={strategy.encoding}"]
        if self.sampling_overrides:
            parts.append(json.dumps(self.sampling_overrides, sort_keys=True))
        return "|".join(parts)

    def planned_calls(self, pair: Pair, orders: tuple[int, ...]) -> list[PlannedCall]:
        """Every call a pair may cost at most: its auxiliary generations, each comparison asked (both for
        Swap) carrying the auxiliary answers at their caps, and for Swap each order's synthesis carrying
        two explanations at the comparison's cap (it runs only when the orders disagree)."""
        blank = {f"auxiliary_input_{i}": "" for i, _ in enumerate(self.auxiliaries)}
        calls = [PlannedCall(stage.render(input=pair.question), self.sampling_of(stage)) for stage in self.auxiliaries]
        aux_tokens = sum(_cap(self.sampling_of(stage)) for stage in self.auxiliaries)
        for order in sorted({*orders, 0, 1}) if self.swap else orders:
            shown = _shown(pair, order)
            messages = self.comparison.render(input=pair.question, **blank, output_1=shown[0], output_2=shown[1])
            calls.append(PlannedCall(messages, self.sampling, aux_tokens))
        if self.swap:
            synthesis = self.strategy.stages[1]
            explained = {"explanation_1": "", "explanation_2": ""}
            for order in orders:
                shown = _shown(pair, order)
                messages = synthesis.render(input=pair.question, **explained, output_1=shown[0], output_2=shown[1])
                calls.append(PlannedCall(messages, self.sampling_of(synthesis), 2 * _cap(self.sampling)))
        return calls

    async def judge(self, pair: Pair, orders: tuple[int, ...], call: ModelCall) -> list[Outcome]:
        started = time.perf_counter()
        shared: list[Completion] = []
        values, failures = await self._auxiliary_inputs(pair.question, call, shared)
        if failures:
            return _all_failed(orders, failures, shared, time.perf_counter() - started)
        asked = sorted({*orders, 0, 1}) if self.swap else list(orders)
        answers = await asyncio.gather(*(self._ask(self.comparison, pair, order, values, call) for order in asked))
        judged = dict(zip(asked, answers, strict=True))
        for answer in answers:
            answer.used[:0] = shared
        if self.swap:
            judged.update(await self._synthesize(pair, orders, judged, values, call))
        outcomes = [self._outcome(judged[order], started) for order in orders]
        # Each call counted once: the shared ones, and a first judgment no order asked for, in the first outcome.
        outcomes[0].completions[:0] = [
            *shared,
            *(c for order in asked if order not in orders for c in judged[order].own),
        ]
        verdicts = [judged[order] for order, outcome in zip(orders, outcomes, strict=True) if outcome.status == "ok"]
        remembered = {id(c): c for answer in verdicts for c in answer.used}
        if remembered:
            await call.remember(list(remembered.values()))
        return outcomes

    async def _auxiliary_inputs(
        self, question: str, call: ModelCall, shared: list[Completion]
    ) -> tuple[dict[str, str], list[CallFailed]]:
        """`input` and each `auxiliary_input_<i>`, asked concurrently (each depends on the question only),
        and the auxiliary calls that failed (then the pair fails)."""
        answers = await asyncio.gather(
            *(self._auxiliary(stage, question, call) for stage in self.auxiliaries), return_exceptions=True
        )
        values = {"input": question}
        failures: list[CallFailed] = []
        for index, answer in enumerate(answers):
            if isinstance(answer, Completion):
                shared.append(answer)
                text = "" if answer.finish_reason == "content_filter" else answer.text
                values[f"auxiliary_input_{index}"] = strip_reasoning(text).strip()
            elif isinstance(answer, CallFailed) and CONTENT_POLICY in str(answer):
                # The refusal is the call's answer: counted as a call (no tokens, no key: never cached).
                shared.append(Completion("", finish_reason="content_filter"))
                values[f"auxiliary_input_{index}"] = ""
            elif isinstance(answer, CallFailed):
                failures.append(answer)
            else:
                raise answer
        return values, failures

    async def _auxiliary(self, stage: Stage, question: str, call: ModelCall) -> Completion:
        return await call.complete(stage.render(input=question), self.sampling_of(stage))

    async def _ask(self, stage: Stage, pair: Pair, order: int, values: dict[str, str], call: ModelCall) -> _Asked:
        """One order's request of `stage`: its answer and winner (in this order's own terms)."""
        shown = _shown(pair, order)
        messages = stage.render(**values, output_1=shown[0], output_2=shown[1])
        asked = _Asked(prompt=next((m["content"] for m in reversed(messages) if m["role"] == "user"), ""))
        try:
            completion = await call.complete(messages, self.sampling_of(stage))
        except CallFailed as exc:
            asked.failure = str(exc)
            return asked
        asked.own.append(completion)
        asked.used.append(completion)
        asked.text = strip_reasoning(completion.text).strip()
        asked.winner = stage.winner(asked.text)
        asked.patterns = ", ".join(pattern.pattern for _, pattern in stage.patterns or ())
        return asked

    async def _synthesize(
        self, pair: Pair, orders: tuple[int, ...], firsts: dict[int, _Asked], values: dict[str, str], call: ModelCall
    ) -> dict[int, _Asked]:
        """When the first judgments disagree ("1" and "2" mapped to the pair), each order asked for is
        decided by the synthesis prompt; otherwise by its first judgment (no change)."""
        winners = {0: firsts[0].winner or "", 1: other(firsts[1].winner) or ""}
        if {winners[0], winners[1]} != {"1", "2"}:
            return {}
        stage = self.strategy.stages[1]
        texts = {order: firsts[order].text for order in (0, 1)}
        answers = await asyncio.gather(
            *(
                self._ask(stage, pair, order, {**values, **explanations(texts, winners, order)}, call)
                for order in orders
            )
        )
        for order, answer in zip(orders, answers, strict=True):
            answer.prompt = firsts[order].prompt  # the record's prompt is the first turn's, as for every judge
            answer.own[:0] = firsts[order].own
            answer.used[:0] = [*firsts[0].used, *firsts[1].used]
        return dict(zip(orders, answers, strict=True))

    def _outcome(self, asked: _Asked, started: float) -> Outcome:
        elapsed = time.perf_counter() - started
        if asked.failure is not None:
            return Outcome("failed", "", asked.prompt, asked.text, asked.failure, list(asked.own), elapsed)
        decision = decision_of(asked.winner)
        if decision:
            return Outcome("ok", decision, asked.prompt, asked.text, None, list(asked.own), elapsed)
        error = NO_VERDICT.format(asked.patterns)
        return Outcome("invalid", "", asked.prompt, asked.text, error, list(asked.own), elapsed)


def _shown(pair: Pair, order: int) -> tuple[str, str]:
    """The responses as `order` shows them: (Output (a), Output (b))."""
    return (pair.response_A, pair.response_B) if order == 0 else (pair.response_B, pair.response_A)


def _cap(sampling: Sampling) -> int:
    """The most tokens an answer of these settings has (its max_tokens; 0 when it sets none)."""
    cap = sampling.get("max_tokens") or sampling.get("max_completion_tokens") or 0
    return int(cap) if isinstance(cap, int | float) else 0


def _all_failed(
    orders: tuple[int, ...], failures: list[CallFailed], shared: list[Completion], elapsed: float
) -> list[Outcome]:
    """Every order failed by a failed auxiliary call; the answered ones and the failed ones counted once
    (in the first outcome)."""
    reason = str(failures[0])
    return [
        Outcome(
            "failed",
            "",
            "",
            "",
            reason,
            list(shared) if i == 0 else [],
            elapsed,
            failed_calls=len(failures) if i == 0 else 0,
        )
        for i, _ in enumerate(orders)
    ]


def llmbar_judge(
    strategy: str, evaluators_dir: str | Path | None, model: str | None, sampling_overrides: Sampling | None = None
) -> LLMBarJudge:
    """LLMBar's `strategy` for `model`, read from a checkout's `LLMEvaluator/evaluators` folder."""
    if strategy not in LLMBAR_STRATEGIES:
        raise UserError(
            f"unknown LLMBar strategy '{strategy}' (valid: {', '.join(JUDGE_PREFIX + s for s in LLMBAR_STRATEGIES)})"
        )
    if evaluators_dir is None:
        raise UserError(f"--judge-type {JUDGE_PREFIX}{strategy} needs LLMBar's LLMEvaluator/evaluators folder")
    return LLMBarJudge(load_strategy(evaluators_dir, strategy, model), model, dict(sampling_overrides or {}))

"""Reward models as judges: each response scored alone, the higher score wins, as JudgeBench decides.

JudgeBench's reward judges (InternLM2-Reward, GRM, Skywork-Reward) score the conversation
`user = question, assistant = response` for each response and decide `A>B` if score(A) > score(B), else
`B>A`: a tie goes to `B>A`, which is part of the published numbers, so it is kept. Its JSONL records
`judgment.scores = [score of the first shown response, score of the second]`.

A response's score does not depend on the order it is shown in, so a pair's two orders share the same two
scoring calls: a both-orders run costs two calls per pair, not four (`RewardJudge.judge`, the `Judge`
protocol, decides a pair's orders together). Each scoring call is an ordinary call
of the run's endpoint caller (api "pooling": vLLM's Pooling API), so it has the same retries, limits, call
cache and resume as a chat call; its answer carries the score (`Completion.score`).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from judgebench_flows.judges.procedure import CallFailed, Complete, Completion, ModelCall, Outcome, Sampling

if TYPE_CHECKING:
    from judgebench_flows.core.records import Pair

REWARD_JUDGE_TYPE = "reward_model"
Messages = list[dict[str, str]]


def conversation(question: str, response: str) -> Messages:
    """What a reward model scores: the question as the user's turn, the response as the assistant's."""
    return [{"role": "user", "content": question}, {"role": "assistant", "content": response}]


def shown(answer: Completion) -> str:
    """A scoring answer as an invalid judgment keeps it: its score (not a finite one), else its text."""
    return repr(answer.score) if answer.score is not None else answer.text


def decide(score_first: float, score_second: float) -> str:
    """JudgeBench's rule: the first shown response wins only with a strictly higher score."""
    return "A>B" if score_first > score_second else "B>A"


@dataclass(frozen=True)
class RewardJudge:
    """The reward-model judge. `format` gives the conversation of the first shown response.

    `first_turn` is None: a pair's scoring calls are shared by its orders, so the flow neither prefetches
    them from the call cache in one query nor makes them ahead; each is looked up when it is made."""

    model: str | None = None
    name: str = REWARD_JUDGE_TYPE
    api: str = "pooling"
    # Raw rewards, as JudgeBench compares them: vLLM's Pooling API applies the head's activation (a sigmoid)
    # unless told not to (`use_activation`, vLLM >= 0.11.1; `calls.other_apis.RawScoreCheck` stops a run
    # on a server that ignores it). The transformers backend always gives raw scores.
    sampling: Sampling = field(default_factory=lambda: {"use_activation": False})
    follow_up: str | None = None
    first_turn = None  # a class attribute, not a field (see the docstring)

    @classmethod
    def for_model(cls, model: str | None) -> RewardJudge:
        return cls(model=model)

    def local(self, model: str) -> RewardJudge:
        """The same judge scoring with the model loaded here (transformers), loaded now so a model that
        cannot load stops the run before anything else happens."""
        import dataclasses
        import os

        from judgebench_flows.calls.local_reward import local_reward_model, require_torch

        require_torch()
        local_reward_model(model, os.environ.get("JUDGEBENCH_REWARD_DEVICE") or None)
        return dataclasses.replace(self, model=model, api="transformers", sampling={})  # raw scores always

    def format(self, question: str, answer_A: str, answer_B: str) -> Messages:
        return conversation(question, answer_A)

    def parse(self, text: str) -> str:
        """A score alone is no verdict: a scoring answer is never cached before its pair is decided."""
        return ""

    def wants_follow_up(self, text: str) -> bool:
        return False

    def is_final(self, text: str) -> bool:
        return False  # a score alone is no verdict

    def fingerprint(self) -> str:
        """What decides the verdicts (shards judged under another fingerprint are not reused): shards judged
        before raw scores were asked for hold a Pooling API's activated ones."""
        parts = [self.name, self.api, "user=question,assistant=response", "A>B iff score(A)>score(B)"]
        return "|".join(parts + ([json.dumps(self.sampling, sort_keys=True)] if self.sampling else []))

    async def judge(self, pair: Pair, orders: tuple[int, ...], call: ModelCall) -> list[Outcome]:
        """Every order from the same two scores; the scoring answers are cached only when the pair was
        decided in every order."""
        results = await judge_by_scores(self, pair.question, pair.response_A, pair.response_B, orders, call.complete)
        outcomes = [outcome for outcome, _ in results]
        if all(outcome.status == "ok" for outcome in outcomes):
            await call.remember([c for outcome in outcomes for c in outcome.completions])
        return outcomes


async def judge_by_scores(
    judge: RewardJudge,
    question: str,
    response_A: str,
    response_B: str,
    orders: tuple[int, ...],
    complete: Complete,
) -> list[tuple[Outcome, list[float] | None]]:
    """Both responses scored once (concurrently), then every order decided from the same two scores.

    Returns, per order, its outcome and `[score of the first shown, score of the second]`. The calls are
    attributed to the first order only, so the run's call counts are the calls really made. A failed
    call fails every order of the pair (its retries are the caller's); a score that is not a number
    makes them invalid, with the raw answer kept.
    """
    started = time.perf_counter()
    texts = {response_A: None, response_B: None}  # identical responses: one call

    async def score(response: str) -> Completion:
        return await complete(conversation(question, response), judge.sampling)

    calls = dict(zip(texts, await asyncio.gather(*(score(r) for r in texts), return_exceptions=True), strict=False))
    scored = {text: c for text, c in calls.items() if isinstance(c, Completion)}
    completions = list(scored.values())
    failure = next((c for c in calls.values() if isinstance(c, BaseException)), None)
    results: list[tuple[Outcome, list[float] | None]] = []
    for i, order in enumerate(orders):
        first, second = (response_A, response_B) if order == 0 else (response_B, response_A)
        mine = completions if i == 0 else []
        elapsed = time.perf_counter() - started
        if failure is not None:
            if not isinstance(failure, CallFailed):
                raise failure
            results.append((Outcome("failed", "", question, "", str(failure), mine, elapsed), None))
            continue
        answers = [scored[first], scored[second]]
        pair_scores = [a.score for a in answers if a.score is not None and math.isfinite(a.score)]
        if len(pair_scores) < 2:
            raw = [shown(a) for a in answers]
            error = f"a scoring call answered no number: {json.dumps(raw)[:200]}"
            results.append((Outcome("invalid", "", question, json.dumps(raw), error, mine, elapsed), None))
            continue
        results.append(
            (
                Outcome(
                    "ok", decide(*pair_scores), question, json.dumps(pair_scores), None, mine, elapsed, pair_scores
                ),
                pair_scores,
            )
        )
    return results

"""Replay a judgment set through a test server: a judge that gives each judgment a decision we chose.

JudgeBench's own outputs (its judges' recorded verdicts) are not in ../shared/judgebench, so the replays
use a synthetic, seeded judgment set with the official score: for claude-3-haiku on the Claude pairs,
87 of 270 pairs correct (32.22), for o1-mini on the GPT-4o pairs 230 of 350 (65.71). Every pattern the
metric distinguishes occurs (both right, right and tie, inconsistent, both wrong, ties), and some
judgments answer without a verdict first, so arena_hard's follow-up turn is sent. `official_score`
computes the score from the set alone, as JudgeBench's `compute_final_metrics` does, independently of
the product's metric code.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from judgebench_flows.judges.builtin import ARENA_HARD_FOLLOW_UP

FLIP = {"A>B": "B>A", "B>A": "A>B"}
# (order 0, order 1) decisions in the pair's frame, L: the label, F: the other side, T: a tie.
CORRECT_PATTERNS = (("L", "L"), ("L", "L"), ("L", "T"), ("T", "L"))
WRONG_PATTERNS = (("F", "F"), ("L", "F"), ("F", "L"), ("T", "T"), ("F", "T"), ("T", "F"))
SHOWN_VERDICT = {"A>B": "[[A>B]]", "B>A": "[[B>A]]", "A=B": "[[A=B]]"}


def judgment_set(pairs: list[dict], correct: int, seed: int = 27) -> dict[str, tuple[str | None, str | None]]:
    """pair_id -> (order 0, order 1) decisions in the pair's frame, with exactly `correct` pairs right
    (a pair whose two responses are the same text gets no verdict: its orders look alike)."""
    rng = random.Random(seed)
    ids = [p["pair_id"] for p in pairs if p["response_A"] != p["response_B"]]
    right = set(rng.sample(ids, correct))
    decisions: dict[str, tuple[str | None, str | None]] = {}
    for pair in pairs:
        label = pair["label"]
        if pair["response_A"] == pair["response_B"]:  # no judge can tell the orders apart: no verdict
            decisions[pair["pair_id"]] = (None, None)
            continue
        patterns = CORRECT_PATTERNS if pair["pair_id"] in right else WRONG_PATTERNS
        pattern = rng.choice(patterns)
        first, second = ({"L": label, "F": FLIP[label], "T": "A=B"}[p] for p in pattern)
        decisions[pair["pair_id"]] = (first, second)
    return decisions


def official_score(pairs: list[dict], decisions: dict[str, tuple[str | None, str | None]]) -> float:
    """JudgeBench's metric over the set itself: +1 per order agreeing with the label, -1 per order against
    it; a pair counts when the sum is positive. Percent, to two places as JudgeBench prints it."""
    correct = 0
    for pair in pairs:
        label = pair["label"]
        total = sum(1 if d == label else -1 if d == FLIP[label] else 0 for d in decisions[pair["pair_id"]])
        correct += total > 0
    return round(100 * correct / len(pairs), 2)


def replay_responder(
    pairs: list[dict], decisions: dict[str, tuple[str | None, str | None]], follow_up_every: int = 9
) -> Callable[[dict], str]:
    """Answers each judgment (chat or Messages body) with its decision in arena_hard's format; every
    `follow_up_every`-th pair's order 0 first answers without a verdict, so the judge asks again."""
    by_index = {p["pair_id"]: i for i, p in enumerate(pairs)}

    def respond(body: dict) -> str:
        messages = body.get("messages") or []
        text = "\n".join(str(m.get("content")) for m in messages if m.get("role") == "user")
        for pair in pairs:
            a, b = pair["response_A"], pair["response_B"]
            ia, ib = text.find(a), text.find(b)
            if ia < 0 or ib < 0 or a == b:
                continue
            order = 0 if ia < ib else 1
            decision = decisions[pair["pair_id"]][order]
            if decision is None:
                break
            shown = decision if order == 0 else FLIP.get(decision, decision)
            asked_again = messages[-1].get("content") == ARENA_HARD_FOLLOW_UP
            if order == 0 and by_index[pair["pair_id"]] % follow_up_every == 0 and not asked_again:
                return "Both answers have merit; I need to weigh them further."
            return f"After comparing both answers, my final verdict is {SHOWN_VERDICT[shown]}."
        return "I cannot tell."

    return respond

"""Verdict parsers, one table per judge type: what real models write around a verdict, and what is not one.

A parser must never guess: a missing, conflicting or malformed verdict gives "" (an invalid judgment),
because a wrong decision silently moves the accuracy while an invalid one is counted and visible.
"""

from __future__ import annotations

import pytest

from judgebench_flows.core.records import CATEGORIES, category_of, flip
from judgebench_flows.judges.parsing import (
    parse_arena_hard,
    parse_auto_j,
    parse_prometheus_2,
    parse_skywork_critic,
    parse_vanilla,
    strip_reasoning,
)

# Inputs every parser must read as "no verdict".
NOTHING = ["", "   \n\t", "I cannot decide between them.", "<think>", "</think>"]

ARENA_HARD = [
    ("My final verdict is [[A>>B]]", "A>B"),
    ("My final verdict is [[A>B]]", "A>B"),
    ("My final verdict is [[B>>A]]", "B>A"),
    ("My final verdict is [[B>A]]", "B>A"),
    ("My final verdict is tie: [[A=B]]", "A=B"),
    # Strength does not matter: [[A>>B]] and [[A>B]] are the same decision, so they agree.
    ("[[A>>B]] ... on reflection [[A>B]]", "A>B"),
    ("[[A>B]] ... on reflection [[B>A]]", ""),
    ("[[A>B]] or maybe [[A=B]]", ""),
    ("Assistant A is better.", ""),
    ("[[A>>>B]]", ""),
    ("[[C>D]]", ""),
    ("[[]]", ""),
    ("[ [A>B] ]", ""),
    # The label inside the scratchpad is not the verdict; the one after </think> is.
    ("<think>Maybe [[B>>A]]? Let me check.</think>My final verdict is [[A>B]].", "A>B"),
    ("<think>[[A>B]]</think>\nNo label here.", ""),
    ("<THINK>[[B>A]]</THINK> [[A>B]]", "A>B"),
    ("<think>[[A>B]] is what I will answer", ""),
    ("the server cut the opening tag [[B>A]]</think>My final verdict is [[A>B]]", "A>B"),
    ("**My final verdict is [[A>B]]**", "A>B"),
    ("My final verdict is **[[B>>A]]**.", "B>A"),
    ("My final verdict is [[A>B]].\n\nLet me know if you need anything else!", "A>B"),
    # The label is case-sensitive, as in Arena-Hard's own regex.
    ("[[a>b]]", ""),
]

VANILLA = [
    ("Output (a)", "A>B"),
    ("Output (b)", "B>A"),
    ("**Output (a)**", "A>B"),
    ("Output (b).", "B>A"),
    ("Output (a)\n\nOutput (a) is correct because it computes 42.", "A>B"),
    ("OUTPUT (A)", "A>B"),
    ("output (b)", "B>A"),
    ("Output(a)", "A>B"),
    ("Output ( b )", "B>A"),
    ("Output (a) or Output (b)", ""),
    ("Output (a) is wrong, so Output (b)", ""),
    ("Output (c)", ""),
    ("Output a", ""),
    ("The first output.", ""),
    ("<think>Output (b) looks right... no.</think>Output (a)", "A>B"),
    ("<think>Output (a)", ""),
]

AUTO_J = [
    ("Response 1 is correct. So, the final decision is Response 1.", "A>B"),
    ("So, the final decision is Response 2", "B>A"),
    ("Both are equally wrong. So, the final decision is Tie.", "A=B"),
    ("So, the final decision is **Response 2**.", "B>A"),
    ("**So, the final decision is Response 1**", "A>B"),
    ("So, the final decision is: Response 2", "B>A"),
    ('So, the final decision is "Response 1".', "A>B"),
    ('So, the final decision is: "Response 2".', "B>A"),
    ("SO, THE FINAL DECISION IS RESPONSE 2", "B>A"),
    ("so, the final decision is response 1", "A>B"),
    ("so, the final decision is tie", "A=B"),
    ("So, the final decision is Response 1. I hope this comparison helps.", "A>B"),
    ("So, the final decision is Response 1. ... So, the final decision is Response 1.", "A>B"),
    # Two statements that disagree are ambiguous, not "the last one wins".
    ("So, the final decision is Response 1. Actually, the final decision is Response 2.", ""),
    # Repeating the instruction's own format is not a verdict, and does not conflict with the real one.
    ("So, the final decision is Response 1 / Response 2 / Tie", ""),
    (
        'I must begin with "So, the final decision is Response 1 / Response 2 / Tie". So, the final decision is Response 2.',
        "B>A",
    ),
    ("Response 1 is better.", ""),
    ("So, the final decision is unclear.", ""),
    ("<think>So, the final decision is Response 2.</think>So, the final decision is Response 1.", "A>B"),
    ("<think>So, the final decision is Response 2.", ""),
]

PROMETHEUS_2 = [
    ("Response A is correct. [RESULT] A", "A>B"),
    ("Response B is correct. [RESULT] B", "B>A"),
    ("feedback [RESULT: A]", "A>B"),
    ("feedback [RESULT: B]", "B>A"),
    ("feedback [Response B]", "B>A"),
    ("feedback [Result] Response A", "A>B"),
    ("feedback [Result: B]", "B>A"),
    ("Result: A", "A>B"),
    ("Some feedback.\nResult: B", "B>A"),
    ("Some feedback.\nResult B\n", "B>A"),
    ("feedback [RESULT] B.", ""),  # the letter must be followed by a bracket, space or the end
    ("feedback [RESULT] A\n", "A>B"),
    ("feedback [RESULT] B and that is final", "B>A"),
    ("feedback [result] a", "A>B"),
    ("feedback [Result] b", "B>A"),
    ("feedback **[RESULT]** **B**", "B>A"),
    ("feedback [RESULT] AB", ""),
    ("feedback [RESULT] Apple", ""),
    ("feedback [RESULT] (A or B)", ""),
    ("The Result: A", ""),  # "Result:" counts only at the start of a line
    ("Response A is better.", ""),
    # Conflicting results are ambiguous rather than "the first one wins".
    ("feedback [RESULT] A\n[RESULT] B", ""),
    ("[Response A] has an error; [Response B] is right. [RESULT] B", ""),
    ("feedback [RESULT] B ... to repeat: [RESULT] B", "B>A"),
    ("<think>[RESULT] B</think>feedback [RESULT] A", "A>B"),
    ("<think>feedback [RESULT] A", ""),
]

SKYWORK_CRITIC = [
    ("[[A]]", "A>B"),
    ("[[B]]", "B>A"),
    ("A", "A>B"),
    ("B", "B>A"),
    ("B.", "B>A"),
    ('"A"', "A>B"),
    ("  [[ B ]]  ", "B>A"),
    ("**[[A]]**", "A>B"),
    ("**B**", "B>A"),
    ("[[A]]\n\nAssistant A answers the question correctly.", "A>B"),
    ("[[A]] [[B]]", ""),
    ('"[[A]]" if assistant A is better, "[[B]]" if assistant B is better', ""),
    ("[[A]] ... [[A]]", "A>B"),
    ("Assistant A is better", ""),  # JudgeBench's `"A" in output` would say A; a bare letter only counts alone
    ("AB", ""),
    ("[[C]]", ""),
    ("[[a]]", ""),  # labels are case-sensitive, as the prompt asks for "[[A]]" / "[[B]]"
    ("<think>[[B]]</think>[[A]]", "A>B"),
    ("<think>[[B]]</think>A", "A>B"),
    ("<think>[[A]]", ""),
]


def _table(parser, rows):
    return [
        pytest.param(parser, text, expected, id=f"{parser.__name__}-{i}") for i, (text, expected) in enumerate(rows)
    ]


ALL_PARSERS = [parse_arena_hard, parse_vanilla, parse_auto_j, parse_prometheus_2, parse_skywork_critic]


@pytest.mark.parametrize(
    ("parser", "text", "expected"),
    _table(parse_arena_hard, ARENA_HARD)
    + _table(parse_vanilla, VANILLA)
    + _table(parse_auto_j, AUTO_J)
    + _table(parse_prometheus_2, PROMETHEUS_2)
    + _table(parse_skywork_critic, SKYWORK_CRITIC),
)
def test_parser_table(parser, text: str, expected: str) -> None:
    assert parser(text) == expected


@pytest.mark.parametrize("parser", ALL_PARSERS, ids=lambda p: p.__name__)
@pytest.mark.parametrize("text", NOTHING)
def test_no_verdict_gives_empty_decision(parser, text: str) -> None:
    assert parser(text) == ""


@pytest.mark.parametrize("parser", ALL_PARSERS, ids=lambda p: p.__name__)
def test_none_is_read_as_no_answer(parser) -> None:
    """An endpoint can return `content: null`; that is no verdict, not a crash."""
    assert parser(None) == ""  # type: ignore[arg-type]


@pytest.mark.parametrize("parser", ALL_PARSERS, ids=lambda p: p.__name__)
def test_parsers_only_return_known_decisions(parser) -> None:
    for rows in (ARENA_HARD, VANILLA, AUTO_J, PROMETHEUS_2, SKYWORK_CRITIC):
        for text, _ in rows:
            assert parser(text) in ("A>B", "B>A", "A=B", "")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>x</think>answer", "answer"),
        ("<think>a</think>b<think>c</think>d", "bd"),
        ("<think>\nmulti\nline\n</think>\nanswer", "\nanswer"),
        ("reasoning with no opening tag</think>answer", "answer"),
        ("answer<think>never closed", "answer"),
        ("no reasoning at all", "no reasoning at all"),
        ("", ""),
    ],
)
def test_strip_reasoning(text: str, expected: str) -> None:
    assert strip_reasoning(text) == expected


@pytest.mark.parametrize(("decision", "flipped"), [("A>B", "B>A"), ("B>A", "A>B"), ("A=B", "A=B"), ("", "")])
def test_flip(decision: str, flipped: str) -> None:
    assert flip(decision) == flipped
    assert flip(flip(decision)) == decision


@pytest.mark.parametrize(
    ("source", "category"),
    [
        ("mmlu-pro-law", "mmlu-pro"),
        ("mmlu-pro-computer science", "mmlu-pro"),
        ("mmlu-pro", "mmlu-pro"),
        ("livebench-reasoning", "livebench-reasoning"),
        ("livebench-math", "livebench-math"),
        ("livecodebench", "livecodebench"),
        ("livecodebench-v2", "livecodebench"),
        ("mmlu-professional", "mmlu-professional"),  # a prefix must end at a dash, not mid-word
        ("livebench", "livebench"),
        ("my-own-source", "my-own-source"),
    ],
)
def test_category_of(source: str, category: str) -> None:
    assert category_of(source) == category


def test_categories_cover_the_real_sources(gpt4o_pairs) -> None:
    assert {category_of(p["source"]) for p in gpt4o_pairs} == set(CATEGORIES)

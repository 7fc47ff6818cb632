"""Turn a judge's raw text into a decision: "A>B", "B>A", "A=B", or "" when there is no usable verdict.

Each parser follows its judge's reference implementation, made robust to what real models add around the
verdict: `<think>` blocks (a label inside the model's scratchpad is not its verdict), markdown emphasis,
and trailing text. Ambiguity is never resolved by guessing: conflicting labels give "".
"""

from __future__ import annotations

import re

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_UNCLOSED_THINK = re.compile(r"<think>.*\Z", re.DOTALL | re.IGNORECASE)
_EMPHASIS = re.compile(r"[*_`]+")


def strip_reasoning(text: str) -> str:
    """Drop <think>...</think> scratchpads; an unclosed <think> means the answer never came."""
    text = _THINK_BLOCK.sub("", text or "")
    text = re.sub(r"\A.*?</think>", "", text, flags=re.DOTALL | re.IGNORECASE)  # opening tag cut off by the server
    return _UNCLOSED_THINK.sub("", text)


def _plain(text: str) -> str:
    return _EMPHASIS.sub("", strip_reasoning(text))


_ARENA_LABEL = re.compile(r"\[\[([AB<>=]+)\]\]")
_ARENA_DECISIONS = {"A>>B": "A>B", "A>B": "A>B", "A=B": "A=B", "B>A": "B>A", "B>>A": "B>A"}


def arena_hard_labels(text: str) -> list[str]:
    """All [[...]] verdict labels in the text, outside reasoning blocks."""
    return [m for m in _ARENA_LABEL.findall(strip_reasoning(text)) if m]


def parse_arena_hard(text: str) -> str:
    """Arena-Hard-Auto: every label found must agree (A>>B counts as A>B); none or a conflict gives ""."""
    labels = {_ARENA_DECISIONS.get(label, "?") for label in arena_hard_labels(text)}
    if len(labels) != 1:
        return ""
    (label,) = labels
    return "" if label == "?" else label


_VANILLA = re.compile(r"output\s*\(\s*([ab])\s*\)", re.IGNORECASE)


def parse_vanilla(text: str) -> str:
    """`Output (a)` / `Output (b)`: exactly one of the two must be named."""
    named = {m.lower() for m in _VANILLA.findall(_plain(text))}
    if named == {"a"}:
        return "A>B"
    if named == {"b"}:
        return "B>A"
    return ""


# Quotes and a colon may sit anywhere between "is" and the label; a label followed by "/" is the
# instruction's own "Response 1 / Response 2 / Tie" repeated back, not a verdict.
_AUTO_J = re.compile(r"final decision is[\s:\"'“”]*(response\s*1|response\s*2|tie)(?!\s*/)", re.IGNORECASE)
_AUTO_J_DECISIONS = {"response 1": "A>B", "response 2": "B>A", "tie": "A=B"}


def parse_auto_j(text: str) -> str:
    """Auto-J: "final decision is Response 1 / Response 2 / Tie"; every such statement must agree.

    Auto-J's reference reads only the last statement; two that disagree are ambiguous, so they give "".
    """
    decisions = {_AUTO_J_DECISIONS[re.sub(r"\s+", " ", m.lower())] for m in _AUTO_J.findall(_plain(text))}
    return decisions.pop() if len(decisions) == 1 else ""


# Prometheus 2's own relative-grading pattern (prometheus-eval), as JudgeBench uses it.
_PROMETHEUS = re.compile(
    r"""
    (?:
        \[RESULT\]|\[RESULT:\s*|
        \[Response\s+|
        \[Result\](?:\s+Response)?|
        \[Result:\s*|
        (?:^|\n)Result:?\s*
    )
    \s*
    (A|B)
    (?:\]|\s|$)
    """,
    re.IGNORECASE | re.VERBOSE | re.MULTILINE,
)


def parse_prometheus_2(text: str) -> str:
    """`[RESULT] A` and its variants: the letter must be followed by a bracket, space or the end.

    The reference takes the first match; we require every match to agree, so "[Response A] is wrong ...
    [RESULT] B" or two different results give "" rather than whichever came first.
    """
    letters = {letter.upper() for letter in _PROMETHEUS.findall(_plain(text))}
    if len(letters) != 1:
        return ""
    return "A>B" if letters == {"A"} else "B>A"


_SKYWORK = re.compile(r"\[\[\s*([AB])\s*\]\]")


def parse_skywork_critic(text: str) -> str:
    """`[[A]]` / `[[B]]` (or the bare letter alone); every label found must agree."""
    plain = _plain(text).strip()
    letters = set(_SKYWORK.findall(plain))
    if not letters and plain.strip(" .\"'") in {"A", "B"}:
        letters = {plain.strip(" .\"'")}
    if len(letters) != 1:
        return ""
    return "A>B" if letters == {"A"} else "B>A"


def judge_lm_scores(text: str) -> tuple[float, float] | None:
    """JudgeLM's score line, read exactly as its reference (and JudgeBench) reads it: the first line, commas
    turned into spaces, split on single spaces, and it must give exactly two numbers ("8 7", "8,7")."""
    parts = (text or "").split("\n")[0].replace(",", " ").split(" ")
    if len(parts) != 2:
        return None
    try:
        return float(parts[0]), float(parts[1])
    except ValueError:
        return None


def parse_judge_lm(text: str) -> str:
    """JudgeLM: the higher score wins, equal scores are a tie (A=B).

    JudgeBench turns an unreadable score line into [-1, -1], i.e. a tie; here it is invalid instead, which
    the metric counts exactly as a tie (0 for that order) while the run shows it.
    """
    scores = judge_lm_scores(text)
    if scores is None:
        return ""
    first, second = scores
    if first > second:
        return "A>B"
    if first < second:
        return "B>A"
    return "A=B"


def parse_panda_lm(text: str) -> str:
    """PandaLM: the first line of the answer is "1", "2" or "Tie" (then "### Reason: ...").

    Special-token strings are removed first (PandaLM's reference does; JudgeBench's copy discards the
    result). JudgeBench reads any other first line as a tie; here it is invalid, which the metric counts
    the same (0 for that order) while the run shows it.
    """
    first = PANDALM_TOKENS.sub("", (text or "").strip()).strip().split("\n")[0]
    if first == "1":
        return "A>B"
    if first == "2":
        return "B>A"
    if first.lower() == "tie":
        return "A=B"
    return ""


PANDALM_TOKENS = re.compile(
    r"<unk>|<pad>|<s>|</s>|\[PAD\]|<\|endoftext\|>|\[UNK\]|\[CLS\]|\[MASK\]|<\|startofpiece\|>|<\|endofpiece\|>|\[gMASK\]|\[sMASK\]"
)


def parse_compass_judger(text: str) -> str:
    """CompassJudger: Arena-Hard's [[A>>B]] .. [[B>>A]] labels, every one found agreeing; no second turn.

    JudgeBench reads the raw answer; a label inside a <think> block is not the verdict, so those are
    dropped first (as for every other judge here).
    """
    return parse_arena_hard(text)

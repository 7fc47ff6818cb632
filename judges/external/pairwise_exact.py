"""Example pairwise external judge for JudgeBench pairs: which response ends with the reference answer?

The pairwise form is the row form with a decision in place of the score:

    def evaluate(row: pd.Series, config: dict) -> tuple[str, str]:
        ...
        return "A ends with the reference answer, B does not", "A>B"

where the decision is "A>B", "B>A", "A=B" or "" (no usable verdict), the same values an LLM judge gives
(`judges.external.scoring.check_decision` holds a result to that). The row carries JudgeBench's
`question`, `response_A` and `response_B`, and the reference answer in the column named by the config's
`reference_column` (default "ground_truth"); JudgeBench itself ships no reference, so it is joined in.

"Ends with" ignores case, surrounding whitespace and a final period, and needs a word boundary before the
reference, so "14" does not end with "4". Both ending with it is a tie (A=B); neither is no verdict ("").
Self-contained on purpose (only pandas), so it can be copied as a starting point.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd


def _missing(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _normalize(value: Any) -> str:
    return str(value).strip().rstrip(".").strip().casefold()


def ends_with_answer(response: Any, reference: str) -> bool:
    if _missing(response):
        return False
    text = _normalize(response)
    if not reference or not text.endswith(reference):
        return False
    before = text[: len(text) - len(reference)]
    return not before or not (before[-1].isalnum() and reference[0].isalnum())


def evaluate(row: pd.Series, config: dict) -> tuple[str, str]:
    raw_reference = row.get(config.get("reference_column") or "ground_truth")
    if _missing(raw_reference) or not _normalize(raw_reference):
        return "no reference answer to compare with", ""
    reference = _normalize(raw_reference)
    a_correct = ends_with_answer(row.get("response_A"), reference)
    b_correct = ends_with_answer(row.get("response_B"), reference)
    if a_correct and b_correct:
        return "both responses end with the reference answer", "A=B"
    if a_correct:
        return "A ends with the reference answer, B does not", "A>B"
    if b_correct:
        return "B ends with the reference answer, A does not", "B>A"
    return "neither response ends with the reference answer", ""

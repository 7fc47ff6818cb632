"""Apply an external judge to rows and hold what it returns to the contract.

One row's trouble stays that row's: a judge raising gives status "error" with "ExcType: message", and
so does a result that breaks the contract (a score outside [0, 1], a score that is not a number, a
malformed return value) -- an out-of-range score is an error, not a warning, because it would silently
skew the mean. Errors of that second kind are reported as "InvalidJudgeOutput: ...". NA (pd.NA, None or
float NaN) is a legitimate answer meaning "this record cannot be evaluated" and gets status "na".
Only bugs here, never the judge's behaviour, escape as exceptions.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel

from judgebench_flows.core.records import DECISIONS
from judgebench_flows.judges.external.config import UserMapping
from judgebench_flows.judges.external.loader import JudgeFn, JudgeForm

RowStatus = Literal["scored", "na", "error"]


class RowResult(BaseModel):
    """The judge's verdict on one row. `score` is None unless status is "scored"."""

    evaluation_text: str = ""
    score: float | None = None
    status: RowStatus
    error: str = ""


class InvalidJudgeOutput(Exception):
    """The judge returned something outside the contract for this row."""


def is_na(value: Any) -> bool:
    """pd.NA, None and float NaN all mean "no value"; containers never do."""
    if value is None or value is pd.NA:
        return True
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isnan(value)


def check_score(value: Any) -> float | None:
    """The score as a float in [0, 1], or None for NA; InvalidJudgeOutput otherwise.

    Any real number is accepted (ints, numpy floats, and bools as 0/1); strings are not, even "0.5",
    because a judge returning text as a score has a bug worth seeing.
    """
    if is_na(value):
        return None
    if not isinstance(value, numbers.Real):
        raise InvalidJudgeOutput(f"score must be a number in [0, 1] or NA, got {type(value).__name__} {value!r}")
    score = float(value)
    if not 0.0 <= score <= 1.0:
        raise InvalidJudgeOutput(f"score {score!r} is outside [0, 1]")
    return score


def _check_text(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidJudgeOutput(f"evaluation_text must be a string, got {type(value).__name__}")
    return value


def _error(exc: BaseException) -> RowResult:
    detail = " ".join(str(exc).split())
    return RowResult(status="error", error=f"{type(exc).__name__}: {detail}")


def _result(text: Any, score: Any) -> RowResult:
    try:
        checked_text = _check_text(text)
        checked = check_score(score)
    except InvalidJudgeOutput as exc:
        return RowResult(
            evaluation_text=text if isinstance(text, str) else "", status="error", error=f"InvalidJudgeOutput: {exc}"
        )
    if checked is None:
        return RowResult(evaluation_text=checked_text, status="na")
    return RowResult(evaluation_text=checked_text, score=checked, status="scored")


def score_row(judge: JudgeFn, row: pd.Series, config: UserMapping) -> RowResult:
    try:
        output = judge(row, config)
    except Exception as exc:  # the judge's own failure on this row: recorded, the run goes on
        return _error(exc)
    if not isinstance(output, (tuple, list)) or len(output) != 2:
        shown = type(output).__name__ if not isinstance(output, (tuple, list)) else f"{len(output)} values"
        return RowResult(status="error", error=f"InvalidJudgeOutput: expected (evaluation_text, score), got {shown}")
    return _result(*output)


def score_table(judge: JudgeFn, table: pd.DataFrame, config: UserMapping) -> list[RowResult]:
    """A table-form judge sees the whole shard; if it fails as a whole, every row of it is an error."""
    try:
        output = judge(table.copy(), config)
        if not isinstance(output, pd.DataFrame):
            raise InvalidJudgeOutput(f"table judge must return a DataFrame, got {type(output).__name__}")
        missing = [name for name in ("evaluation_text", "score") if name not in output.columns]
        if missing:
            raise InvalidJudgeOutput(f"table judge result lacks column(s) {', '.join(missing)}")
        if len(output) != len(table):
            raise InvalidJudgeOutput(f"table judge returned {len(output)} rows for {len(table)}")
    except Exception as exc:
        return [_error(exc) for _ in range(len(table))]
    texts = output["evaluation_text"].tolist()
    scores = output["score"].tolist()
    return [_result(text, score) for text, score in zip(texts, scores, strict=False)]


def score_rows(judge: JudgeFn, form: JudgeForm, rows: pd.DataFrame, config: UserMapping) -> list[RowResult]:
    """One RowResult per row of `rows`, in order.

    Row judges get each row as an object-dtype Series built from the record, so an int column stays int
    even next to float columns (DataFrame.iterrows would upcast it); its name is the row's index label,
    which for a shard of the input is the row's position in the whole file.
    """
    if form == "table":
        return score_table(judge, rows.reset_index(drop=True), config)
    return [
        score_row(judge, pd.Series(record, dtype=object, name=label), config)
        for label, record in zip(rows.index, rows.to_dict("records"), strict=False)
    ]


def check_decision(output: Any) -> tuple[str, str]:
    """A pairwise external judge's `(text, decision)`, checked: decision is A>B, B>A, A=B or ""."""
    if not isinstance(output, (tuple, list)) or len(output) != 2:
        raise InvalidJudgeOutput(f"expected (evaluation_text, decision), got {type(output).__name__}")
    text, decision = output
    if decision not in DECISIONS:
        raise InvalidJudgeOutput(f'decision must be one of A>B, B>A, A=B or "", got {decision!r}')
    return _check_text(text), decision

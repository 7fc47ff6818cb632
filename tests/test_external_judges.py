"""The example external judges, the scoring contract every judge is held to, and the summary."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pytest

from judgebench_flows.judges.external import exact_match, numeric_tolerance, pairwise_exact
from judgebench_flows.judges.external.loader import load_judge
from judgebench_flows.judges.external.scoring import (
    InvalidJudgeOutput,
    RowResult,
    check_decision,
    check_score,
    score_rows,
)
from judgebench_flows.judges.external.summary import bin_index, summarize

COLUMNS = {"model_output_column": "response", "reference_column": "ground_truth"}


def row(response, reference) -> pd.Series:
    return pd.Series({"response": response, "ground_truth": reference}, dtype=object)


def is_na(score) -> bool:
    return score is pd.NA


# ---------------------------------------------------------------- exact_match


@pytest.mark.parametrize(
    "response, reference, expected",
    [
        ("Paris", "Paris", 1.0),
        ("  paris\n", "PARIS", 1.0),
        ("PARIS\t", " Paris ", 1.0),
        ("Paris.", "Paris", 0.0),
        ("New  York", "new york", 0.0),  # inner whitespace is not normalized
        ("Lyon", "Paris", 0.0),
        (42, "42", 1.0),  # compared as text
        ("", "", 1.0),
        (None, "Paris", None),
        (float("nan"), "Paris", None),
        (pd.NA, "Paris", None),
        ("Paris", None, None),
        ("Paris", float("nan"), None),
        ("Paris", pd.NA, None),
    ],
)
def test_exact_match(response, reference, expected):
    text, score = exact_match.evaluate(row(response, reference), COLUMNS)
    assert isinstance(text, str) and text
    if expected is None:
        assert is_na(score)
    else:
        assert score == expected


def test_exact_match_uses_configured_columns():
    record = pd.Series({"answer": "Oui", "gold": "oui", "response": "non", "ground_truth": "x"}, dtype=object)
    _, score = exact_match.evaluate(record, {"model_output_column": "answer", "reference_column": "gold"})
    assert score == 1.0


# ---------------------------------------------------------------- numeric_tolerance

EXTRACT = {**COLUMNS, "extract_last_number": True}
WHOLE = dict(COLUMNS)


@pytest.mark.parametrize(
    "response, reference, expected",
    [
        ("The answer is 42", "42", 1.0),
        ("The answer is 42.", 42, 1.0),
        ("Total: 1,234,567.5 dollars", "1234567.5", 1.0),
        ("It costs $1,234", 1234, 1.0),
        ("about €3.50 each", 3.5, 1.0),
        ("a loss of -£2", -2, 1.0),
        ("a loss of $-2", -2, 1.0),
        ("change: +5", 5, 1.0),
        ("temperature \u22127", -7, 1.0),  # U+2212 minus sign
        ("rate is 1.5e-3", 0.0015, 1.0),
        ("about 2E5 people", 200000, 1.0),
        ("so x = 3/4.", 0.75, 1.0),
        ("slope -1/2", -0.5, 1.0),
        ("half is .5", 0.5, 1.0),
        ("first 3, then 4", 4, 1.0),
        ("first 3, then 4", 3, 0.0),  # the LAST number counts
        ("list 1,2,3", 3, 1.0),  # not a thousands separator
        ("pages 3-4", 4, 1.0),  # a hyphen after a digit is not a sign
        ("H2O has 3 atoms", 3, 1.0),  # a digit glued to a letter is not a number
        ("She sold 48/2 = 24 clips.\n#### 72", 72, 1.0),
        ("#### 72\nbut later 5 and 6", 72, 1.0),  # after ####, the number right after the marker
        ("#### 1,234", "1234", 1.0),
        ("earlier 5 #### none", 5, 0.0),  # marker present, nothing after it
        ("no digits here", 5, 0.0),
        ("", 5, 0.0),
        ("H2O", 2, 0.0),
        ("divide 1/0", 0, 0.0),  # a zero denominator is not a number
        (42, "42", 1.0),  # numeric response
        ("5.00001", 5, 0.0),  # default tolerance 1e-6 relative: 5e-6 allowed, 1e-5 off
        ("5.000004", 5, 1.0),
    ],
)
def test_numeric_extract_last_number(response, reference, expected):
    text, score = numeric_tolerance.evaluate(row(response, reference), EXTRACT)
    assert score == expected, text


@pytest.mark.parametrize(
    "response, reference, expected",
    [
        (" 42 ", 42, 1.0),
        ("42 apples", 42, 0.0),
        ("The answer is 42", 42, 0.0),
        ("$1,234.00", "1234", 1.0),
        ("3/4", 0.75, 1.0),
        ("1.5e-3", "0.0015", 1.0),
        ("-0.5", "-1/2", 1.0),
        ("42.", 42, 1.0),
        ("forty-two", 42, 0.0),
    ],
)
def test_numeric_whole_response(response, reference, expected):
    text, score = numeric_tolerance.evaluate(row(response, reference), WHOLE)
    assert score == expected, text


@pytest.mark.parametrize(
    "response, reference",
    [
        ("42", "abc"),
        ("no number at all", "abc"),  # reference checked first: NA, not 0
        (None, "abc"),
        ("42", None),
        ("42", float("nan")),
        ("42", pd.NA),
        ("42", "nan"),
        ("42", float("inf")),
        ("42", "#### unknown"),
        (None, 42),
        (float("nan"), 42),
        (pd.NA, 42),
    ],
)
def test_numeric_na(response, reference):
    _, score = numeric_tolerance.evaluate(row(response, reference), EXTRACT)
    assert is_na(score)


def test_numeric_reference_checked_before_response():
    text, _ = numeric_tolerance.evaluate(row(None, "abc"), EXTRACT)
    assert "reference" in text


def test_numeric_reference_in_gsm8k_answer_form():
    reference = "Natalia sold 48/2 = 24 clips in May.\nShe sold 48+24 = 72 clips.\n#### 72"
    _, score = numeric_tolerance.evaluate(row("so 72 clips", reference), EXTRACT)
    assert score == 1.0


@pytest.mark.parametrize(
    "response, reference, tolerance, expected",
    [
        ("101", 100, 0.01, 1.0),  # exactly at the relative edge: inclusive
        ("99", 100, 0.01, 1.0),
        ("101.0001", 100, 0.01, 0.0),
        ("98.9", 100, 0.01, 0.0),
        ("-101", -100, 0.01, 1.0),  # relative to |reference|
        ("101", -100, 0.01, 0.0),
        ("0", 0, 1e-6, 1.0),
        ("-0", 0, 1e-6, 1.0),
        ("0.0000001", 0, 1e-6, 1.0),  # zero reference: absolute tolerance
        ("0.00001", 0, 1e-6, 0.0),
        ("0.5", 0, 0.5, 1.0),
        ("-0.5", 0, 0.5, 1.0),
        ("0.51", 0, 0.5, 0.0),
        ("3.14", 3.14159, 0.001, 1.0),
        ("3.14", 3.14159, 0.0001, 0.0),
        ("7", 7, 0, 1.0),  # zero tolerance: exact
        ("7.0000001", 7, 0, 0.0),
    ],
)
def test_numeric_tolerance_edges(response, reference, tolerance, expected):
    _, score = numeric_tolerance.evaluate(row(response, reference), {**WHOLE, "tolerance": tolerance})
    assert score == expected


@pytest.mark.parametrize("tolerance", [-0.1, "0.1", True, float("inf"), None])
def test_numeric_bad_tolerance_raises(tolerance):
    with pytest.raises(ValueError, match="tolerance must be a finite number >= 0"):
        numeric_tolerance.evaluate(row("1", 1), {**WHOLE, "tolerance": tolerance})


# ---------------------------------------------------------------- pairwise_exact


def pair(a, b, reference) -> pd.Series:
    return pd.Series({"question": "q?", "response_A": a, "response_B": b, "ground_truth": reference}, dtype=object)


@pytest.mark.parametrize(
    "a, b, reference, decision",
    [
        ("so the answer is 42", "it is 41", "42", "A>B"),
        ("it is 41", "The answer is 42.", "42", "B>A"),
        ("42", "answer: 42", "42", "A=B"),
        ("41", "43", "42", ""),
        ("the answer is 14", "the answer is 4", "4", "B>A"),  # "14" does not end with "4"
        ("The answer is (B).", "The answer is (C)", "(b)", "A>B"),
        ("ANSWER: PARIS", None, "paris", "A>B"),
        ("42", "42", None, ""),
        ("42", "42", "  ", ""),
    ],
)
def test_pairwise_exact(a, b, reference, decision):
    output = pairwise_exact.evaluate(pair(a, b, reference), COLUMNS)
    text, checked = check_decision(output)
    assert checked == decision
    assert text


@pytest.mark.parametrize("output", [("x", "A>>B"), ("x", 1.0), ("x",), "A>B", ("x", None)])
def test_check_decision_refuses(output):
    with pytest.raises(InvalidJudgeOutput):
        check_decision(output)


@pytest.mark.parametrize("name", ["exact_match", "numeric_tolerance", "pairwise_exact"])
def test_example_judges_load_by_path(name):
    function, form = load_judge(f"judges/external/{name}.py")
    assert form == "row"
    assert callable(function)


# ---------------------------------------------------------------- scoring contract


@pytest.mark.parametrize(
    "value, expected",
    [(0, 0.0), (1, 1.0), (0.25, 0.25), (True, 1.0), (None, None), (pd.NA, None), (float("nan"), None)],
)
def test_check_score_accepts(value, expected):
    assert check_score(value) == expected


@pytest.mark.parametrize(
    "value, message",
    [
        (1.5, "score 1.5 is outside [0, 1]"),
        (-0.1, "score -0.1 is outside [0, 1]"),
        (float("inf"), "score inf is outside [0, 1]"),
        ("0.5", "score must be a number in [0, 1] or NA, got str '0.5'"),
        ([1], "score must be a number in [0, 1] or NA, got list [1]"),
    ],
)
def test_check_score_refuses(value, message):
    with pytest.raises(InvalidJudgeOutput) as caught:
        check_score(value)
    assert str(caught.value) == message


def _mixed_judge(row, config):
    """Behaves per row by `kind`, to check each outcome and that one row's failure stays its own."""
    kind = row["kind"]
    if kind == "raise":
        raise KeyError("missing field")
    if kind == "big":
        return "too big", 2
    if kind == "text":
        return "text score", "high"
    if kind == "shape":
        return 0.5
    if kind == "na":
        return "cannot", None
    return f"ok {row['n']}", row["n"] / 10


def test_score_rows_row_form_keeps_order_and_row_errors():
    rows = pd.DataFrame(
        {"kind": ["ok", "raise", "big", "text", "shape", "na", "ok"], "n": [1, 2, 3, 4, 5, 6, 7]},
        index=[10, 11, 12, 13, 14, 15, 16],  # a shard slice keeps its original index
    )
    results = score_rows(_mixed_judge, "row", rows, {})
    assert [r.status for r in results] == ["scored", "error", "error", "error", "error", "na", "scored"]
    assert [r.score for r in results] == [0.1, None, None, None, None, None, 0.7]
    assert results[0].evaluation_text == "ok 1"
    assert results[1].error == "KeyError: 'missing field'"
    assert results[2].error == "InvalidJudgeOutput: score 2.0 is outside [0, 1]"
    assert results[3].error == "InvalidJudgeOutput: score must be a number in [0, 1] or NA, got str 'high'"
    assert results[4].error == "InvalidJudgeOutput: expected (evaluation_text, score), got float"
    assert results[5].evaluation_text == "cannot"


def test_row_form_keeps_int_columns_int():
    seen = []

    def judge(row, config):
        seen.append(type(row["n"]))
        return "", 1.0

    score_rows(judge, "row", pd.DataFrame({"n": [1, 2], "x": [0.5, 1.5]}), {})
    assert seen == [int, int]


def test_row_series_is_named_by_its_index_label():
    names = []

    def judge(row, config):
        names.append(row.name)
        return "", 1.0

    score_rows(judge, "row", pd.DataFrame({"n": [1, 2]}, index=[500, 501]), {})
    assert names == [500, 501]


def test_score_rows_table_form():
    def judge(df: pd.DataFrame, config):
        return pd.DataFrame({"evaluation_text": ["a", "b", "c"], "score": [1.0, 1.5, pd.NA]})

    results = score_rows(judge, "table", pd.DataFrame({"x": [1, 2, 3]}, index=[5, 6, 7]), {})
    assert [r.status for r in results] == ["scored", "error", "na"]


@pytest.mark.parametrize(
    "returned, error",
    [
        (
            pd.DataFrame({"evaluation_text": ["a"], "score": [1.0]}),
            "InvalidJudgeOutput: table judge returned 1 rows for 2",
        ),
        (pd.DataFrame({"score": [1.0, 1.0]}), "InvalidJudgeOutput: table judge result lacks column(s) evaluation_text"),
        ([1.0, 1.0], "InvalidJudgeOutput: table judge must return a DataFrame, got list"),
        (ZeroDivisionError("division by zero"), "ZeroDivisionError: division by zero"),
    ],
)
def test_table_form_failure_marks_the_whole_shard(returned, error):
    def judge(df, config):
        if isinstance(returned, Exception):
            raise returned
        return returned

    results = score_rows(judge, "table", pd.DataFrame({"x": [1, 2]}), {})
    assert [(r.status, r.error) for r in results] == [("error", error)] * 2


# ---------------------------------------------------------------- summary


def test_bin_index_puts_tenths_in_their_own_bin():
    assert [bin_index(k / 10) for k in range(11)] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9]
    assert bin_index(0.1 + 0.2) == 3
    assert bin_index(0.2999) == 2


def test_summarize_counts_and_distribution():
    results = (
        [RowResult(score=1.0, status="scored")] * 3
        + [RowResult(score=0.0, status="scored")]
        + [RowResult(status="na")] * 2
        + [RowResult(status="error", error="ValueError: bad")]
    )
    summary = summarize(
        results,
        list(range(100, 107)),
        judge_path="j.py",
        judge_function="evaluate",
        judge_form="row",
        data_path="d.csv",
        output_files=["o.csv"],
        result_path="r.json",
    )
    assert (summary.total, summary.scored, summary.na, summary.errors) == (7, 4, 2, 1)
    assert summary.mean_score == 0.75
    assert summary.distribution.value_counts == {"0.0": 1, "1.0": 3}
    assert [b.count for b in summary.distribution.bins] == [1, 0, 0, 0, 0, 0, 0, 0, 0, 3]
    assert (summary.distribution.min, summary.distribution.median, summary.distribution.max) == (0.0, 1.0, 1.0)
    assert [(e.qid, e.error) for e in summary.error_examples] == [(106, "ValueError: bad")]


def test_summarize_many_distinct_values_and_nothing_scored():
    names: dict[str, Any] = {
        "judge_path": "j",
        "judge_function": "f",
        "judge_form": "row",
        "data_path": "d",
        "output_files": [],
        "result_path": "r",
    }
    many = [RowResult(score=i / 100, status="scored") for i in range(50)]
    assert summarize(many, list(range(50)), **names).distribution.value_counts is None
    empty = summarize([RowResult(status="na")], [1], **names)
    assert empty.mean_score is None and empty.distribution.median is None
    assert math.fsum(b.count for b in empty.distribution.bins) == 0

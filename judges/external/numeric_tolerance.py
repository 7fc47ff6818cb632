"""Example external judge: is the response's number the reference's number, within a tolerance?

Config (in `external_judge_config`):

- `tolerance` (default 1e-6): relative, |response - reference| <= tolerance * |reference|, inclusive;
  absolute (|response| <= tolerance) when the reference is 0, where relative would demand exactly 0.
  1e-6 absorbs float formatting noise (0.30000000000000004, 0.333333 for 1/3) while still telling
  3.14 from 3.14159; raise it for answers that are rounded on purpose.
- `extract_last_number` (default false): take the last number in the response (free text, chain of
  thought). When the response contains GSM8K's `####` marker, the first number after the last marker
  is taken instead. Without it, the whole stripped response must be a number.

Numbers understood: sign (+, -, or U+2212 minus), a currency sign ($, €, £) before or after
the sign, thousands separators (1,234,567.5), decimals (.5, 3.), scientific notation (1.5e-3) and simple
fractions (3/4, -1/2). A digit glued to a letter or dot before it (H2O, v1.2.3's tail) is not a number.

The order of checks matters: a reference that is not a number gives NA, decided before the response
is looked at (the record cannot be evaluated whatever the model said). A missing response (None/NaN/NA)
is NA too, as in exact_match; a response present but without a number scores 0. The reference may be a
number, a numeric string, or GSM8K's full answer text ending in `#### 42`.

Self-contained on purpose (only pandas), so it can be copied as a starting point.
"""

from __future__ import annotations

import math
import numbers
import re
from typing import Any

import pandas as pd

DEFAULT_TOLERANCE = 1e-6

_SIGN = "[+\\-\u2212]"
_CURRENCY = "[$\u20ac\u00a3]"
_NUMBER = re.compile(
    r"(?<![\w.])"
    rf"(?:(?P<sign>{_SIGN}){_CURRENCY}?|{_CURRENCY}(?P<sign_after>{_SIGN})?)?"
    r"(?:"
    r"(?P<numerator>\d+)/(?P<denominator>\d+)(?!\d|\.\d)"
    r"|"
    r"(?P<decimal>(?:\d{1,3}(?:,\d{3})+(?!\d)(?:\.\d+)?|\d+(?:\.\d*)?|\.\d+)(?:[eE][+\-]?\d+)?)"
    r")"
)


def _missing(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _value(match: re.Match[str]) -> float | None:
    negative = (match["sign"] or match["sign_after"] or "+") != "+"
    if match["numerator"] is not None:
        denominator = int(match["denominator"])
        if denominator == 0:
            return None
        magnitude = int(match["numerator"]) / denominator
    else:
        magnitude = float(match["decimal"].replace(",", ""))
    return -magnitude if negative else magnitude


def parse_number(text: str) -> float | None:
    """The number the whole (stripped) text spells, or None."""
    match = _NUMBER.fullmatch(text.strip())
    return _value(match) if match else None


def last_number(text: str) -> float | None:
    """The last number in free text; after a `####` marker, the first number following the last one."""
    if "####" in text:
        match = _NUMBER.search(text.rsplit("####", 1)[1])
        return _value(match) if match else None
    matches = list(_NUMBER.finditer(text))
    return _value(matches[-1]) if matches else None


def _as_number(value: Any) -> float | None:
    """A real (non-bool) number as float, else None; strings are left to the parsers."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    return None


def reference_number(value: Any) -> float | None:
    number = _as_number(value)
    if number is None and isinstance(value, str):
        number = parse_number(value.rsplit("####", 1)[1] if "####" in value else value)
    return number if number is not None and math.isfinite(number) else None


def _tolerance(config: dict) -> float:
    tolerance = config.get("tolerance", DEFAULT_TOLERANCE)
    if isinstance(tolerance, bool) or not isinstance(tolerance, numbers.Real) or not 0 <= float(tolerance) < math.inf:
        raise ValueError(f"tolerance must be a finite number >= 0, got {tolerance!r}")
    return float(tolerance)


def within(response: float, reference: float, tolerance: float) -> bool:
    if reference == 0:
        return abs(response) <= tolerance
    return abs(response - reference) <= tolerance * abs(reference)


def evaluate(row: pd.Series, config: dict) -> tuple[str, Any]:
    """1.0 when the response's number is within tolerance of the reference, 0.0 when not, NA when the
    reference is not a number or there is no response."""
    tolerance = _tolerance(config)
    raw_reference = row.get(config.get("reference_column") or "ground_truth")
    reference = None if _missing(raw_reference) else reference_number(raw_reference)
    if reference is None:
        return f"reference {raw_reference!r} is not a number", pd.NA
    raw_response = row.get(config.get("model_output_column") or "response")
    if _missing(raw_response):
        return "no response", pd.NA
    response = _as_number(raw_response)
    if response is None:
        text = str(raw_response)
        response = last_number(text) if config.get("extract_last_number", False) else parse_number(text)
    if response is None:
        return "no number in the response", 0.0
    if within(response, reference, tolerance):
        return f"{response:.15g} matches reference {reference:.15g} (tolerance {tolerance:g})", 1.0
    return f"{response:.15g} differs from reference {reference:.15g} (tolerance {tolerance:g})", 0.0

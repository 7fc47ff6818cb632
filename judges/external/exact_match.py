"""Example external judge: exact match of response and reference, ignoring case and outer whitespace.

Self-contained on purpose (only pandas), so it can be copied as a starting point. Run it with:

    judgebench run --judge-type external --external-judge-path judges/external/exact_match.py \\
        --data-path data.csv --output-dir out

The columns come from the config the runner passes (`model_output_column`, `reference_column`,
defaults "response" and "ground_truth"). Values are compared as text, so a numeric reference 42 matches
the response "42" but 42.0 does not; use numeric_tolerance.py for numbers.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd


def _missing(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _normalize(value: Any) -> str:
    return str(value).strip().casefold()


def evaluate(row: pd.Series, config: dict) -> tuple[str, Any]:
    """1.0 on a match, 0.0 otherwise; NA when the response or the reference is missing."""
    response = row.get(config.get("model_output_column") or "response")
    reference = row.get(config.get("reference_column") or "ground_truth")
    if _missing(reference):
        return "no reference to compare with", pd.NA
    if _missing(response):
        return "no response", pd.NA
    if _normalize(response) == _normalize(reference):
        return "response matches the reference", 1.0
    return f"response {str(response).strip()!r} does not match reference {str(reference).strip()!r}", 0.0

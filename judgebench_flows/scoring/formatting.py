"""How a share is written for people (tables, reports, logs): one rule, each place choosing its marks."""

from __future__ import annotations

import math
from typing import Any


def finite(value: Any) -> float | None:
    """A finite float, or None for missing/NaN/non-numeric values (older runs lack many figures)."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def percent(value: Any, digits: int = 2, missing: str = "-", sign: str = "%") -> str:
    """`0.8123` -> `81.23%`; `missing` for a figure that is absent or not a finite number."""
    number = finite(value)
    return missing if number is None else f"{100 * number:.{digits}f}{sign}"

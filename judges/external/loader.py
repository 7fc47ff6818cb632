"""Load an external judge function from a Python file, with CLEAR's checks and error messages.

A judge comes in one of two forms:

- row form (the default): `evaluate(row: pd.Series, config: dict) -> tuple[str, float | NA]`
- table form: `evaluate(df: pd.DataFrame, config: dict) -> pd.DataFrame` with `evaluation_text` and
  `score` columns, one row per input row, in the same order.

The rule that tells them apart: a function is table form when its first parameter is named `df` or is
annotated `pd.DataFrame` (the class itself, or the strings "pd.DataFrame" / "pandas.DataFrame" /
"DataFrame" under `from __future__ import annotations`). Everything else is row form. Table judges are
called once per shard, not once per file, so they must not rely on seeing every row at once.

The module is imported under a name derived from its absolute path and registered in sys.modules, so
dataclasses and pickling inside the judge file work, and two judge files with the same name do not mix.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from judgebench_flows.core.errors import UserError
from judgebench_flows.judges.files import ImportFailed, import_file

JudgeForm = Literal["row", "table"]
JudgeFn = Callable[..., Any]

_DATAFRAME_ANNOTATIONS = {"pd.DataFrame", "pandas.DataFrame", "DataFrame"}


def judge_form(function: JudgeFn) -> JudgeForm:
    """Row or table form, by the rule in the module docstring."""
    parameters = list(inspect.signature(function).parameters.values())
    first = parameters[0]
    import pandas as pd  # here, not at import: a run of a built-in judge does not load pandas before its first call

    if first.name == "df" or first.annotation is pd.DataFrame or first.annotation in _DATAFRAME_ANNOTATIONS:
        return "table"
    return "row"


def _import_file(path: Path) -> Any:
    try:
        return import_file(path, "judgebench_external_judge")
    except ImportFailed as exc:
        raise UserError(f"Error importing external judge file {path}: {exc}") from None


def load_judge(judge_path: str, function_name: str = "evaluate") -> tuple[JudgeFn, JudgeForm]:
    """The judge function in `judge_path` and its form; UserError with one clear line otherwise."""
    path = Path(judge_path).expanduser()
    if not path.is_file():
        raise UserError(f"External judge file not found: {judge_path}")
    if path.suffix != ".py":
        raise UserError(f"External judge file must be a Python file (.py): {judge_path}")
    module = _import_file(path)
    function = getattr(module, function_name, None)
    if function is None:
        available = sorted(
            name for name, value in vars(module).items() if not name.startswith("_") and inspect.isfunction(value)
        )
        raise UserError(
            f"Function '{function_name}' not found in {judge_path} (available: {', '.join(available) or 'none'})"
        )
    if not callable(function):
        raise UserError(f"'{function_name}' in {judge_path} is not callable")
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        raise UserError(f"Cannot read the signature of judge function '{function_name}' in {judge_path}") from None
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    takes_varargs = any(p.kind == p.VAR_POSITIONAL for p in parameters)
    if len(positional) < 2 and not takes_varargs:
        raise UserError(f"Judge function '{function_name}' must accept at least 2 parameters (row, config)")
    return function, judge_form(function)

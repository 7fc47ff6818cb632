"""The Python entry point: `evaluate(...)` runs what `judgebench run` runs and returns its results as data.

`judgebench_flows.evaluate` is this package's `evaluate` (docs/python-api.md). Its names are imported on
first use, so `python -m judgebench_flows.api.signature` (which writes evaluate()'s options into
api/evaluate.py) runs whatever that file holds."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from judgebench_flows.api.evaluate import RunInterrupted, evaluate, evaluate_async
    from judgebench_flows.api.evaluation import Evaluation

__all__ = ["Evaluation", "RunInterrupted", "evaluate", "evaluate_async"]


def __getattr__(name: str) -> Any:
    if name == "Evaluation":
        from judgebench_flows.api.evaluation import Evaluation

        return Evaluation
    if name in ("RunInterrupted", "evaluate", "evaluate_async"):
        from judgebench_flows.api import evaluate as module

        return getattr(module, name)
    raise AttributeError(f"module 'judgebench_flows.api' has no attribute {name!r}")

"""The Python entry point: `evaluate(...)` runs what `judgebench run` runs and returns its results as data.

`judgebench_flows.evaluate` is this package's `evaluate` (docs/python-api.md)."""

from judgebench_flows.api.evaluate import RunInterrupted, evaluate, evaluate_async
from judgebench_flows.api.evaluation import Evaluation

__all__ = ["Evaluation", "RunInterrupted", "evaluate", "evaluate_async"]

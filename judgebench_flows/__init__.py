"""judgebench-flows: Prefect flows that benchmark LLM judges on JudgeBench.

`judgebench_flows.evaluate(model=..., judge=..., ...)` runs an evaluation from Python, in a script or a
notebook, and returns its results as data (docs/python-api.md). It is imported on first use: importing
any part of the package does not import Prefect.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from judgebench_flows.core.version import VERSION as __version__

if TYPE_CHECKING:
    from judgebench_flows.api import Evaluation, RunInterrupted, evaluate, evaluate_async

__all__ = ["Evaluation", "RunInterrupted", "__version__", "evaluate", "evaluate_async"]


def __getattr__(name: str) -> Any:
    if name in ("Evaluation", "RunInterrupted", "evaluate", "evaluate_async"):
        from judgebench_flows import api

        return getattr(api, name)
    raise AttributeError(f"module 'judgebench_flows' has no attribute {name!r}")

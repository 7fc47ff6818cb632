"""External judges: plain Python functions that score one record, CLEAR-style, without an LLM.

A judge is `evaluate(row: pd.Series, config: dict) -> (evaluation_text, score)` with a score in [0, 1]
or NA (pd.NA, None or NaN) when the record cannot be evaluated; or the table form
`evaluate(df: pd.DataFrame, config) -> DataFrame` with `evaluation_text` and `score` columns (see
loader.py for how the two are told apart). `config` is the run's `external_judge_config` plus the
column options (see config.judge_config).

Modules: config (options), loader (import and check a judge), scoring (apply it, check its output),
data (read input, write output), summary (aggregate), run (preflight, sharding, finishing). The example
judges exact_match, numeric_tolerance and pairwise_exact are meant to be loaded by path. No Prefect here:
tasks/external.py and flows/external_flow.py put these steps on Prefect.
"""

from typing import Any

from judgebench_flows.judges.external.config import ExternalJudgeConfig, external_config_from_options, judge_config
from judgebench_flows.judges.external.loader import load_judge


def __getattr__(name: str) -> Any:
    """`preflight` and `ExternalRunResult` load pandas: imported on first use, so the pairwise judges,
    which import this package, do not make every run load pandas before its first call."""
    if name == "preflight":
        from judgebench_flows.judges.external.run import preflight

        return preflight
    if name == "ExternalRunResult":
        from judgebench_flows.judges.external.summary import ExternalRunResult

        return ExternalRunResult
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ExternalJudgeConfig",
    "ExternalRunResult",
    "external_config_from_options",
    "judge_config",
    "load_judge",
    "preflight",
]

"""The benchmarks a run can judge, one `Benchmark` each, one module each, registered here.

Adding a benchmark is a module in this package holding its `Benchmark`, one line in `BENCHMARKS`, and,
when its checkout holds pairs in a shape not known yet, a reader in `data/benchmark_data.py`
(docs/benchmarks.md says how). JudgeBench is the default: a run that names no benchmark is what it always was.
"""

from __future__ import annotations

import json

from judgebench_flows.core.benchmarks.base import Benchmark
from judgebench_flows.core.benchmarks.judgebench import JUDGEBENCH
from judgebench_flows.core.benchmarks.llmbar import LLMBAR

BENCHMARKS: dict[str, Benchmark] = {b.name: b for b in (JUDGEBENCH, LLMBAR)}
DEFAULT = JUDGEBENCH.name


def names() -> list[str]:
    return list(BENCHMARKS)


def get(name: str | None) -> Benchmark:
    """The benchmark of that name (None: JudgeBench)."""
    return BENCHMARKS[name or DEFAULT]


def check_name(name: str) -> str:
    """`name` when registered, else a one-line error naming the known ones (exit 2 at the boundary)."""
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r} (known: {', '.join(BENCHMARKS)})")
    return name


def of_stored_config(config_json: str | None) -> Benchmark:
    """The benchmark a stored run judged, from its configuration's JSON (the results database's
    `config_json`, results.json's `config`): a run of JudgeBench names none."""
    if not config_json or '"benchmark"' not in config_json:
        return get(DEFAULT)
    try:
        name = json.loads(config_json).get("benchmark")
    except (ValueError, AttributeError):
        return get(DEFAULT)
    return BENCHMARKS.get(name, get(DEFAULT)) if isinstance(name, str) else get(DEFAULT)


def home_of_judge(judge_type: str) -> Benchmark | None:
    """The benchmark whose checkout holds this judge's prompts: LLMBar's for `llmbar:*`, JudgeBench's for
    its built-in prompted judges; None for judges that read no benchmark's prompts (custom, external,
    reward models)."""
    for benchmark in BENCHMARKS.values():
        if benchmark.owns_judge(judge_type):
            return benchmark
    if judge_type in ("custom", "external", "reward_model"):
        return None
    return JUDGEBENCH


__all__ = [
    "BENCHMARKS",
    "DEFAULT",
    "Benchmark",
    "JUDGEBENCH",
    "LLMBAR",
    "check_name",
    "get",
    "home_of_judge",
    "names",
    "of_stored_config",
]

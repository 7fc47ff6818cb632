"""What a benchmark is to a run: where its data comes from, its subsets, how its verdicts score, whose
prompts its own judges read, where its published results are.

A `Benchmark` is plain data, as a `Provider` is: the low layers read it without importing the layers that
load pairs or score them. What lives higher up it names by a word the layer above maps (`rule`, `layout`).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Benchmark:
    """One pairwise judge benchmark, registered in `core.benchmarks.BENCHMARKS`.

    Args:
        name: `--benchmark NAME`, `benchmark=` in `evaluate()`, a matrix's `benchmarks:` entry.
        title: how lines and pages name it.
        repo_url: the public repository a run clones (`--repo-url` overrides it).
        ref: the pinned commit whose data and prompts this package was validated against (`--ref`).
        default_data_file: the subset judged when `--data-file` is not given.
        data_files: every subset it publishes, as `--data-file` names them.
        layout: how a checkout holds its pairs and prompts ("judgebench" or "llmbar": `data/benchmark_data.py`).
        rule: its official scoring rule ("judgebench" or "llmbar": `scoring/metrics.py`).
        categories: the slices every result shows, in order (a subset absent from a run is shown empty).
        prompts_dir: where its judges' prompt files are inside a checkout.
        judge_prefix: judge types of its own are `PREFIX<name>` (LLMBar's `llmbar:Vanilla`); None: the
            unprefixed built-in judges are its own.
        scoring: one sentence saying how a run on it is scored (results.json, the summary).

    Examples:
        >>> from judgebench_flows.core import benchmarks
        >>> llmbar = benchmarks.get("llmbar")
        >>> llmbar.default_data_file, llmbar.rule, llmbar.owns_judge("llmbar:CoT")
        ('Natural', 'llmbar', True)
        >>> benchmarks.get(None).name  # a run that names none judges JudgeBench
        'judgebench'
    """

    name: str
    title: str
    repo_url: str
    ref: str
    default_data_file: str
    data_files: tuple[str, ...]
    layout: str
    rule: str
    categories: tuple[str, ...] = ()
    prompts_dir: str = ""
    judge_prefix: str | None = None
    scoring: str = ""
    aliases: tuple[str, ...] = field(default=())

    def owns_judge(self, judge_type: str) -> bool:
        """Whether `judge_type` is one of this benchmark's own judges (its prompts come from its checkout)."""
        return bool(self.judge_prefix) and judge_type.startswith(self.judge_prefix or "")

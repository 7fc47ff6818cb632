"""JudgeBench (ScalerLab/JudgeBench): 350 GPT-4o and 270 Claude pairs with objective labels."""

from judgebench_flows.core.benchmarks.base import Benchmark
from judgebench_flows.core.config_defaults import DEFAULT_REF, DEFAULT_REPO_URL

GPT4O_PAIRS = "dataset=judgebench,response_model=gpt-4o-2024-05-13.jsonl"
CLAUDE_PAIRS = "dataset=judgebench,response_model=claude-3-5-sonnet-20240620.jsonl"

JUDGEBENCH = Benchmark(
    name="judgebench",
    title="JudgeBench",
    repo_url=DEFAULT_REPO_URL,
    ref=DEFAULT_REF,
    default_data_file=GPT4O_PAIRS,
    data_files=(GPT4O_PAIRS, CLAUDE_PAIRS),
    layout="judgebench",
    rule="judgebench",
    categories=("mmlu-pro", "livebench-reasoning", "livebench-math", "livecodebench"),
    prompts_dir="utils/templates",
    judge_prefix=None,
    scoring="JudgeBench's rule: a pair is correct when more of its verdicts match the label than contradict it",
)

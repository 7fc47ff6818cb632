"""LLMBar (princeton-nlp/LLMBar, Zeng et al., ICLR 2024): instruction-following pairs, one natural set and
four adversarial ones, with its own evaluators (`llmbar:<Strategy>` judges) and statistics."""

from judgebench_flows.core.benchmarks.base import Benchmark

NATURAL = "Natural"
ADVERSARIAL = ("Adversarial/Neighbor", "Adversarial/GPTInst", "Adversarial/GPTOut", "Adversarial/Manual")

LLMBAR = Benchmark(
    name="llmbar",
    title="LLMBar",
    repo_url="https://github.com/princeton-nlp/LLMBar.git",
    ref="900616bff90b6c6c8e1681f7d079250637c55992",
    default_data_file=NATURAL,
    data_files=(NATURAL, *ADVERSARIAL),
    layout="llmbar",
    rule="llmbar",
    categories=(NATURAL, "Adversarial"),
    prompts_dir="LLMEvaluator/evaluators",
    judge_prefix="llmbar:",
    scoring="LLMBar's rule: each order's verdict scored apart, accuracy their mean (correct_average)",
)

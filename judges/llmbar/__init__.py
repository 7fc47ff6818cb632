"""LLMBar's evaluators (Zeng et al., ICLR 2024) as judges: `llmbar:<Strategy>`, read from a checkout.

`config` reads a strategy's stages (prompt files, request settings, logit_bias, verdict patterns) as
LLMBar's evaluate.py does; `judge` runs them on a pair (auxiliary generations, both orders, Swap and
synthesize). LLMBar's statistics are `scoring.llmbar_statistics`.
"""

from judgebench_flows.judges.llmbar.config import Stage, Strategy, chatml_messages, config_folder, load_strategy
from judgebench_flows.judges.llmbar.judge import (
    JUDGE_PREFIX,
    LLMBAR_STRATEGIES,
    SWAP_STRATEGIES,
    LLMBarJudge,
    exchange_outputs,
    explanations,
    llmbar_judge,
)

__all__ = [
    "JUDGE_PREFIX",
    "LLMBAR_STRATEGIES",
    "SWAP_STRATEGIES",
    "LLMBarJudge",
    "Stage",
    "Strategy",
    "chatml_messages",
    "config_folder",
    "exchange_outputs",
    "explanations",
    "llmbar_judge",
    "load_strategy",
]

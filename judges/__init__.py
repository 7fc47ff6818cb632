"""LLM judges for JudgeBench pairs: plain Python, no Prefect, usable and testable on their own.

Every judge is a `Judge` (judges.procedure): it decides a pair's orders given the run's model call. A
prompted judge (built-in, tokenized or custom) is `format(question, answer_A, answer_B) -> messages` and
`parse(text) -> decision`, where a decision is "A>B", "B>A", "A=B" or "" (no usable verdict), run by
the shared prompt procedure. `get_judge` builds one by name.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from judgebench_flows.core.errors import UserError
from judgebench_flows.judges.builtin import BUILTIN_JUDGES, PromptJudge
from judgebench_flows.judges.custom import CustomJudge, ParseFailed
from judgebench_flows.judges.llmbar import JUDGE_PREFIX as LLMBAR_PREFIX
from judgebench_flows.judges.llmbar import LLMBAR_STRATEGIES, LLMBarJudge, llmbar_judge
from judgebench_flows.judges.procedure import Judge, Sampling
from judgebench_flows.judges.prompts import TemplateSet
from judgebench_flows.judges.reward import REWARD_JUDGE_TYPE, RewardJudge
from judgebench_flows.judges.tokenized import TOKENIZED_JUDGES, TokenizedJudge, build_tokenized_judge

if TYPE_CHECKING:  # the external judges' package is imported when an external judge is asked for
    from judgebench_flows.judges.external.config import UserMapping

JUDGE_TYPES: tuple[str, ...] = (
    *BUILTIN_JUDGES,
    *TOKENIZED_JUDGES,
    REWARD_JUDGE_TYPE,
    "custom",
    "external",
    *(LLMBAR_PREFIX + strategy for strategy in LLMBAR_STRATEGIES),
)


def get_judge(
    judge_type: str,
    templates_dir: str | Path | None = None,
    judge_template: str | None = None,
    external_judge_path: str | None = None,
    external_judge_function: str = "evaluate",
    external_judge_config: UserMapping | None = None,
    model: str | None = None,
    sampling_overrides: Sampling | None = None,
    reward_backend: str = "pooling",
):
    """The judge for `judge_type`, with prompts from `templates_dir` (a checkout's utils/templates).

    `llmbar:<Strategy>` is one of LLMBar's evaluators (judges.llmbar), read from `templates_dir` as a
    checkout's LLMEvaluator/evaluators folder; `model` picks its configuration and tokenizer.
    `model` is needed only by judges that load something of the model's own (judge_lm and panda_lm its
    tokenizer, reward_model with the local backend its weights); preflight checks pass None.
    `sampling_overrides` replace a prompted judge's sampling parameters (other judges sample nothing);
    `reward_backend` other than "pooling" loads a reward model into this process."""
    if judge_template:
        judge = CustomJudge(judge_template)
        if sampling_overrides:
            judge.sampling = {**judge.sampling, **sampling_overrides}
        return judge
    if judge_type == "external":
        if not external_judge_path:
            raise UserError("--judge-type external needs --external-judge-path FILE.py")
        from judgebench_flows.judges.external.pairwise import ExternalPairwiseJudge

        return ExternalPairwiseJudge(external_judge_path, external_judge_function, external_judge_config)
    if judge_type.startswith(LLMBAR_PREFIX):
        # LLMBar's evaluators: `templates_dir` is a checkout's LLMEvaluator/evaluators folder.
        strategy = judge_type.removeprefix(LLMBAR_PREFIX)
        return llmbar_judge(strategy, templates_dir, model, sampling_overrides)
    if judge_type == "custom":
        raise UserError("--judge-type custom needs --judge-template path.py:Class or module:Class")
    if judge_type in TOKENIZED_JUDGES:
        return _with_sampling(build_tokenized_judge(judge_type, TemplateSet(templates_dir), model), sampling_overrides)
    if judge_type == REWARD_JUDGE_TYPE:
        reward = RewardJudge.for_model(model)
        return reward if reward_backend == "pooling" else reward.local(model or "")
    factory = BUILTIN_JUDGES.get(judge_type)
    if factory is None:
        raise UserError(f"unknown judge type '{judge_type}' (valid: {', '.join(JUDGE_TYPES)})")
    prompted = factory(TemplateSet(templates_dir))
    prompted.templates.check(prompted.template_names)
    return _with_sampling(prompted, sampling_overrides)


def _with_sampling(judge: PromptJudge, overrides: Sampling | None) -> PromptJudge:
    return dataclasses.replace(judge, sampling={**judge.sampling, **overrides}) if overrides else judge


__all__ = [
    "JUDGE_TYPES",
    "BUILTIN_JUDGES",
    "LLMBAR_STRATEGIES",
    "LLMBarJudge",
    "TOKENIZED_JUDGES",
    "CustomJudge",
    "Judge",
    "ParseFailed",
    "PromptJudge",
    "RewardJudge",
    "TemplateSet",
    "TokenizedJudge",
    "get_judge",
    "llmbar_judge",
]

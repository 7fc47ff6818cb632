"""JudgeBench's prompted judges: which template, which variables, which sampling, which parser.

Each follows JudgeBench's `utils/judges.py` (itself following each judge's reference code), so scores are
comparable with the paper's. One deliberate difference: JudgeBench renders auto_j's template with
`question=` while the template reads `{{prompt}}`, so its query arrives empty; we fill it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from judgebench_flows.judges import parsing
from judgebench_flows.judges.procedure import PromptProcedure, Sampling
from judgebench_flows.judges.prompts import TemplateSet

Messages = list[dict[str, str]]
VariablesFn = Callable[[str, str, str], dict[str, str]]

# Prometheus 2's relative-grading system prompt and rubric, as JudgeBench passes them.
PROMETHEUS_SYSTEM = (
    "You are a fair judge assistant assigned to deliver insightful feedback that compares individual "
    "performances, highlighting how each stands relative to others within the same cohort."
)
PROMETHEUS_RUBRIC = "[Are the model's responses factually correct and well-supported by evidence?]"
ARENA_HARD_FOLLOW_UP = "continue your judgment and finish by outputting a final verdict label"


@dataclass(frozen=True)
class PromptJudge(PromptProcedure):
    """A judge defined by templates and a parser; `format` and `parse` are all it adds to the prompt
    procedure that makes it a `Judge`.

    `follow_up` is the extra user turn sent when an answer has no verdict label at all (Arena-Hard's
    second attempt); the judge's text over both turns is parsed together.
    """

    name: str
    templates: TemplateSet = field(repr=False, compare=False)
    user_template: str
    variables: VariablesFn = field(repr=False, compare=False)
    parser: Callable[[str], str] = field(repr=False, compare=False)
    system_template: str | None = None
    system_text: str | None = None
    sampling: Sampling = field(default_factory=dict)
    follow_up: str | None = None
    follow_up_when: Callable[[str], bool] | None = field(default=None, repr=False, compare=False)

    def format(self, question: str, answer_A: str, answer_B: str) -> Messages:
        messages: Messages = []
        if self.system_template:
            messages.append({"role": "system", "content": self.templates.render(self.system_template)})
        elif self.system_text:
            messages.append({"role": "system", "content": self.system_text})
        messages.append({"role": "user", "content": self.render_user(question, answer_A, answer_B)})
        return messages

    def render_user(self, question: str, answer_A: str, answer_B: str) -> str:
        """The user turn's text: the user template filled with this judge's variables."""
        return self.templates.render(self.user_template, **self.variables(question, answer_A, answer_B))

    def parse(self, text: str) -> str:
        return self.parser(text)

    def wants_follow_up(self, text: str) -> bool:
        return self.follow_up is not None and self.follow_up_when is not None and self.follow_up_when(text)

    @property
    def template_names(self) -> list[str]:
        return [n for n in (self.system_template, self.user_template) if n]

    def fingerprint(self) -> str:
        """What must change the cache key when it changes: prompts, system text, sampling and follow-up."""
        return "|".join(
            [
                self.name,
                self.templates.digest(self.template_names),
                self.system_text or "",
                repr(sorted(self.sampling.items())),
                self.follow_up or "",
            ]
        )


def _arena_hard(templates: TemplateSet) -> PromptJudge:
    return PromptJudge(
        name="arena_hard",
        templates=templates,
        system_template="arena_hard_judge_system",
        user_template="arena_hard_judge_prompt",
        variables=lambda q, a, b: {"prompt": q, "answer_a": a, "answer_b": b},
        parser=parsing.parse_arena_hard,
        sampling={"temperature": 0.0, "max_tokens": 4096},
        follow_up=ARENA_HARD_FOLLOW_UP,
        follow_up_when=lambda text: not parsing.arena_hard_labels(text),
    )


def _vanilla(templates: TemplateSet) -> PromptJudge:
    return PromptJudge(
        name="vanilla",
        templates=templates,
        user_template="vanilla_prompt",
        variables=lambda q, a, b: {"question": q, "answer_a": a, "answer_b": b},
        parser=parsing.parse_vanilla,
        sampling={"temperature": 0.0, "top_p": 1.0, "max_tokens": 1024},
    )


def _auto_j(templates: TemplateSet) -> PromptJudge:
    return PromptJudge(
        name="auto_j",
        templates=templates,
        user_template="autoj_prompt",
        variables=lambda q, a, b: {"prompt": q, "question": q, "response": a, "response_another": b},
        parser=parsing.parse_auto_j,
        sampling={"temperature": 0.0, "top_p": 1.0, "max_tokens": 1024},
    )


def _prometheus_2(templates: TemplateSet) -> PromptJudge:
    return PromptJudge(
        name="prometheus_2",
        templates=templates,
        system_text=PROMETHEUS_SYSTEM,
        user_template="prometheus2_prompt",
        variables=lambda q, a, b: {"instruction": q, "response_A": a, "response_B": b, "rubric": PROMETHEUS_RUBRIC},
        parser=parsing.parse_prometheus_2,
        sampling={"temperature": 0.0, "max_tokens": 1024},
    )


def _skywork_critic(templates: TemplateSet) -> PromptJudge:
    return PromptJudge(
        name="skywork_critic",
        templates=templates,
        user_template="skywork_critic_prompt",
        variables=lambda q, a, b: {"input": q, "response_a": a, "response_b": b},
        parser=parsing.parse_skywork_critic,
        sampling={"temperature": 0.0, "max_tokens": 2048},
    )


def _compass_judger(templates: TemplateSet) -> PromptJudge:
    # JudgeBench (after the pinned commit) passes question= to a template that reads {{prompt}}, so its
    # query arrives empty; as for auto_j, we fill both. Pinned checkouts ship no such template: ours is used.
    return PromptJudge(
        name="compass_judger",
        templates=templates,
        user_template="compass_judger_prompt",
        variables=lambda q, a, b: {"prompt": q, "question": q, "answer_a": a, "answer_b": b},
        parser=parsing.parse_compass_judger,
        sampling={"temperature": 0.0, "max_tokens": 2048},
    )


BUILTIN_JUDGES: dict[str, Callable[[TemplateSet], PromptJudge]] = {
    "arena_hard": _arena_hard,
    "vanilla": _vanilla,
    "auto_j": _auto_j,
    "prometheus_2": _prometheus_2,
    "skywork_critic": _skywork_critic,
    "compass_judger": _compass_judger,
}

"""JudgeLM and PandaLM: raw-prompt judges whose answers are cut to fit a 2,048-token context.

Both follow JudgeBench's `utils/judges.py` (itself following each model's reference code):
- the prompt is sent to the text-completions API (`/completions`, not chat), with each judge's sampling;
- before rendering, each answer is cut to `(2048 - max_new_tokens - len(template with the question and
  empty answers, special tokens included)) // 2 - 2` tokens of the judge model's own tokenizer (slow,
  `use_fast=False`), JudgeLM keeping the start of each answer and PandaLM the end, then decoded back to
  text. Python's slice semantics are kept as they are, including for a question so long that the budget
  goes to zero or below (JudgeLM then drops the answers' last tokens, PandaLM keeps them whole), because
  that is what produced the published numbers.
- PandaLM strips special-token strings from the (cut) answers and ends the prompt with a newline.

The tokenizer is the one of `--model` (a Hugging Face id or directory), loaded once per process through
`transformers` (`pip install -e ".[reward]"`); `JUDGEBENCH_TOKENIZER` names another id or directory when the
served model name is not one. Anything that can `encode`/`decode` may be passed instead (tests do).
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from judgebench_flows.core.errors import UserError
from judgebench_flows.judges import parsing
from judgebench_flows.judges.builtin import Messages, PromptJudge
from judgebench_flows.judges.procedure import Sampling
from judgebench_flows.judges.prompts import TemplateSet

CONTEXT_LIMIT = 2048
# Special-token strings PandaLM's reference strips from the responses it is shown.
PANDALM_SPECIAL = parsing.PANDALM_TOKENS


class Tokenizer(Protocol):
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]: ...
    def decode(self, ids: list[int]) -> str: ...


class _HFTokenizer:
    """A Hugging Face tokenizer seen through the two calls truncation needs."""

    def __init__(self, tokenizer: Any, name: str):
        self._tokenizer = tokenizer
        self.name = name

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(
            self._tokenizer(text, add_special_tokens=add_special_tokens, padding=False, truncation=False).input_ids
        )

    def decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids)


def require_transformers(judge_type: str) -> None:
    if importlib.util.find_spec("transformers") is None:
        raise UserError(
            f"--judge-type {judge_type} cuts answers with the judge model's tokenizer, as JudgeBench does: "
            'install the optional extra with pip install -e ".[reward]"'
        )


@functools.cache
def load_tokenizer(name: str) -> _HFTokenizer:
    """The slow tokenizer of `name`, as JudgeBench loads it; once per process."""
    from transformers import AutoTokenizer

    try:
        return _HFTokenizer(AutoTokenizer.from_pretrained(name, use_fast=False), name)
    except Exception as exc:  # a missing directory, an unknown id, no network: one line, before any call
        detail = " ".join(str(exc).split())[:300]
        raise UserError(
            f"cannot load the tokenizer of '{name}' ({type(exc).__name__}: {detail}); set JUDGEBENCH_TOKENIZER to its id or directory"
        ) from None


def tokenizer_name(model: str) -> str:
    return os.environ.get("JUDGEBENCH_TOKENIZER") or model


@dataclass(frozen=True)
class TokenizedJudge(PromptJudge):
    """A PromptJudge whose answers are cut to the context before rendering and whose prompt is raw text.

    `format` still returns one user message: its content is the exact `prompt` posted to `/completions`
    (`api = "completions"`), so records, the call cache and custom tooling see the same text either way.
    """

    tokenizer: Tokenizer | None = field(default=None, repr=False, compare=False)
    tokenizer_id: str = ""
    max_new_tokens: int = 16
    truncation_side: Literal["left", "right"] = "right"
    clean: Callable[[str], str] | None = field(default=None, repr=False, compare=False)
    suffix: str = ""
    api: str = "completions"

    def __post_init__(self) -> None:
        # A judgment's prompt is rendered several times (each order, the cache prefetch, calls made ahead),
        # and the slow tokenizer is most of its CPU: each question's budget and each answer's cut are
        # computed once per judge for the shards in flight.
        object.__setattr__(self, "_budget", functools.lru_cache(maxsize=256)(self._budget))
        object.__setattr__(self, "_cut", functools.lru_cache(maxsize=1024)(self._cut))

    def _budget(self, question: str) -> int:
        assert self.tokenizer is not None
        template = self.render_user(question, "", "")  # the question with empty answers
        return (CONTEXT_LIMIT - self.max_new_tokens - len(self.tokenizer.encode(template))) // 2 - 2

    def _cut(self, question: str, answer: str) -> str:
        assert self.tokenizer is not None
        budget = self._budget(question)
        ids = self.tokenizer.encode(answer, add_special_tokens=False)
        kept = ids[:budget] if self.truncation_side == "right" else ids[-budget:]
        return self.tokenizer.decode(kept)

    def truncate(self, question: str, answer_A: str, answer_B: str) -> tuple[str, str]:
        """Both answers cut to the same token budget, as JudgeBench cuts them (slices kept as they are)."""
        if self.tokenizer is None:
            raise UserError(
                f"--judge-type {self.name} needs the judge model's tokenizer (--model or JUDGEBENCH_TOKENIZER)"
            )
        return self._cut(question, answer_A), self._cut(question, answer_B)

    def format(self, question: str, answer_A: str, answer_B: str) -> Messages:
        a, b = self.truncate(question, answer_A, answer_B)
        if self.clean is not None:
            a, b = self.clean(a), self.clean(b)
        return [{"role": "user", "content": self.render_user(question, a, b) + self.suffix}]

    def fingerprint(self) -> str:
        return "|".join(
            [super().fingerprint(), self.api, self.tokenizer_id, str(self.max_new_tokens), self.truncation_side]
        )


def _pandalm_clean(text: str) -> str:
    return PANDALM_SPECIAL.sub("", text.strip()).strip()


# JudgeBench's PandaLM request (4-beam search, `utils/judges.py`), in the fields vLLM reads. vLLM before
# 0.6.3 beam-searched `best_of` beams (`early_stopping` as sent); current vLLM has its own beam-search path
# whose width is `n` and which no longer reads `best_of` or `early_stopping` (it logs them as ignored) nor
# applies `repetition_penalty` to beams. `n: 4` gives both the 4 beams: the answer's first choice is the
# best beam, as JudgeBench reads it. A server that answers fewer choices did not beam-search: the run
# says so (`request_rules.Learned.note_ignored`, results.json's `run.requests.adjustments`).
PANDALM_BEAMS = 4
PANDALM_SAMPLING: Sampling = {
    "temperature": 0,
    "top_p": 1,
    "max_tokens": 150,
    "use_beam_search": True,
    "n": PANDALM_BEAMS,
    "best_of": PANDALM_BEAMS,
    "early_stopping": True,
    "repetition_penalty": 1.2,
}


def _judge_lm(templates: TemplateSet, tokenizer: Tokenizer | None, tokenizer_id: str) -> TokenizedJudge:
    return TokenizedJudge(
        name="judge_lm",
        templates=templates,
        user_template="judgelm_prompt",
        variables=lambda q, a, b: {"question": q, "answer_1": a, "answer_2": b},
        parser=parsing.parse_judge_lm,
        sampling={"temperature": 0.0, "max_tokens": 16},
        tokenizer=tokenizer,
        tokenizer_id=tokenizer_id,
        max_new_tokens=16,
        truncation_side="right",
    )


def _panda_lm(templates: TemplateSet, tokenizer: Tokenizer | None, tokenizer_id: str) -> TokenizedJudge:
    return TokenizedJudge(
        name="panda_lm",
        templates=templates,
        user_template="pandalm_prompt",
        variables=lambda q, a, b: {"instruction": q, "resp1": a, "resp2": b},
        parser=parsing.parse_panda_lm,
        sampling=dict(PANDALM_SAMPLING),
        tokenizer=tokenizer,
        tokenizer_id=tokenizer_id,
        max_new_tokens=150,
        truncation_side="left",
        clean=_pandalm_clean,
        suffix="\n",
    )


TOKENIZED_JUDGES: dict[str, Callable[[TemplateSet, Tokenizer | None, str], TokenizedJudge]] = {
    "judge_lm": _judge_lm,
    "panda_lm": _panda_lm,
}


def build_tokenized_judge(
    judge_type: str, templates: TemplateSet, model: str | None, tokenizer: Tokenizer | None = None
) -> TokenizedJudge:
    """The judge with its tokenizer: given, or loaded for `model`. Without either (a preflight check that
    knows no model yet) only the templates and the `transformers` install are checked."""
    tokenizer_id = getattr(tokenizer, "name", "") or ""
    if tokenizer is None:
        require_transformers(judge_type)
        if model:
            tokenizer_id = tokenizer_name(model)
            tokenizer = load_tokenizer(tokenizer_id)
    judge = TOKENIZED_JUDGES[judge_type](templates, tokenizer, tokenizer_id)
    judge.templates.check(judge.template_names)
    return judge

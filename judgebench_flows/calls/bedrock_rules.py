"""What each model family on AWS Bedrock accepts through the Converse API: the table, as data.

Bedrock serves Anthropic's, Meta's and Mistral's models behind one request shape (`inferenceConfig`:
`maxTokens`, `temperature`, `topP`, `stopSequences`; anything else in `additionalModelRequestFields`), but
each family keeps its own API's limits, and Bedrock answers a request outside them with a 400
(`ValidationException`):

- Anthropic: `top_k` as an additional field; the newer models (Claude Sonnet 4.5, Haiku 4.5, Opus 4.1 and
  4.5) refuse `temperature` and `top_p` together, so `temperature` (JudgeBench's 0) is kept and `top_p`
  left out when a judge gives both.
- Meta's Llama: no `top_k` and no stop sequences; at most 2048 tokens per answer (`max_gen_len`).
- Mistral's: `top_k` as an additional field; Mistral 7B Instruct and Mixtral 8x7B Instruct take no system
  message (it is folded into the first user turn, as JudgeBench folds o1's), Mixtral answers at most 4096
  tokens, the others 8192.

A model is named by its Bedrock model id (`anthropic.claude-3-haiku-20240307-v1:0`), a cross-region
inference profile (`us.`, `eu.`, `apac.`, `global.` before it) or an ARN ending in either; the longest
family prefix wins. A model of another family (Amazon Nova, Cohere, ...) gets the common parameters, and
a 400 naming one it refuses is adapted to at run time (`request_rules.Learned`), as for any endpoint.
"""

from __future__ import annotations

from dataclasses import dataclass

from judgebench_flows.calls.request_rules import RequestRule
from judgebench_flows.core.providers.bedrock import model_id

# The judge's parameters (OpenAI's names, as every judge gives them) -> the Converse API's fields.
INFERENCE_CONFIG = {"max_tokens": "maxTokens", "temperature": "temperature", "top_p": "topP", "stop": "stopSequences"}
COMMON = frozenset(INFERENCE_CONFIG)
# Asked when the judge names no `max_tokens` (JudgeBench's note: Claude 3's ceiling), or the model's
# ceiling when lower: Bedrock's own default for Llama is 512 tokens, too few for a judge's reasoning.
DEFAULT_MAX_TOKENS = 4096


@dataclass(frozen=True)
class Family:
    """The models whose id starts with `prefix`: the parameters they take, the most tokens they answer
    (None: no limit known), whether they take a system message, and two parameters they refuse together
    (the first is kept)."""

    prefix: str
    params: frozenset[str]
    max_tokens: int | None = None
    system: bool = True
    one_of: tuple[str, str] | None = None

    @property
    def additional(self) -> frozenset[str]:
        """Its parameters sent in `additionalModelRequestFields` (its own API's names)."""
        return self.params - COMMON

    def asked_tokens(self, given: object) -> int:
        """`maxTokens` for the judge's `max_tokens` (none: the default), within the model's ceiling."""
        asked = given if isinstance(given, int) and not isinstance(given, bool) else DEFAULT_MAX_TOKENS
        return min(asked, self.max_tokens) if self.max_tokens else asked


CLAUDE = COMMON | {"top_k"}
MISTRAL = COMMON | {"top_k"}
FAMILIES: tuple[Family, ...] = (
    Family("anthropic.", CLAUDE),
    Family("anthropic.claude-sonnet-4-5", CLAUDE, one_of=("temperature", "top_p")),
    Family("anthropic.claude-haiku-4-5", CLAUDE, one_of=("temperature", "top_p")),
    Family("anthropic.claude-opus-4-1", CLAUDE, one_of=("temperature", "top_p")),
    Family("anthropic.claude-opus-4-5", CLAUDE, one_of=("temperature", "top_p")),
    Family("meta.llama", frozenset({"max_tokens", "temperature", "top_p"}), max_tokens=2048),
    Family("mistral.", MISTRAL, max_tokens=8192),
    Family("mistral.mistral-7b-instruct", MISTRAL, max_tokens=8192, system=False),
    Family("mistral.mixtral-8x7b-instruct", MISTRAL, max_tokens=4096, system=False),
)
OTHER = Family("", COMMON)


def family_of(model: str) -> Family:
    name = model_id(model)
    matches = [family for family in FAMILIES if name.startswith(family.prefix)]
    return max(matches, key=lambda family: len(family.prefix)) if matches else OTHER


def bedrock_rule(model: str, drop_params: tuple[str, ...] = ()) -> RequestRule:
    """The request rule for `model` on Bedrock: only its family's parameters, never `drop_params`
    (`--drop-params`), the system message folded where the family takes none."""
    family = family_of(model)
    name = f"bedrock-{family.prefix.rstrip('.') or 'other'}"
    return RequestRule(name, fold_system=not family.system, keep_only=family.params, drop=frozenset(drop_params))


__all__ = ["DEFAULT_MAX_TOKENS", "FAMILIES", "INFERENCE_CONFIG", "Family", "bedrock_rule", "family_of", "model_id"]

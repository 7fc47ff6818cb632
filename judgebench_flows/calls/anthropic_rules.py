"""What request each Claude model accepts under each Messages API version: the table, as data.

JudgeBench sends an Anthropic judge its sampling as given (temperature 0, the judge's `max_tokens`).
Anthropic's API version 2023-06-01 takes `temperature`/`top_p`/`top_k` for every Claude model; version
2026-10-21 (the one SDK 2.x names by default) refuses them with a 400, even at their defaults. We name
2023-06-01 on every request, so JudgeBench's temperature 0 reaches the models that take it; a version
or model that refuses sampling gets a rule that sends none. A 400 naming a parameter we did not foresee
is adapted to at run time as for any endpoint (`request_rules.Learned`), and recorded.

Only Messages API parameters are ever sent: an OpenAI-only parameter (`presence_penalty`,
`reasoning_effort`, ...) a judge or option adds is left out by `keep_only`.
"""

from __future__ import annotations

from judgebench_flows.calls.request_rules import RequestRule

# The API version every request names (header `anthropic-version`).
ANTHROPIC_VERSION = "2023-06-01"
SAMPLING_PARAMS = frozenset({"temperature", "top_p", "top_k"})
MESSAGES_PARAMS = frozenset({"max_tokens", "stop_sequences"}) | SAMPLING_PARAMS
# Messages API versions that refuse every sampling parameter, whatever the model.
VERSIONS_WITHOUT_SAMPLING = frozenset({"2026-10-21"})
# Model-name prefixes (after any provider path, case-insensitive) that refuse sampling parameters under
# every version. None of today's Claude models does; the table is where one goes when it appears.
MODELS_WITHOUT_SAMPLING: tuple[str, ...] = ()
# What a request without the judge's own `max_tokens` asks for: the Messages API requires one, and
# JudgeBench's reference code notes 4096 as Claude 3's ceiling.
DEFAULT_MAX_TOKENS = 4096


def takes_sampling(model: str, version: str = ANTHROPIC_VERSION) -> bool:
    name = model.rsplit("/", 1)[-1].lower()
    return version not in VERSIONS_WITHOUT_SAMPLING and not name.startswith(MODELS_WITHOUT_SAMPLING)


def anthropic_rule(model: str, version: str = ANTHROPIC_VERSION, drop_params: tuple[str, ...] = ()) -> RequestRule:
    """The rule for `model` under `version`: the Messages API's parameters only, sampling when it is taken,
    never `drop_params` (`--drop-params`). The system message stays a message: the wire lifts it into the
    top-level `system` (`anthropic_api.messages_body`)."""
    kept = MESSAGES_PARAMS if takes_sampling(model, version) else MESSAGES_PARAMS - SAMPLING_PARAMS
    return RequestRule(f"anthropic-{version}", keep_only=kept, drop=frozenset(drop_params))


__all__ = [
    "ANTHROPIC_VERSION",
    "DEFAULT_MAX_TOKENS",
    "MESSAGES_PARAMS",
    "SAMPLING_PARAMS",
    "VERSIONS_WITHOUT_SAMPLING",
    "anthropic_rule",
    "takes_sampling",
]

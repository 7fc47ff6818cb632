"""Anthropic's Messages API through the anthropic SDK (JudgeBench's `AnthropicAPI`)."""

from __future__ import annotations

from judgebench_flows.core.providers.base import CHAT, Provider

ANTHROPIC = Provider(
    name="anthropic",
    title="Anthropic's Messages API",
    base_url="https://api.anthropic.com",
    base_url_envs=("ANTHROPIC_BASE_URL",),
    key_envs=("ANTHROPIC_API_KEY",),
    wires={CHAT: "anthropic_api:AnthropicTransport"},
    batch="anthropic_batch:AnthropicBatches",
    request_rule="anthropic_rules:anthropic_rule",
    claims=(r"claude.*",),
    priced_hosts=("api.anthropic.com",),
)

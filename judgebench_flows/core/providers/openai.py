"""OpenAI's API, and any OpenAI-compatible endpoint given by URL (vLLM, SGLang, LiteLLM, a gateway)."""

from __future__ import annotations

from judgebench_flows.core.providers.base import CHAT, Provider

OPENAI = Provider(
    name="openai",
    title="OpenAI's API",
    base_url="https://api.openai.com/v1",
    base_url_envs=("OPENAI_BASE_URL", "BASE_URL"),
    key_envs=("OPENAI_API_KEY",),
    wires={
        CHAT: "transport:Transport",
        "completions": "openai_completions:OpenAICompletions",  # JudgeLM, PandaLM
        "pooling": "vllm_pooling:VLLMPooling",  # vLLM's /pooling (reward models)
        "transformers": "local_reward:LocalRewardAPI",  # a reward model in this process
    },
    batch="openai_batch:OpenAIBatches",
    # JudgeBench's run_judge.py: gpt* and o1* to OpenAI (o3, o4 and later reasoning models too)
    claims=(r"gpt.*", r"o\d.*", r"chatgpt.*"),
    priced_hosts=("api.openai.com",),
)

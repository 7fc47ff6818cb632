"""Together AI's OpenAI-compatible API (JudgeBench's `TogetherAPI`, for Llama-3.1-405B)."""

from __future__ import annotations

from judgebench_flows.core.providers.base import IMPLIED, Provider

LLAMA_405B = "meta-llama/Meta-Llama-3.1-405B-Instruct"

TOGETHER = Provider(
    name="together",
    title="Together AI's API",
    base_url="https://api.together.xyz/v1",
    base_url_envs=("TOGETHER_BASE_URL",),
    key_envs=("TOGETHER_API_KEY",),
    wires={"chat": "transport:Transport"},  # OpenAI's wire: the same requests
    claims=(LLAMA_405B.replace(".", r"\."),),
    priced_hosts=("api.together.xyz",),
    keyed_as=IMPLIED,  # OpenAI's requests at Together's URL: the keys of `--base-url https://api.together.xyz/v1`
    # run_judge.py sends the 405B model as "-turbo", Together's serverless name for it
    model_names={LLAMA_405B: f"{LLAMA_405B}-turbo"},
)

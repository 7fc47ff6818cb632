"""Endpoint APIs other than chat completions, for judges that need them.

- "completions": the text-completions API (`POST {base_url}/completions` with a raw `prompt`), which
  JudgeBench uses for JudgeLM and PandaLM. The judge's single user message is the prompt.
- "pooling": vLLM's Pooling API for reward models (`POST {server root}/pooling` with the conversation as
  `messages`). It sits at the server root, so a `--base-url` ending in `/v1` has that suffix removed.
  The answer's `data[0].data` is the score: a one-element list for a sequence-classification head, or
  one value per token (the last token's is the score).

- "transformers": a reward model run in this process (calls.local_reward), for `--reward-backend
  transformers`; its answer has the Pooling API's shape, so both backends share everything after the call.

A call to any of them goes through the same caller as a chat call (limits, retries, call cache, resume); its
answer becomes a `Completion` whose text is the completion, or the score written as text (what the cache
stores and the reward judge reads back).
"""

from __future__ import annotations

import asyncio
import math
import os
from typing import Any

from judgebench_flows.core.completion import Completion
from judgebench_flows.core.secrets import redact

OTHER_APIS = ("completions", "pooling", "transformers")


def endpoint_identity(base_url: str, api: str) -> str:
    """The endpoint part of a call's cache key: unchanged for chat (existing caches stay valid), the API
    named for others (the same messages sent to /pooling and to /chat/completions are different requests)."""
    return base_url if api == "chat" else f"{base_url.rstrip('/')}#{api}"


def server_root(base_url: str) -> str:
    """`http://host:8000/v1` -> `http://host:8000`: where vLLM serves /pooling."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


async def other_api_post(
    client: Any, api: str, base_url: str, model: str, messages: list[dict[str, str]], sampling: dict[str, Any]
) -> Any:
    """One request through the SDK's own `post` (auth, errors, connections stay the SDK's), as for chat."""
    if api == "completions":
        prompt = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
        return await client.post("/completions", cast_to=dict, body={"model": model, "prompt": prompt, **sampling})
    if api == "pooling":  # an absolute URL: the SDK sends it as is, outside its /v1 base
        return await client.post(
            server_root(base_url) + "/pooling", cast_to=dict, body={"model": model, "messages": messages, **sampling}
        )
    if api == "transformers":
        from judgebench_flows.calls.local_reward import local_reward_model

        scorer = local_reward_model(model, os.environ.get("JUDGEBENCH_REWARD_DEVICE") or None)
        score = await asyncio.get_running_loop().run_in_executor(scorer.executor, scorer.score, messages)
        return {"data": [{"index": 0, "object": "pooling", "data": [score]}], "usage": {}}
    raise ValueError(f"unknown endpoint API '{api}'")


def pooled_score(data: Any) -> float:
    """The score in a Pooling API item's `data`: a number, a one-element list, or per-token values (the
    last token's). Anything else is not a reward model's answer (ValueError: retried, then the call fails)."""
    value = data
    if isinstance(value, list):
        if not value:
            raise ValueError("empty pooling output")
        value = value[-1]  # one element, or the last token's
        if isinstance(value, list):
            if len(value) != 1:
                raise ValueError("a token's pooling output is not one score")
            value = value[0]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError("pooling output holds no finite score")
    return float(value)


def answer_of(api: str, response: Any) -> Completion:
    """The answer of a completions or pooling response body (ValueError/TypeError: not a usable body)."""
    if not isinstance(response, dict):
        raise ValueError("the endpoint did not answer with a JSON object")
    usage = response.get("usage") or {}
    prompt_tokens = int(usage.get("prompt_tokens") or 0)
    if api in ("pooling", "transformers"):
        items = response.get("data")
        if not isinstance(items, list) or not items or not isinstance(items[0], dict):
            raise ValueError("pooling answer without data")
        return Completion(repr(pooled_score(items[0].get("data"))), prompt_tokens, 0, finish_reason="stop")
    choices = response.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    text = choice.get("text") if isinstance(choice.get("text"), str) else ""
    return Completion(
        redact(text or ""),
        prompt_tokens,
        int(usage.get("completion_tokens") or 0),
        finish_reason=choice.get("finish_reason"),
    )

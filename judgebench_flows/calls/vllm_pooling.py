"""vLLM's Pooling API for reward models (`POST {server root}/pooling` with the conversation as `messages`):
the OpenAI wire (`transport.Transport`) with its request and answer. It sits at the server root, so a
`--base-url` ending in `/v1` has that suffix removed; the answer's score is read by
`other_apis.pooled_score`, and the caller checks the scores are raw (`other_apis.RawScoreCheck`)."""

from __future__ import annotations

from typing import Any

import openai

from judgebench_flows.calls.other_apis import pooled_completion, server_root
from judgebench_flows.calls.transport import Transport
from judgebench_flows.core.completion import Completion, Sampling


class VLLMPooling(Transport):
    checks_raw_scores = True
    answers_scores = True

    async def send(self, client: openai.AsyncOpenAI, messages: list[dict[str, str]], sampling: Sampling) -> Any:
        # An absolute URL: the SDK sends it as is, outside its /v1 base.
        return await client.post(
            server_root(self.base_url) + "/pooling",
            cast_to=dict,
            body={"model": self.model, "messages": messages, **sampling},
        )

    @staticmethod
    def read(response: Any) -> Completion:
        return pooled_completion(response)

"""The text-completions API (`POST {base_url}/completions` with a raw `prompt`), which JudgeBench uses for
JudgeLM and PandaLM: the OpenAI wire (`transport.Transport`) with its request and answer. The judge's
single user message is the prompt."""

from __future__ import annotations

from typing import Any

import openai

from judgebench_flows.calls.other_apis import unsearched_beams
from judgebench_flows.calls.transport import Transport
from judgebench_flows.core.completion import Completion, Sampling
from judgebench_flows.core.secrets import redact


class OpenAICompletions(Transport):
    async def send(self, client: openai.AsyncOpenAI, messages: list[dict[str, str]], sampling: Sampling) -> Any:
        prompt = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
        return await client.post("/completions", cast_to=dict, body={"model": self.model, "prompt": prompt, **sampling})

    @staticmethod
    def read(response: Any) -> Completion:
        """The first choice's text and the token counts (ValueError/TypeError: not a usable body)."""
        if not isinstance(response, dict):
            raise ValueError("the endpoint did not answer with a JSON object")
        usage = response.get("usage") or {}
        choices = response.get("choices") or [{}]
        choice = choices[0] if isinstance(choices[0], dict) else {}
        text = choice.get("text") if isinstance(choice.get("text"), str) else ""
        return Completion(
            redact(text or ""),
            int(usage.get("prompt_tokens") or 0),
            int(usage.get("completion_tokens") or 0),
            finish_reason=choice.get("finish_reason"),
        )

    def ignored(self, params: Sampling, response: Any) -> tuple[str, str] | None:
        """A beam search answered with fewer choices than beams was no beam search (`unsearched_beams`)."""
        reason = unsearched_beams(params, response)
        return ("use_beam_search", reason) if reason else None

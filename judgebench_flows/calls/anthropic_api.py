"""The wire for Anthropic's Messages API: the official `anthropic` SDK posting one request, and its answer.

The same job as `transport.Transport` (one attempt in, one response body or an exception out; no
retries, limits or cache), for `--provider anthropic`. The request is what JudgeBench's `run_judge.py`
sends a Claude judge: a leading system message as the top-level `system` (empty when there is none),
the other turns as `messages`, the judge's `max_tokens` and sampling (`anthropic_rules` decides which).

Errors come out as the project's `CallError` (`anthropic_call_error`): a 429 or 529 is retried after its
`retry-after`, a bad key stops the run, and a 400 that refuses a sampling parameter names it (`param`,
with the `code` that `request_rules.Learned` adapts to).
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any, cast

import anthropic

from judgebench_flows.calls.anthropic_rules import ANTHROPIC_VERSION, DEFAULT_MAX_TOKENS, SAMPLING_PARAMS
from judgebench_flows.calls.errors import CallError, error_object, http_error
from judgebench_flows.calls.transport import BadAnswerBody, JsonBody, clients_for, json_messages, served_by
from judgebench_flows.core.completion import Completion, Sampling, finish_reason
from judgebench_flows.core.secrets import redact

MESSAGES_PATH = "/v1/messages"


def messages_body(model: str, messages: list[dict[str, str]], params: Sampling) -> JsonBody:
    """The Messages API body for chat messages and the parameters a rule let through."""
    system = ""
    if messages and messages[0].get("role") == "system":
        system, messages = str(messages[0]["content"]), messages[1:]
    return {
        "model": model,
        "max_tokens": DEFAULT_MAX_TOKENS,
        **params,
        "system": system,
        "messages": json_messages([{"role": m["role"], "content": m["content"]} for m in messages]),
    }


def completion_of(response: Any) -> Completion:
    """The answer text (its text blocks; never a thinking block) and token counts of a Messages answer."""
    if not isinstance(response, dict):
        raise BadAnswerBody()
    blocks = response.get("content") or []
    text = "".join(b.get("text") or "" for b in blocks if isinstance(b, dict) and b.get("type") == "text")
    usage = response.get("usage") or {}
    stop = response.get("stop_reason")
    return Completion(
        redact(text),  # an API key echoed back must not reach the cache, the database or a report
        int(usage.get("input_tokens") or 0),
        int(usage.get("output_tokens") or 0),
        finish_reason=finish_reason(stop),
    )


# How a 400 says a parameter is refused outright (not merely out of range: that is our input's error).
REFUSAL = re.compile(r"not (supported|permitted|allowed)|extra inputs|cannot both be specified", re.IGNORECASE)


def named_parameter(message: str, sent: JsonBody) -> str | None:
    """The sampling parameter a 400's message refuses, if it names one this request carried."""
    if not REFUSAL.search(message):
        return None
    for name in sorted(SAMPLING_PARAMS & sent.keys()):
        if re.search(rf"(?<![A-Za-z_]){name}(?![A-Za-z_])", message):
            return name
    return None


def anthropic_call_error(exc: anthropic.APIError, sent: JsonBody) -> CallError:
    """The `CallError` of an anthropic SDK failure; a 400 refusing a sampling parameter of `sent` names it
    (`param`), which `request_rules.Learned` adapts to."""
    if isinstance(exc, anthropic.APITimeoutError):
        return CallError("timeout")
    if isinstance(exc, anthropic.APIConnectionError):
        return CallError("connection")
    if not isinstance(exc, anthropic.APIStatusError):
        return CallError("other", message=f"{type(exc).__name__}: {exc}")
    said = str(error_object(exc.body).get("message") or exc.message)
    param = named_parameter(said, sent) if exc.status_code == 400 else None
    response = exc.response
    return http_error(
        exc.status_code, exc.body, response.headers, response.text if response is not None else "", param=param
    )


class AnthropicTransport:
    """Several `anthropic.AsyncAnthropic` clients for one endpoint, used in turn (as `Transport` does, for
    the same reason: one small connection pool per client). Every request names `version`
    (`ANTHROPIC_VERSION` unless a test asks for another)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str,
        request_timeout: float,
        concurrency: int,
        version: str = ANTHROPIC_VERSION,
    ):
        self.base_url = base_url
        self.model = model
        self.clients = [
            anthropic.AsyncAnthropic(
                api_key=api_key,
                base_url=base_url,
                max_retries=0,
                timeout=request_timeout,
                default_headers={"anthropic-version": version},
            )
            for _ in range(clients_for(concurrency))
        ]
        self._next_client = itertools.cycle(self.clients)

    checks_raw_scores = False
    answers_scores = False

    async def post(self, messages: list[dict[str, str]], sampling: Sampling) -> Any:
        """One attempt: the response body as parsed JSON."""
        body = messages_body(self.model, messages, sampling)
        try:
            return await next(self._next_client).post(MESSAGES_PATH, cast_to=cast(Any, dict[str, object]), body=body)
        except json.JSONDecodeError as exc:
            raise BadAnswerBody() from exc
        except anthropic.APIError as exc:
            raise anthropic_call_error(exc, body) from None

    @staticmethod
    def answer(response: Any) -> Completion:
        try:
            return served_by(completion_of(response), response)  # Anthropic's model id as it answered
        except (ValueError, TypeError, AttributeError) as exc:
            raise BadAnswerBody() from exc

    def ignored(self, params: Sampling, response: Any) -> tuple[str, str] | None:
        return None

    async def model_entry(self, timeout: float) -> None:
        """Each answer names the model id that answered (`served_by`): nothing more to ask."""
        return None

    async def aclose(self) -> None:
        for client in self.clients:
            await client.close()

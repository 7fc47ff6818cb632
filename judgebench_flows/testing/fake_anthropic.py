"""A real server speaking Anthropic's Messages API on loopback, with the real API's validation.

`FakeOpenAIServer` with another API on top: the same scripted answers (a string, or a responder given
the request body), seeded faults, counters and lifecycle, but `POST /v1/messages` validated as
Anthropic validates it, so the official `anthropic` client and our request rules meet the same refusals
they would in production:

- `anthropic-version` is required; under version 2026-10-21 `temperature`, `top_p` and `top_k` are
  refused (400), even at their defaults; 2023-06-01 takes them.
- `model`, `max_tokens` and `messages` are required; a `system` role inside `messages` is refused (the
  system prompt is the top-level `system`); turns alternate and start with the user; a field the API
  does not know is refused ("Extra inputs are not permitted"); temperature stays within [0, 1].
- Errors have Anthropic's shape `{"type": "error", "error": {"type", "message"}}`; a bad key is 401
  (`x-api-key` or `Authorization: Bearer`), an unknown model 404, rate limiting 429 with `retry-after`,
  overload 529 (the fault band `rate_503` answers 529 here).

    python -m judgebench_flows.testing.fake_anthropic --port 8001 --answer "[[A>B]]"
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from collections.abc import Callable
from typing import Any

from judgebench_flows.testing.fake_openai import (
    FakeOpenAIServer,
    FaultSettings,
    _Handler,
    _word_count,
    request_key,
    serve,
)

MESSAGES_PATH = "/v1/messages"
API_VERSIONS = ("2023-01-01", "2023-06-01", "2026-10-21")
VERSIONS_WITHOUT_SAMPLING = frozenset({"2026-10-21"})
SAMPLING_PARAMS = ("temperature", "top_k", "top_p")
MESSAGES_FIELDS = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "metadata",
        "stop_sequences",
        "stream",
        "temperature",
        "top_k",
        "top_p",
        "tools",
        "tool_choice",
        "thinking",
        "service_tier",
    }
)


def error_body(error_type: str, message: str) -> dict[str, Any]:
    """Anthropic's error shape."""
    return {"type": "error", "error": {"type": error_type, "message": message}}


def invalid(message: str) -> dict[str, Any]:
    return error_body("invalid_request_error", message)


def version_problem(version: str | None) -> str | None:
    if not version:
        return "anthropic-version: header is required"
    if version not in API_VERSIONS:
        return f"anthropic-version: invalid version '{version}'"
    return None


def messages_problem(body: dict[str, Any], version: str) -> str | None:
    """What the Messages API refuses in this body under `version` (None: it is a valid request)."""
    extra = sorted(set(body) - MESSAGES_FIELDS)
    if extra:
        return f"{extra[0]}: Extra inputs are not permitted"
    for name in ("model", "max_tokens", "messages"):
        if name not in body:
            return f"{name}: Field required"
    if not isinstance(body["max_tokens"], int) or isinstance(body["max_tokens"], bool) or body["max_tokens"] < 1:
        return "max_tokens: Input should be a valid integer greater than or equal to 1"
    if version in VERSIONS_WITHOUT_SAMPLING:
        refused = next((name for name in SAMPLING_PARAMS if name in body), None)
        if refused:
            return f"{refused}: sampling parameters are not supported in API version {version}"
    temperature = body.get("temperature")
    if temperature is not None and not (isinstance(temperature, (int, float)) and 0 <= temperature <= 1):
        return "temperature: Input should be less than or equal to 1"
    if "system" in body and not isinstance(body["system"], (str, list)):
        return "system: Input should be a valid string"
    return turns_problem(body["messages"])


def turns_problem(messages: Any) -> str | None:
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    previous = None
    for index, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role == "system":
            return (
                f'messages.{index}.role: Unexpected role "system". The Messages API accepts a top-level '
                '`system` parameter, not "system" as an input message role.'
            )
        if role not in ("user", "assistant"):
            return f"messages.{index}.role: Input should be 'user' or 'assistant'"
        if index == 0 and role != "user":
            return 'messages: first message must use the "user" role'
        if role == previous:
            return 'messages: roles must alternate between "user" and "assistant"'
        if not isinstance(message.get("content"), (str, list)):
            return f"messages.{index}.content: Field required"
        previous = role
    return None


def message_body(model: str, body: dict[str, Any], text: str, finish_reason: str | None) -> dict[str, Any]:
    """A Messages API answer."""
    texts = [str(body.get("system") or "")] + [
        m["content"] if isinstance(m["content"], str) else json.dumps(m["content"]) for m in body["messages"]
    ]
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "max_tokens" if finish_reason == "length" else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": sum(_word_count(t) for t in texts), "output_tokens": _word_count(text)},
    }


class FakeAnthropicServer(FakeOpenAIServer):
    """`POST /v1/messages` as Anthropic answers it; `base_url` is the API root the SDK takes."""

    @property
    def base_url(self) -> str:
        return f"http://{self._host}:{self.port}"

    def _model_paths(self) -> dict[str, Callable[[_Handler, bytes], None]]:
        return {MESSAGES_PATH: self._answer_messages}

    def _authorized(self, handler: _Handler, settings: FaultSettings) -> bool:
        if settings.api_key is None:
            return True
        return handler.headers.get("x-api-key") == settings.api_key or handler.headers.get("Authorization", "") == (
            f"Bearer {settings.api_key}"
        )

    def request_problem(self, body: Any, version: str) -> str | None:
        """Why the API would refuse this Messages request under `version` (synchronous or in a batch), or
        None: its validation, then a parameter this model refuses (`rejected_params`)."""
        problem = messages_problem(body, version) if isinstance(body, dict) else "body: invalid JSON"
        refused = next((name for name in sorted(self.settings.rejected_params) if name in (body or {})), None)
        if problem is None and refused:
            problem = f"{refused}: this parameter is not supported by this model"
        return problem

    def _answer_messages(self, handler: _Handler, body_bytes: bytes) -> None:
        """Validate like the real API, then the faults, then the responder; counts one outcome."""
        settings = self.settings
        try:
            body = json.loads(body_bytes or b"null")
        except ValueError:
            body = None
        if not self._authorized(handler, settings):
            self._reply(handler, 401, error_body("authentication_error", "invalid x-api-key"))
            return
        version = handler.headers.get("anthropic-version")
        problem = version_problem(version) or self.request_problem(body, str(version))
        if problem is not None:
            self._reply(handler, 400, invalid(problem))
            return
        model = str(body["model"])
        if settings.models is not None and model not in settings.models:
            self._reply(handler, 404, error_body("not_found_error", f"model: {model}"))
            return
        if self._fault(handler, self._choose_fault(request_key(body), settings), settings):
            return
        scripted = self._scripted(handler, body)
        if scripted is None:
            return
        text, extra = scripted
        answered_as = settings.served_model or model  # the model id behind an alias (`served_model`)
        self._reply(handler, 200, message_body(answered_as, body, text, extra.get("finish_reason")), request_key(body))

    def _fault_error(self, fault: str, settings: FaultSettings) -> tuple[int, dict[str, Any], dict[str, str]]:
        """Anthropic's 429 (with `retry-after`), 500 and 529 (the fault band `rate_503`)."""
        if fault == "429":
            message = "Number of request tokens has exceeded your per-minute rate limit"
            return 429, error_body("rate_limit_error", message), {"retry-after": f"{settings.retry_after:g}"}
        if fault == "500":
            return 500, error_body("api_error", "Internal server error"), {}
        return 529, error_body("overloaded_error", "Overloaded"), {}

    def _responder_failed(self, handler: _Handler, message: str) -> None:
        self._reply(handler, 500, error_body("api_error", message))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m judgebench_flows.testing.fake_anthropic",
        description="Serve a fake Anthropic Messages API on loopback (validated as the real API validates "
        "requests), for `judgebench run --provider anthropic --base-url http://127.0.0.1:PORT`.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--answer", default="My final verdict is [[A>B]]")
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--rate-429", type=float, default=0.0)
    parser.add_argument("--rate-529", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    server = FakeAnthropicServer(
        args.answer,
        api_key=args.api_key,
        rate_429=args.rate_429,
        rate_503=args.rate_529,
        seed=args.seed,
        host=args.host,
        port=args.port,
    )
    return serve(server)


if __name__ == "__main__":
    sys.exit(main())

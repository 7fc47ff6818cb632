"""Anthropic's Message Batches for `--batch --provider anthropic` (`batch.BatchAPI`): requests posted to
`/v1/messages/batches` (at most 100,000 requests / 256 MB per batch; `batch` splits), polled until
`processing_status` is `ended`, results read from its `results_url`.

Each request's `params` is exactly the body the synchronous Messages wire posts (`messages_body`), under
the same API version header, so the same request rules hold inside batches.
"""

from __future__ import annotations

import json
from typing import Any, cast

import anthropic
from pydantic import JsonValue
from typing_extensions import TypedDict

from judgebench_flows.calls.anthropic_api import anthropic_call_error, messages_body
from judgebench_flows.calls.batch import BatchState, LineResult
from judgebench_flows.calls.transport import JsonBody
from judgebench_flows.core.completion import Sampling

BATCHES_PATH = "/v1/messages/batches"
# How a refused line reads: the error type's usual HTTP status.
ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


class MessageBatch(TypedDict, total=False):
    """A Message Batch as the API describes it (what `state` and `results` read of it)."""

    id: str
    processing_status: str
    request_counts: dict[str, int]
    results_url: str | None


class LineOutcome(TypedDict, total=False):
    """A results line's `result`: `succeeded` with the `message`, `errored` with the error body (whose
    `error` is the error object), or `canceled`/`expired`."""

    type: str
    message: JsonValue
    error: dict[str, JsonValue]


class AnthropicBatches:
    provider = "anthropic"
    max_lines = 100_000
    max_bytes = 256 * 1024 * 1024
    min_lines = 1

    def __init__(self, client: anthropic.AsyncAnthropic, model: str):
        self.client, self.model = client, model

    @classmethod
    def for_wire(cls, wire: Any, api_key: str, settings: Any = None) -> AnthropicBatches:
        """The batch API on the Messages wire's first SDK client."""
        return cls(wire.clients[0], wire.model)

    def body(self, messages: list[dict[str, str]], sampling: Sampling) -> JsonBody:
        return messages_body(self.model, messages, sampling)

    def line(self, custom_id: str, body: JsonBody) -> bytes:
        return json.dumps({"custom_id": custom_id, "params": body}, ensure_ascii=False).encode()

    async def submit(self, lines: list[bytes]) -> str:
        requests = [json.loads(line) for line in lines]
        batch = await self._call("post", BATCHES_PATH, body={"requests": requests})
        return str(batch["id"])

    async def state(self, batch_id: str) -> BatchState:
        batch = await self._call("get", f"{BATCHES_PATH}/{batch_id}")
        status = str(batch.get("processing_status"))
        counts = {k: int(v) for k, v in (batch.get("request_counts") or {}).items()}
        return BatchState(status, counts, ended=status == "ended", handle=batch)

    async def cancel(self, batch_id: str) -> None:
        await self._call("post", f"{BATCHES_PATH}/{batch_id}/cancel")

    async def results(self, state: BatchState) -> dict[str, LineResult]:
        url = state.handle.get("results_url") or f"{BATCHES_PATH}/{state.handle['id']}/results"
        text = await self._call_text(url)
        results: dict[str, LineResult] = {}
        for raw in text.splitlines():
            if raw.strip():
                line = json.loads(raw)
                results[str(line["custom_id"])] = line_result(line.get("result") or LineOutcome())
        return results

    async def _call_text(self, url: str) -> str:
        try:
            return str(await self.client.get(url, cast_to=str))
        except anthropic.APIError as exc:
            raise anthropic_call_error(exc, {}) from None

    async def _call(self, method: str, path: str, body: JsonBody | None = None) -> MessageBatch:
        try:
            if method == "post":
                return await self.client.post(path, cast_to=cast(Any, dict[str, object]), body=body)
            return await self.client.get(path, cast_to=cast(Any, dict[str, object]))
        except anthropic.APIError as exc:
            raise anthropic_call_error(exc, {}) from None


def line_result(result: LineOutcome) -> LineResult:
    kind = result.get("type")
    if kind == "succeeded":
        return LineResult(200, result.get("message"))
    if kind == "errored":
        body = result.get("error") or {}
        inner = body.get("error")
        error: dict[str, JsonValue] = inner if isinstance(inner, dict) else body
        return LineResult(ERROR_STATUS.get(str(error.get("type")), 500), {"error": error})
    return LineResult(0)  # canceled, expired: never ran

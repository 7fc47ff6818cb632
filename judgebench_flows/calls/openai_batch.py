"""OpenAI's Batch API for `--batch` (`batch.BatchAPI`): a JSONL file uploaded with purpose `batch`, a batch
created on it for `/v1/chat/completions`, its output and error files read when it ends.

One model per input file (a run calls one model), at most 50,000 lines and 200 MB per file (`batch`
splits). Each line's body is exactly what the synchronous wire posts, so the request rules (reasoning
models: no temperature, `max_completion_tokens`, o1's folded system prompt) hold inside batches too.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import openai
from pydantic import JsonValue
from typing_extensions import TypedDict

from judgebench_flows.calls.batch import BatchState, LineResult
from judgebench_flows.calls.transport import JsonBody, json_messages, openai_call_error
from judgebench_flows.core.completion import Sampling

CHAT_URL: Literal["/v1/chat/completions"] = "/v1/chat/completions"
ENDED = frozenset({"completed", "expired", "cancelled", "failed"})
# A whole-batch refusal caused by what the run asked for (exit 2), not by the provider (exit 7).
OUR_INPUT_CODES = frozenset({"model_not_found", "invalid_model"})


class OpenAIBatches:
    provider = "openai"
    max_lines = 50_000
    max_bytes = 200 * 1024 * 1024
    min_lines = 1
    # the URL each line and the batch name (Azure OpenAI's batches take `/chat/completions`)
    chat_url: str = CHAT_URL

    def __init__(self, client: openai.AsyncOpenAI, model: str):
        self.client, self.model = client, model

    @classmethod
    def for_wire(cls, wire: Any, api_key: str, settings: Any = None) -> OpenAIBatches:
        """The batch API on the chat wire's first SDK client."""
        return cls(wire.clients[0], wire.model)

    def body(self, messages: list[dict[str, str]], sampling: Sampling) -> JsonBody:
        return {"model": self.model, "messages": json_messages(messages), **sampling}

    def line(self, custom_id: str, body: JsonBody) -> bytes:
        line = {"custom_id": custom_id, "method": "POST", "url": self.chat_url, "body": body}
        return (json.dumps(line, ensure_ascii=False) + "\n").encode()

    async def submit(self, lines: list[bytes]) -> str:
        try:
            return await self._submit(lines)
        except openai.APIError as exc:
            raise openai_call_error(exc) from None

    async def _submit(self, lines: list[bytes]) -> str:
        upload = await self.client.files.create(file=("judgebench-batch.jsonl", b"".join(lines)), purpose="batch")
        batch = await self.client.batches.create(
            input_file_id=upload.id,
            endpoint=self.chat_url,  # type: ignore[arg-type]  # Azure's `/chat/completions` is not in the SDK's Literal
            completion_window="24h",
            metadata={"source": "judgebench-flows"},
        )
        return batch.id

    async def state(self, batch_id: str) -> BatchState:
        try:
            batch = await self.client.batches.retrieve(batch_id)
        except openai.APIError as exc:
            raise openai_call_error(exc) from None
        counts = batch.request_counts
        state = BatchState(
            batch.status,
            {"completed": counts.completed, "failed": counts.failed, "total": counts.total} if counts else {},
            ended=batch.status in ENDED,
            handle=batch,
        )
        if batch.status == "failed":
            errors = list(batch.errors.data or []) if batch.errors else []
            state.refused = "; ".join(f"{e.code}: {e.message}" for e in errors) or "failed without a reason"
            state.our_input = any(e.code in OUR_INPUT_CODES for e in errors)
        return state

    async def cancel(self, batch_id: str) -> None:
        try:
            await self.client.batches.cancel(batch_id)
        except openai.APIError as exc:
            raise openai_call_error(exc) from None

    async def results(self, state: BatchState) -> dict[str, LineResult]:
        batch = state.handle
        results: dict[str, LineResult] = {}
        for file_id in (batch.output_file_id, batch.error_file_id):
            if file_id:
                try:
                    content = await self.client.files.content(file_id)
                except openai.APIError as exc:
                    raise openai_call_error(exc) from None
                for text in content.text.splitlines():
                    if text.strip():
                        custom_id, result = line_result(json.loads(text))
                        results[custom_id] = result
        return results


class LineResponse(TypedDict, total=False):
    status_code: int
    body: JsonValue


class OutputLine(TypedDict, total=False):
    """A line of a batch's output or error file (`custom_id` always; a response, or an error)."""

    custom_id: str
    response: LineResponse | None
    error: dict[str, JsonValue] | None


def line_result(line: OutputLine) -> tuple[str, LineResult]:
    """An output or error file line: the answer or error status, or 0 for a line the batch never ran."""
    response = line.get("response")
    if isinstance(response, dict) and response.get("status_code"):
        return str(line["custom_id"]), LineResult(int(response["status_code"]), response.get("body"))
    error = line.get("error") or {}
    if error.get("code") in ("batch_expired", "batch_cancelled"):
        return str(line["custom_id"]), LineResult(0)
    return str(line["custom_id"]), LineResult(500, {"error": error})

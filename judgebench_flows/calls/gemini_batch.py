"""The Gemini API's Batch Mode for `--batch --provider gemini` (`batch.BatchAPI`), through the official
google-genai SDK (imported by Gemini batch runs only: it takes a while to import).

A JSONL file of requests is uploaded through the Files API (`{"key": <custom id>, "request":
<GenerateContentRequest>}` per line), a batch is created on it for the run's model
(`models/<model>:batchGenerateContent`), polled until its state ends, and its responses file read back
(`{"key", "response"}` or `{"key", "error"}` per line). Batch Mode speaks the native Gemini API, not the
OpenAI-compatible one: each line is the synchronous chat request (`GoogleTransport.body`: the same token
budget) translated field by field, and each response is translated back into the chat completion the
synchronous wire would have read, so answers, token counts and the call cache are the same either way.
Google bills Batch Mode at half the standard price.
"""

from __future__ import annotations

import io
import json
import re
from typing import Any

from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types
from pydantic import JsonValue
from typing_extensions import TypedDict

from judgebench_flows.calls.batch import BatchState, LineResult
from judgebench_flows.calls.errors import CallError, http_error
from judgebench_flows.calls.google_api import EFFORT_THINKING_TOKENS, REFUSED, GoogleTransport
from judgebench_flows.calls.transport import BadAnswerBody, JsonBody
from judgebench_flows.core.completion import Sampling
from judgebench_flows.core.errors import BatchRefused

ENDED = frozenset({"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED"})
OPENAI_SUFFIX = "/v1beta/openai"
# Chat parameters and their GenerationConfig names (what is not here is not sent in a batch line).
GENERATION_CONFIG = {
    "temperature": "temperature",
    "top_p": "topP",
    "max_tokens": "maxOutputTokens",
    "max_completion_tokens": "maxOutputTokens",
    "presence_penalty": "presencePenalty",
    "frequency_penalty": "frequencyPenalty",
    "seed": "seed",
    "n": "candidateCount",
    "top_k": "topK",
}
FINISH_REASONS = {"STOP": "stop", "MAX_TOKENS": "length", "SAFETY": "content_filter", "RECITATION": "content_filter"}


def sdk_root(base_url: str) -> str:
    """The API root the SDK takes: the OpenAI-compatible base URL without `/v1beta/openai`."""
    root = base_url.rstrip("/")
    return root[: -len(OPENAI_SUFFIX)] if root.endswith(OPENAI_SUFFIX) else root


class Part(TypedDict, total=False):
    text: str
    thought: bool


class Content(TypedDict, total=False):
    role: str
    parts: list[Part]


class Candidate(TypedDict, total=False):
    content: Content | None
    finishReason: str | None


class UsageMetadata(TypedDict, total=False):
    promptTokenCount: int
    candidatesTokenCount: int
    totalTokenCount: int


class GenerateContentResponse(TypedDict, total=False):
    """A batch line's response: what `chat_completion` reads of a native GenerateContentResponse."""

    candidates: list[Candidate]
    usageMetadata: UsageMetadata
    modelVersion: str


class ResponsesLine(TypedDict, total=False):
    """A line of a batch's responses file: its `key` (our custom id) and a `response` or an `error`."""

    key: str
    response: GenerateContentResponse
    error: dict[str, JsonValue]


def native_request(chat: JsonBody) -> JsonBody:
    """A chat completions body as the native GenerateContentRequest Batch Mode takes (no model: the
    batch names it)."""
    sent = chat.get("messages")
    messages = [m for m in sent if isinstance(m, dict)] if isinstance(sent, list) else []
    request: JsonBody = {}
    if messages and messages[0].get("role") == "system":
        request["systemInstruction"] = {"parts": [{"text": str(messages.pop(0)["content"])}]}
    request["contents"] = [
        {"role": "model" if m.get("role") == "assistant" else "user", "parts": [{"text": str(m.get("content"))}]}
        for m in messages
    ]
    config = {GENERATION_CONFIG[k]: v for k, v in chat.items() if k in GENERATION_CONFIG}
    stop = chat.get("stop")
    if stop:
        config["stopSequences"] = list(stop) if isinstance(stop, list) else [stop]
    if chat.get("reasoning_effort") in EFFORT_THINKING_TOKENS:
        config["thinkingConfig"] = {"thinkingBudget": EFFORT_THINKING_TOKENS[str(chat["reasoning_effort"])]}
    if config:
        request["generationConfig"] = config
    return request


def chat_completion(response: GenerateContentResponse) -> JsonBody:
    """A native GenerateContentResponse as the chat completion the synchronous wire reads: the answer's
    text parts (never a thought), its finish reason, and the usage (thinking in `total_tokens`)."""
    candidates = response.get("candidates") or []
    candidate = candidates[0] if candidates and isinstance(candidates[0], dict) else {}
    parts: list[Part] = (candidate.get("content") or {}).get("parts") or []
    text = "".join(str(p.get("text") or "") for p in parts if isinstance(p, dict) and not p.get("thought"))
    usage = response.get("usageMetadata") or {}
    prompt, answer = int(usage.get("promptTokenCount") or 0), int(usage.get("candidatesTokenCount") or 0)
    finish = candidate.get("finishReason")
    choice: JsonBody = {"index": 0, "finish_reason": FINISH_REASONS.get(str(finish), finish)}
    if candidate.get("content") is not None:
        choice["message"] = {"role": "assistant", "content": text}
    return {
        "object": "chat.completion",
        "model": response.get("modelVersion"),
        "choices": [choice],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": answer,
            "total_tokens": int(usage.get("totalTokenCount") or prompt + answer),
        },
    }


def line_result(line: ResponsesLine) -> tuple[str, LineResult]:
    """A responses-file line as the synchronous wire's outcome: the chat completion, or the error with a
    refused field named by its chat parameter (so the run drops it, as a synchronous 400 would). An
    answer without a message (Gemini under load) is a failed line, asked again in a later batch."""
    key, error = str(line.get("key")), line.get("error")
    if isinstance(error, dict):
        code = error.get("code")
        status = int(code) if isinstance(code, (int, float, str)) and code else 500
        message = str(error.get("message") or "")
        param = refused_parameter(message) if status == 400 else None
        if param:
            error = {**error, "code": "unsupported_parameter", "param": param}
        return key, LineResult(status, {"error": error})
    completion = chat_completion(line.get("response") or {})
    try:
        GoogleTransport.read(completion)
    except BadAnswerBody:
        return key, LineResult(500, {"error": {"message": "Gemini answered without a message"}})
    return key, LineResult(200, completion)


def refused_parameter(message: str) -> str | None:
    """The chat parameter whose GenerationConfig field a 400 refuses (`Unknown name "topK"`), if any."""
    if not REFUSED.search(message):
        return None
    for chat_name, native in GENERATION_CONFIG.items():
        if re.search(rf"(?<![A-Za-z_])({native}|{chat_name})(?![A-Za-z_])", message):
            return chat_name
    return None


def genai_call_error(exc: genai_errors.APIError) -> CallError:
    """google-genai's error as the project's `CallError` (status, Google's status name, message)."""
    status = int(exc.code or 500)
    return http_error(status, {"error": {"code": exc.status or status, "message": str(exc.message or exc)}})


class GeminiBatches:
    provider = "gemini"
    max_lines = 100_000
    max_bytes = 2 * 1024 * 1024 * 1024  # the Files API's limit per file
    min_lines = 1

    def __init__(self, wire: GoogleTransport, api_key: str):
        self.wire, self.model = wire, wire.model
        options = genai_types.HttpOptions(base_url=sdk_root(wire.base_url), api_version="v1beta")
        self.client = genai.Client(api_key=api_key, http_options=options).aio
        wire.closers.append(self.client.aclose)

    @classmethod
    def for_wire(cls, wire: GoogleTransport, api_key: str, settings: Any = None) -> GeminiBatches:
        return cls(wire, api_key)

    def body(self, messages: list[dict[str, str]], sampling: Sampling) -> JsonBody:
        return native_request(self.wire.body(messages, sampling))

    def line(self, custom_id: str, body: JsonBody) -> bytes:
        return (json.dumps({"key": custom_id, "request": body}, ensure_ascii=False) + "\n").encode()

    async def submit(self, lines: list[bytes]) -> str:
        try:
            upload = await self.client.files.upload(
                file=io.BytesIO(b"".join(lines)),
                config=genai_types.UploadFileConfig(display_name="judgebench-batch", mime_type="jsonl"),
            )
            job = await self.client.batches.create(
                model=self.model, src=str(upload.name), config={"display_name": "judgebench-flows"}
            )
        except genai_errors.APIError as exc:
            if exc.code == 404:  # no such model (or not for Batch Mode): our input, exit 2
                raise BatchRefused(f"gemini refused a batch for {self.model}: {exc.message}", our_input=True) from None
            raise genai_call_error(exc) from None
        return str(job.name)

    async def state(self, batch_id: str) -> BatchState:
        try:
            job = await self.client.batches.get(name=batch_id)
        except genai_errors.APIError as exc:
            raise genai_call_error(exc) from None
        status = job.state.value if job.state is not None else "JOB_STATE_UNSPECIFIED"
        state = BatchState(status, ended=status in ENDED, handle=job)
        if status == "JOB_STATE_FAILED":
            state.refused = str(job.error.message if job.error and job.error.message else "failed without a reason")
        return state

    async def cancel(self, batch_id: str) -> None:
        try:
            await self.client.batches.cancel(name=batch_id)
        except genai_errors.APIError as exc:
            raise genai_call_error(exc) from None

    async def results(self, state: BatchState) -> dict[str, LineResult]:
        """Each line's outcome; an expired or cancelled batch's lines without one are left out (not run)."""
        dest = state.handle.dest
        if dest is None or not dest.file_name:
            return {}
        try:
            data = await self.client.files.download(file=dest.file_name)
        except genai_errors.APIError as exc:
            raise genai_call_error(exc) from None
        results: dict[str, LineResult] = {}
        for text in bytes(data or b"").decode().splitlines():
            if text.strip():
                key, result = line_result(json.loads(text))
                results[key] = result
        return results

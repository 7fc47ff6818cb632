"""A real server speaking OpenAI's Files and Batch APIs on loopback, with the real API's validation.

`FakeOpenAIServer` (its scripted answers, its OpenAI rules for reasoning models, its counters) with
`POST /v1/files` (multipart, purpose `batch`), `POST /v1/batches`, `GET /v1/batches/{id}`,
`POST /v1/batches/{id}/cancel` and `GET /v1/files/{id}/content` on top. A batch is validated as OpenAI
validates it (each line a JSON object with a unique `custom_id`, `method` POST, the batch's `url`, a
`body`; one model per file; at most `max_lines` lines and 200 MB): a file that breaks a rule makes the
batch `failed` with the reasons in `errors`, as the real API does after `validating`.

Each line is answered as the chat endpoint would answer it (400 for what the model refuses), unless
one of the injected outcomes applies: `line_failure_rate` of the lines fail with a 500 or a 429
(seeded), and `expire_after` makes a batch expire once that many of its lines were done, the rest in
its error file as `batch_expired` (`expire_after=0`: every batch expires with nothing done). `hold`
keeps every batch `in_progress` until released (a batch that never finishes, unless cancelled);
`turnaround` answers a batch no sooner than that many seconds after it was created. Counters:
`submitted_lines` (custom id -> how often it was submitted), `answered_lines` (how often it was
answered: paid), `batches_created`; `requests` still counts
synchronous chat calls only.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
import threading
import time
import uuid
from collections import Counter
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

from judgebench_flows.testing.fake_anthropic import FakeAnthropicServer, message_body, version_problem
from judgebench_flows.testing.fake_anthropic import error_body as anthropic_error
from judgebench_flows.testing.fake_anthropic import invalid as anthropic_invalid
from judgebench_flows.testing.fake_openai import (
    FakeOpenAIServer,
    _error_body,
    _Handler,
    _message_texts,
    _word_count,
    chat_payload,
    openai_rejection,
    serve,
)

CHAT_URL = "/v1/chat/completions"
MAX_FILE_BYTES = 200 * 1024 * 1024


@dataclasses.dataclass
class FakeBatch:
    id: str
    input_file_id: str
    lines: list[dict[str, Any]]
    created_at: float
    status: str = "validating"
    errors: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    output_file_id: str | None = None
    error_file_id: str | None = None
    completed: int = 0
    failed: int = 0
    endpoint: str = CHAT_URL

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "input_file_id": self.input_file_id,
            "completion_window": "24h",
            "status": self.status,
            "created_at": int(self.created_at),
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "errors": {"object": "list", "data": self.errors} if self.errors else None,
            "request_counts": {"total": len(self.lines), "completed": self.completed, "failed": self.failed},
            "metadata": {},
        }


def file_problems(
    lines: list[Any], max_lines: int, size: int, chat_url: str = CHAT_URL, mismatch_code: str = "mismatched_model"
) -> list[dict[str, Any]]:
    """What OpenAI's batch validation reports about an input file (empty: valid); Azure OpenAI's checks the
    same with its own URL and code names."""
    if size > MAX_FILE_BYTES:
        return [{"code": "file_too_large", "message": "the input file exceeds 200 MB", "line": None}]
    if len(lines) > max_lines:
        return [{"code": "too_many_requests", "message": f"a batch holds at most {max_lines} requests", "line": None}]
    problems: list[dict[str, Any]] = []
    seen: set[str] = set()
    models: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not isinstance(line, dict) or not isinstance(line.get("body"), dict):
            problems.append({"code": "invalid_json_line", "message": "not a request object", "line": number})
            continue
        if line.get("method") != "POST" or line.get("url") != chat_url:
            problems.append({"code": "invalid_url", "message": "url must be the batch's endpoint", "line": number})
        if line.get("custom_id") in seen:
            problems.append({"code": "duplicate_custom_id", "message": "custom_id must be unique", "line": number})
        seen.add(str(line.get("custom_id")))
        models.add(str(line["body"].get("model")))
    if len(models) > 1:
        message = f"all requests of a batch must use the same model, got {', '.join(sorted(models))}"
        problems.append({"code": mismatch_code, "message": message, "line": None})
    return problems


class BatchFaults:
    """What a fake batch API injects and counts, whatever its wire (mixed into a fake server)."""

    MAX_LINES = 50_000  # the provider's per-batch request limit

    def __init__(
        self,
        *args: Any,
        max_lines: int | None = None,
        line_failure_rate: float = 0.0,
        expire_after: int | None = None,
        hold: bool = False,
        turnaround: float = 0.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.max_lines = self.MAX_LINES if max_lines is None else max_lines
        self.line_failure_rate, self.expire_after, self.hold = line_failure_rate, expire_after, hold
        self.turnaround = turnaround
        self.cancelled_batches = 0
        self.submitted_lines: Counter[str] = Counter()
        self.answered_lines: Counter[str] = Counter()
        self.batches_created = 0
        self._batch_lock = threading.Lock()
        self._line_rng = random.Random(kwargs.get("seed", 0))

    def release(self) -> None:
        """Let held batches finish at their next status read."""
        self.hold = False

    def _due(self, created: float) -> bool:
        """Whether a batch created at `created` (time.time()) may be answered now."""
        return not self.hold and time.time() >= created + self.turnaround

    def _line_fault(self) -> int | None:
        """The injected failure of one line: 500, 429, or None (seeded)."""
        if self.line_failure_rate and self._line_rng.random() < self.line_failure_rate:
            return 500 if self._line_rng.random() < 0.5 else 429
        return None


class FakeBatchServer(BatchFaults, FakeOpenAIServer):
    """OpenAI's chat endpoint plus its Files and Batch APIs (see the module docstring). `API_ROOT`, `chat_url`,
    `MISMATCH_CODE` and `_line_problems` are what a provider speaking the same API differently (Azure
    OpenAI: `fake_azure.FakeAzureBatchServer`) changes."""

    API_ROOT = "/v1"  # the Files and Batch APIs' paths start with it
    chat_url = CHAT_URL  # each line's `url` and the batch's `endpoint`
    MISMATCH_CODE = "mismatched_model"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, FakeBatch] = {}

    # ----- routing ---------------------------------------------------------------------------------

    def _batch_path(self, handler: _Handler) -> str | None:
        """The path below `API_ROOT` when the request is for the Files or Batch API, else None."""
        path = handler.path.split("?", 1)[0].rstrip("/")
        below = path.removeprefix(self.API_ROOT)
        return below if below != path and below.startswith(("/files", "/batches")) else None

    def _handle_post(self, handler: _Handler) -> None:
        path = self._batch_path(handler)
        if path == "/files":
            self._create_file(handler, handler.read_body())
        elif path == "/batches":
            self._create_batch(handler, handler.read_body())
        elif path is not None and path.startswith("/batches/") and path.endswith("/cancel"):
            handler.read_body()
            self._cancel(handler, path.split("/")[2])
        else:
            super()._handle_post(handler)

    def _handle_get(self, handler: _Handler) -> None:
        path = self._batch_path(handler)
        parts = (path or "").split("/")
        if path is not None and path.startswith("/batches/") and len(parts) == 3:
            self._retrieve(handler, parts[2])
        elif path is not None and path.startswith("/files/") and path.endswith("/content"):
            content = self.files.get(parts[2])
            if content is None:
                handler.send_json(404, _error_body("No such File object", "invalid_request_error", None))
            else:
                handler.send_raw(200, content, "application/octet-stream")
        else:
            super()._handle_get(handler)

    # ----- files and batches -----------------------------------------------------------------------

    def _create_file(self, handler: _Handler, body: bytes) -> None:
        head = f"Content-Type: {handler.headers.get('Content-Type')}\r\n\r\n".encode()
        message = BytesParser(policy=HTTP).parsebytes(head + body)
        fields = {part.get_param("name", header="content-disposition"): part for part in message.iter_parts()}
        purpose = fields["purpose"].get_content().strip() if "purpose" in fields else None
        if purpose != "batch" or "file" not in fields:
            handler.send_json(
                400, _error_body("purpose must be 'batch' and a file given", "invalid_request_error", None)
            )
            return
        content = bytes(fields["file"].get_payload(decode=True) or b"")
        file_id = f"file-{uuid.uuid4().hex[:24]}"
        with self._batch_lock:
            self.files[file_id] = content
        handler.send_json(
            200,
            {
                "id": file_id,
                "object": "file",
                "bytes": len(content),
                "created_at": int(time.time()),
                "filename": "input.jsonl",
                "purpose": "batch",
                "status": "processed",
            },
        )

    def _create_batch(self, handler: _Handler, body: bytes) -> None:
        request = json.loads(body or b"{}")
        content = self.files.get(str(request.get("input_file_id")))
        if content is None:
            handler.send_json(400, _error_body("input_file_id: no such file", "invalid_request_error", None))
            return
        if request.get("endpoint") != self.chat_url or request.get("completion_window") != "24h":
            handler.send_json(
                400, _error_body("endpoint or completion_window not supported", "invalid_request_error", None)
            )
            return
        lines = []
        for text in content.decode().splitlines():
            try:
                lines.append(json.loads(text))
            except ValueError:
                lines.append(None)
        batch = FakeBatch(f"batch_{uuid.uuid4().hex[:24]}", request["input_file_id"], lines, time.time())
        batch.endpoint = self.chat_url
        batch.errors = file_problems(lines, self.max_lines, len(content), self.chat_url, self.MISMATCH_CODE)
        batch.errors = batch.errors or self._line_problems(lines)
        with self._batch_lock:
            self.batches[batch.id] = batch
            self.batches_created += 1
            if not batch.errors:
                self.submitted_lines.update(str(line["custom_id"]) for line in lines)
        handler.send_json(200, batch.as_json())

    def _line_problems(self, lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """What the provider checks of a valid file's lines beyond OpenAI's rules (none here)."""
        return []

    def _retrieve(self, handler: _Handler, batch_id: str) -> None:
        with self._batch_lock:
            batch = self.batches.get(batch_id)
            if batch is None:
                handler.send_json(404, _error_body("No such Batch object", "invalid_request_error", None))
                return
            self._advance(batch)
            handler.send_json(200, batch.as_json())

    def _cancel(self, handler: _Handler, batch_id: str) -> None:
        with self._batch_lock:
            batch = self.batches[batch_id]
            if batch.status in ("validating", "in_progress"):
                self.cancelled_batches += 1
                self._finish(batch, done=0, final="cancelled")
            handler.send_json(200, batch.as_json())

    def _advance(self, batch: FakeBatch) -> None:
        if batch.status == "validating":
            batch.status = "failed" if batch.errors else "in_progress"
        if batch.status == "in_progress" and self._due(batch.created_at):
            expire = self.expire_after
            self._finish(batch, done=len(batch.lines) if expire is None else expire, final="completed")

    def _finish(self, batch: FakeBatch, done: int, final: str) -> None:
        """Answer the first `done` lines, the rest never run; the output and error files are written."""
        outputs: list[dict[str, Any]] = []
        errors: list[dict[str, Any]] = []
        for index, line in enumerate(batch.lines):
            if index >= done:
                code = "batch_expired" if final == "completed" else "batch_cancelled"
                errors.append(
                    {"custom_id": line["custom_id"], "response": None, "error": {"code": code, "message": "not run"}}
                )
                continue
            status, body = self._answer_line(line["body"])
            record = {
                "id": f"batch_req_{uuid.uuid4().hex[:16]}",
                "custom_id": line["custom_id"],
                "response": {"status_code": status, "request_id": uuid.uuid4().hex, "body": body},
                "error": None,
            }
            (outputs if status == 200 else errors).append(record)
            if status == 200:
                self.answered_lines[str(line["custom_id"])] += 1
        batch.completed, batch.failed = len(outputs), len(errors)
        batch.status = "expired" if final == "completed" and done < len(batch.lines) else final
        for attribute, records in (("output_file_id", outputs), ("error_file_id", errors)):
            if records:
                file_id = f"file-{uuid.uuid4().hex[:24]}"
                self.files[file_id] = "".join(json.dumps(r) + "\n" for r in records).encode()
                setattr(batch, attribute, file_id)

    def _answer_line(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """One line as the chat endpoint answers it, or an injected 500/429."""
        fault = self._line_fault()
        if fault == 500:
            return 500, _error_body("The server had an error processing your request.", "server_error", None)
        if fault == 429:
            return 429, _error_body("Rate limit reached for requests.", "requests", "rate_limit_exceeded")
        limit = self.settings.max_context_chars
        chars = sum(len(t) for t in _message_texts(body))
        if limit is not None and chars > limit:
            message = f"This model's maximum context length is {limit} tokens. However, your messages resulted in {chars} tokens."
            return 400, _error_body(message, "invalid_request_error", "context_length_exceeded", "messages")
        rejection = openai_rejection(body) if self.settings.openai_rules else None
        if rejection is not None:
            return 400, rejection
        answer = self._responder(body)
        extra = answer if isinstance(answer, dict) else {}
        text = str(extra.get("content", "")) if isinstance(answer, dict) else answer
        prompt_tokens = sum(_word_count(t) for t in _message_texts(body))
        return 200, chat_payload(str(body.get("model")), text, extra, prompt_tokens)


ANTHROPIC_BATCHES_PATH = "/v1/messages/batches"
CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MAX_BATCH_BYTES = 256 * 1024 * 1024


class FakeAnthropicBatchServer(BatchFaults, FakeAnthropicServer):
    """Anthropic's Messages API plus Message Batches: `POST /v1/messages/batches` (refused whole with a 400
    for more than `max_lines` requests, over 256 MB, or a custom id that is malformed or repeated), `GET
    /v1/messages/batches/{id}` and its `/results`. Each request's `params` is validated as a synchronous
    request under the batch's `anthropic-version` (an invalid one is `errored`, the others answered)."""

    MAX_LINES = 100_000

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.message_batches: dict[str, dict[str, Any]] = {}

    def _handle_post(self, handler: _Handler) -> None:
        path = handler.path.split("?", 1)[0].rstrip("/")
        if path.startswith(ANTHROPIC_BATCHES_PATH + "/") and path.endswith("/cancel"):
            handler.read_body()
            self._cancel(handler, path.split("/")[4])
            return
        if path != ANTHROPIC_BATCHES_PATH:
            super()._handle_post(handler)
            return
        body = handler.read_body()
        version = handler.headers.get("anthropic-version")
        problem = version_problem(version) or self._batch_problem(body)
        if problem:
            handler.send_json(400, anthropic_invalid(problem))
            return
        batch = {
            "id": f"msgbatch_{uuid.uuid4().hex[:24]}",
            "type": "message_batch",
            "processing_status": "in_progress",
            "requests": json.loads(body)["requests"],
            "version": version,
            "results": None,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "created": time.time(),
        }
        with self._batch_lock:
            self.message_batches[batch["id"]] = batch
            self.batches_created += 1
            self.submitted_lines.update(str(r["custom_id"]) for r in batch["requests"])
        handler.send_json(200, self._batch_json(batch))

    def _batch_problem(self, body: bytes) -> str | None:
        if len(body) > MAX_BATCH_BYTES:
            return "requests: a batch is at most 256 MB"
        try:
            requests = json.loads(body).get("requests")
        except (ValueError, AttributeError):
            return "body: invalid JSON"
        if not isinstance(requests, list) or not requests:
            return "requests: at least one request is required"
        if len(requests) > self.max_lines:
            return f"requests: a batch holds at most {self.max_lines} requests"
        ids = [r.get("custom_id") if isinstance(r, dict) else None for r in requests]
        bad = next((i for i in ids if not isinstance(i, str) or not CUSTOM_ID.match(i)), "")
        if bad != "":
            return f"requests.custom_id: must match ^[a-zA-Z0-9_-]{{1,64}}$, got {bad!r}"
        if len(set(ids)) != len(ids):
            return "requests: custom_id values must be unique within a batch"
        return None

    def _handle_get(self, handler: _Handler) -> None:
        path = handler.path.split("?", 1)[0].rstrip("/")
        parts = path.split("/")
        batch = self.message_batches.get(parts[4]) if path.startswith(ANTHROPIC_BATCHES_PATH + "/") else None
        if batch is None:
            handler.send_json(404, anthropic_error("not_found_error", f"no batch at {path}"))
            return
        with self._batch_lock:
            if batch["processing_status"] == "in_progress" and self._due(batch["created"]):
                self._end(batch)
        if path.endswith("/results") and batch["results"] is not None:
            handler.send_raw(200, batch["results"], "application/binary")
        else:
            handler.send_json(200, self._batch_json(batch))

    def _batch_json(self, batch: dict[str, Any]) -> dict[str, Any]:
        ended = batch["processing_status"] == "ended"
        counts = Counter(line["result"]["type"] for line in batch.get("lines", []))
        return {
            "id": batch["id"],
            "type": "message_batch",
            "processing_status": batch["processing_status"],
            "request_counts": {
                "processing": 0 if ended else len(batch["requests"]),
                **{kind: counts.get(kind, 0) for kind in ("succeeded", "errored", "canceled", "expired")},
            },
            "created_at": batch["created_at"],
            "results_url": f"{self.base_url}{ANTHROPIC_BATCHES_PATH}/{batch['id']}/results" if ended else None,
        }

    def _cancel(self, handler: _Handler, batch_id: str) -> None:
        """`POST .../{id}/cancel`: an unfinished batch ends with its requests `canceled`."""
        batch = self.message_batches.get(batch_id)
        if batch is None:
            handler.send_json(404, anthropic_error("not_found_error", f"no batch {batch_id}"))
            return
        with self._batch_lock:
            if batch["processing_status"] == "in_progress":
                self.cancelled_batches += 1
                self._end(batch, canceled=True)
        handler.send_json(200, self._batch_json(batch))

    def _end(self, batch: dict[str, Any], canceled: bool = False) -> None:
        done = 0 if canceled else len(batch["requests"]) if self.expire_after is None else self.expire_after
        unfinished = {"type": "canceled" if canceled else "expired"}
        lines = [
            {
                "custom_id": r["custom_id"],
                "result": self._result(r["params"], batch["version"]) if i < done else unfinished,
            }
            for i, r in enumerate(batch["requests"])
        ]
        batch["lines"], batch["processing_status"] = lines, "ended"
        batch["results"] = "".join(json.dumps(line) + "\n" for line in lines).encode()
        self.answered_lines.update(line["custom_id"] for line in lines if line["result"]["type"] == "succeeded")

    def _result(self, params: dict[str, Any], version: str) -> dict[str, Any]:
        problem = self.request_problem(params, version) if isinstance(params, dict) else "params: Field required"
        fault = self._line_fault()
        if problem or fault:
            kind = "invalid_request_error" if problem else {500: "api_error", 429: "rate_limit_error"}[fault or 500]
            return {"type": "errored", "error": anthropic_error(kind, problem or "Overloaded")}
        text = self._responder(params)
        text = str(text.get("content", "")) if isinstance(text, dict) else text
        return {"type": "succeeded", "message": message_body(str(params["model"]), params, text, None)}


def main(argv: list[str] | None = None) -> int:
    """Serve a batch API (OpenAI's Files + Batches, or Anthropic's Message Batches) on loopback until
    Ctrl-C or SIGTERM; print its base URL first and the counters to stderr at the end."""
    import argparse

    from judgebench_flows.testing.oracle import VERDICTS, load_pairs, oracle_responder

    parser = argparse.ArgumentParser(
        prog="python -m judgebench_flows.testing.fake_batches",
        description="Serve a fake batch API on loopback: OpenAI's Files and Batch APIs (with its chat "
        "endpoint), or Anthropic's Message Batches (with its Messages API), validated as the real APIs "
        "validate them. For `judgebench run --batch` without a provider's key.",
    )
    parser.add_argument("--provider", choices=("openai", "anthropic"), default="openai")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 (the default) picks a free port")
    parser.add_argument("--answer", default="My final verdict is [[A>B]]", help="the text of every answer")
    parser.add_argument(
        "--oracle", metavar="DATA.jsonl", default=None, help="answer as a judge that knows this data file's labels"
    )
    parser.add_argument("--oracle-accuracy", type=float, default=0.75, help="share of pairs it gets right")
    parser.add_argument("--line-failure-rate", type=float, default=0.0, help="share of lines failing (500/429)")
    parser.add_argument("--expire-after", type=int, default=None, help="expire a batch after this many lines")
    parser.add_argument("--api-key", default=None, help="require this key")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    answer: Any = args.answer
    if args.oracle:
        answer = oracle_responder(
            load_pairs(args.oracle), VERDICTS["arena_hard"], accuracy=args.oracle_accuracy, seed=args.seed
        )
    kind = FakeBatchServer if args.provider == "openai" else FakeAnthropicBatchServer
    server = kind(
        answer,
        line_failure_rate=args.line_failure_rate,
        expire_after=args.expire_after,
        api_key=args.api_key,
        seed=args.seed,
        host=args.host,
        port=args.port,
    )
    return serve(server)


if __name__ == "__main__":
    raise SystemExit(main())

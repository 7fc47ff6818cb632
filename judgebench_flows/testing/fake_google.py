"""Google's OpenAI-compatible chat endpoints on loopback (the Gemini API's and Vertex AI's), and an OAuth
token endpoint for service-account credentials, each enforcing what Google's services enforce.

`FakeGoogleServer` is `FakeOpenAIServer` (scripted answers, seeded faults, counters) at Google's paths:

- `mode="gemini"`: `/v1beta/openai/chat/completions`, the API key as a bearer key. A wrong key is a
  400 INVALID_ARGUMENT with reason API_KEY_INVALID (Google's answer, not a 401); no key, a 403.
- `mode="vertex"`: `/v1/projects/{project}/locations/{location}/endpoints/openapi/chat/completions`;
  only an access token the `FakeTokenServer` issued and that has not expired is taken, anything else is
  401 UNAUTHENTICATED; models are named `google/<model>`.
- Errors in Google's shape, a list: `[{"error": {"code", "message", "status"}}]`. A field the API does not
  know (`rejected_params`) is refused as protobuf JSON refuses it (`Unknown name "x": Cannot find field.`);
  `max_tokens` above the model's output cap is refused.
- Gemini 2.5 models think (`thinking_tokens` per answer, reported in `total_tokens` only) from the same
  `max_tokens` budget: an answer that does not fit after its thinking ends with `finish_reason` "length"
  and no text. `rate_empty` answers a seeded share of requests 200 with a choice without a message, as
  Gemini does under load.

`FakeTokenServer` is the token endpoint a service-account file's `token_uri` names: it takes the JWT
bearer grant google-auth sends, checks its RS256 signature against the public key of a service account
it made (`service_account`), its audience (Google's token endpoint), scope and expiry, and issues tokens living `lifetime` seconds.
"""

from __future__ import annotations

import base64
import json
import random
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from judgebench_flows.testing.fake_batches import BatchFaults
from judgebench_flows.testing.fake_openai import (
    FakeOpenAIServer,
    FaultSettings,
    _Handler,
    _message_texts,
    _word_count,
    chat_payload,
    request_key,
    serve,
)

STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
UNAUTHENTICATED = (
    "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other "
    "valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project."
)
JWT_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"
GOOGLE_TOKEN_AUDIENCE = "https://oauth2.googleapis.com/token"  # a grant's `aud`, whatever the token_uri
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"


def google_error(status: int, message: str, details: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    error: dict[str, Any] = {"code": status, "message": message, "status": STATUS_NAMES.get(status, "UNKNOWN")}
    if details:
        error["details"] = details
    return [{"error": error}]


def output_cap(model: str) -> int:
    """The model's cap on one answer (thinking included): 65,536 for the 2.5 models, else 8,192."""
    return 65536 if "gemini-2.5" in model else 8192


def thinks(model: str) -> bool:
    return "gemini-2.5" in model and "flash-lite" not in model


class FakeGoogleServer(FakeOpenAIServer):
    """See the module docstring; `tokens` is the token endpoint whose tokens a Vertex server takes."""

    def __init__(
        self,
        responder: Any = "My final verdict is [[A>B]]",
        *,
        mode: str = "gemini",
        project: str = "judge-project",
        location: str = "us-central1",
        tokens: FakeTokenServer | None = None,
        rate_empty: float = 0.0,
        thinking_tokens: int = 0,
        **kwargs: Any,
    ) -> None:
        if mode not in ("gemini", "vertex"):
            raise ValueError(f"mode must be gemini or vertex, got {mode!r}")
        if mode == "vertex" and tokens is None:
            raise ValueError("a Vertex server needs the token endpoint whose tokens it takes")
        super().__init__(responder, **kwargs)
        self.mode, self.project, self.location, self.tokens = mode, project, location, tokens
        self.rate_empty, self.thinking_tokens = rate_empty, thinking_tokens
        self.empty_answers = 0
        self.unauthenticated = 0
        self._empty_rng = random.Random(kwargs.get("seed", 0))

    @property
    def root(self) -> str:
        if self.mode == "gemini":
            return "/v1beta/openai"
        return f"/v1/projects/{self.project}/locations/{self.location}/endpoints/openapi"

    @property
    def base_url(self) -> str:
        return f"http://{self._host}:{self.port}{self.root}"

    def _model_paths(self) -> dict[str, Callable[[_Handler, bytes], None]]:
        return {f"{self.root}/chat/completions": self._answer_google}

    def _reply(
        self,
        handler: _Handler,
        status: int,
        payload: Any,
        key: str | None = None,
        extra_headers: dict[str, str] | None = None,
    ) -> None:
        """Errors in Google's list shape, whichever path raised them (faults included)."""
        if status >= 400 and isinstance(payload, dict):
            error = payload.get("error")
            said = (error if isinstance(error, dict) else payload).get("message")
            payload = google_error(status, str(said or "error"))
        super()._reply(handler, status, payload, key, extra_headers)

    def _auth_problem(self, handler: _Handler, settings: FaultSettings) -> tuple[int, Any] | None:
        header = handler.headers.get("Authorization", "")
        given = header[len("Bearer ") :] if header.startswith("Bearer ") else ""
        if self.mode == "vertex":
            assert self.tokens is not None
            if self.tokens.valid(given):
                return None
            with self._lock:
                self.unauthenticated += 1
            return 401, google_error(401, UNAUTHENTICATED)
        if settings.api_key is None or given == settings.api_key:
            return None
        if not given:
            return 403, google_error(
                403,
                "Method doesn't allow unregistered callers (callers without established "
                "identity). Please use API Key or other form of API consumer identity to call this API.",
            )
        reason = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}]
        return 400, google_error(400, "API key not valid. Please pass a valid API key.", reason)

    def request_problem(self, body: Any, settings: FaultSettings) -> tuple[int, Any] | None:
        """What Google refuses in a chat body (synchronous or a batch line), or None."""
        if not isinstance(body, dict):
            return 400, google_error(400, "Invalid JSON payload received.")
        model = str(body.get("model") or "")
        if self.mode == "vertex" and not model.startswith("google/"):
            return 400, google_error(400, f"Model name `{model}` must be given as publisher/model, e.g. google/{model}")
        name = model.removeprefix("google/").removeprefix("models/")
        if settings.models is not None and name not in settings.models:
            return 404, google_error(404, f"models/{name} is not found for API version v1beta, or is not supported.")
        refused = next((p for p in sorted(settings.rejected_params) if p in body), None)
        if refused:
            return 400, google_error(
                400, f'Invalid JSON payload received. Unknown name "{refused}": Cannot find field.'
            )
        cap, asked = output_cap(name), body.get("max_tokens")
        if isinstance(asked, int) and not 1 <= asked <= cap:
            return 400, google_error(
                400,
                f"Unable to submit request because it has a maxOutputTokens value of {asked} but the supported "
                f"range is from 1 (inclusive) to {cap + 1} (exclusive). Update the value and try again.",
            )
        temperature = body.get("temperature")
        if isinstance(temperature, (int, float)) and not 0 <= temperature <= 2:
            return 400, google_error(
                400,
                f"Unable to submit request because it has a temperature value of {temperature:g} but the supported "
                "range is from 0 (inclusive) to 2.0001 (exclusive). Update the value and try again.",
            )
        if not isinstance(body.get("messages"), list) or not body["messages"]:
            return 400, google_error(400, "* GenerateContentRequest.contents: contents is not specified")
        return None

    def answer_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """The chat completion Google would answer (its thinking counted as described above)."""
        with self._lock:
            responder = self._responder
        answer = responder(body)
        extra = answer if isinstance(answer, dict) else {}
        text = str(extra.get("content", "")) if isinstance(answer, dict) else str(answer)
        model = str(body["model"])
        prompt_tokens = sum(_word_count(t) for t in _message_texts(body))
        thought = self.thinking_tokens if thinks(model) else 0
        budget = body.get("max_tokens")
        finish = "stop"
        if isinstance(budget, int) and thought + _word_count(text) > budget:
            text, finish, thought = "", "length", min(thought, budget)
        payload = chat_payload(model, text, {"finish_reason": finish}, prompt_tokens)
        payload["usage"]["total_tokens"] += thought  # Gemini reports thinking in the total only
        return payload

    def _answer_google(self, handler: _Handler, body_bytes: bytes) -> None:
        settings = self.settings
        problem = self._auth_problem(handler, settings)
        try:
            body = json.loads(body_bytes or b"null")
        except ValueError:
            body = None
        problem = problem or self.request_problem(body, settings)
        if problem is not None:
            self._reply(handler, *problem)
            return
        key = request_key(body)
        if self._fault(handler, self._choose_fault(key, settings), settings):
            return
        with self._lock:
            empty = self.rate_empty > 0 and self._empty_rng.random() < self.rate_empty
            self.empty_answers += empty
        if empty:  # Gemini under load: 200, a choice without a message
            self._reply(handler, 200, {"object": "chat.completion", "choices": [{"index": 0, "finish_reason": "stop"}]})
            return
        try:
            payload = self.answer_body(body)
        except Exception as error:  # noqa: BLE001 - surfaced to the client so test bugs are visible
            self._reply(handler, 500, google_error(500, f"responder raised {type(error).__name__}: {error}"))
            return
        self._reply(handler, 200, payload, key)


def _b64decode(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


class FakeTokenServer:
    """Google's OAuth token endpoint for service accounts, on loopback (see the module docstring)."""

    def __init__(self, lifetime: int = 3600, host: str = "127.0.0.1"):
        self.lifetime = lifetime
        self._host = host
        self._keys: dict[str, tuple[str, Any]] = {}  # private_key_id -> (client_email, public key)
        self._issued: dict[str, float] = {}  # token -> monotonic expiry
        self._lock = threading.Lock()
        self.refused: list[str] = []
        self._httpd: ThreadingHTTPServer | None = None

    @property
    def token_uri(self) -> str:
        assert self._httpd is not None
        return f"http://{self._host}:{self._httpd.server_address[1]}/token"

    @property
    def issued(self) -> int:
        with self._lock:
            return len(self._issued)

    def valid(self, token: str) -> bool:
        with self._lock:
            expiry = self._issued.get(token)
        return expiry is not None and time.monotonic() < expiry

    def expire_all(self) -> None:
        """Every token issued so far stops working now (a revocation, or a clock ahead of ours)."""
        with self._lock:
            self._issued = dict.fromkeys(self._issued, 0.0)

    def service_account(self, path: Path, project: str = "judge-project") -> Path:
        """Write a service-account file whose `token_uri` is this server, with a fresh RSA key."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        key_id = uuid.uuid4().hex
        email = f"judge@{project}.iam.gserviceaccount.com"
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode()
        document = {
            "type": "service_account",
            "project_id": project,
            "private_key_id": key_id,
            "private_key": pem,
            "client_email": email,
            "client_id": "1234567890",
            "auth_uri": "https://accounts.google.com/o/oauth2/auth",
            "token_uri": self.token_uri,
        }
        path.write_text(json.dumps(document))
        with self._lock:
            self._keys[key_id] = (email, key.public_key())
        return path

    def grant(self, form: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        """The token endpoint's answer to a JWT bearer grant."""
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        if form.get("grant_type") != [JWT_GRANT] or not form.get("assertion"):
            return 400, {"error": "unsupported_grant_type", "error_description": "Invalid grant_type."}
        try:
            head, claims, signature = form["assertion"][0].split(".")
            header, payload = json.loads(_b64decode(head)), json.loads(_b64decode(claims))
            email, public_key = self._keys[header["kid"]]
            public_key.verify(_b64decode(signature), f"{head}.{claims}".encode(), padding.PKCS1v15(), hashes.SHA256())
        except (ValueError, KeyError, InvalidSignature):
            return 400, {"error": "invalid_grant", "error_description": "Invalid JWT Signature."}
        now = time.time()
        if payload.get("iss") != email or payload.get("aud") != GOOGLE_TOKEN_AUDIENCE:
            return 400, {"error": "invalid_grant", "error_description": "Invalid JWT: iss or aud."}
        if not payload.get("iat", 0) - 300 <= now <= payload.get("exp", 0):
            return 400, {
                "error": "invalid_grant",
                "error_description": "Invalid JWT: Token must be a short-lived token.",
            }
        if CLOUD_PLATFORM not in str(payload.get("scope") or "").split():
            return 400, {"error": "invalid_scope", "error_description": "Invalid OAuth scope."}
        token = f"ya29.fake-{uuid.uuid4().hex}"
        with self._lock:
            self._issued[token] = time.monotonic() + self.lifetime
        return 200, {"access_token": token, "expires_in": self.lifetime, "token_type": "Bearer"}

    def __enter__(self) -> FakeTokenServer:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = parse_qs(self.rfile.read(length).decode())
                status, answer = fake.grant(form) if self.path == "/token" else (404, {"error": "not_found"})
                if status != 200:
                    fake.refused.append(str(answer.get("error_description")))
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer((self._host, 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None


class FakeGeminiBatchServer(BatchFaults, FakeGoogleServer):
    """The Gemini API's Batch Mode and Files API beside its OpenAI-compatible chat (`mode="gemini"`):

    - `POST /upload/v1beta/files` starts a resumable upload (`x-goog-upload-url` answered), the upload URL
      takes the bytes (`upload, finalize`; `x-goog-upload-status: final`) and answers the File;
    - `POST /v1beta/models/{model}:batchGenerateContent` with `{"batch": {"inputConfig": {"fileName"}}}`
      creates a batch (an unknown model or file: 404/400); each line must be a JSON object with a unique
      `key` and a `request` holding `contents`, else the batch ends BATCH_STATE_FAILED;
    - `GET /v1beta/batches/{id}` reads it (pending while `hold`), and once done its responses file
      (`{"key", "response"}` or `{"key", "error"}` per line) is at `GET /v1beta/files/{id}:download?alt=media`.

    Lines are answered as the chat endpoint answers the same request (thinking, token caps, refused
    fields), `line_failure_rate` of them fail with a 500 or 429, and `expire_after` makes a batch
    BATCH_STATE_EXPIRED after that many lines (the rest never run). The key is `x-goog-api-key`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, mode="gemini", **kwargs)
        self.files: dict[str, bytes] = {}
        self.jobs: dict[str, dict[str, Any]] = {}
        self._uploads: dict[str, bytearray] = {}

    def _key_problem(self, handler: _Handler) -> tuple[int, Any] | None:
        key = self.settings.api_key
        given = handler.headers.get("x-goog-api-key")
        if key is None or given == key:
            return None
        reason = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}]
        return 400, google_error(400, "API key not valid. Please pass a valid API key.", reason)

    def _send(self, handler: _Handler, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(data)

    def _handle_post(self, handler: _Handler) -> None:
        path, _, query = handler.path.partition("?")
        if path.startswith("/v1beta/batches/") and path.endswith(":cancel"):
            self._cancel(handler, path.removeprefix("/v1beta/").removesuffix(":cancel"))
            return
        if not path.startswith("/upload/") and not path.endswith(":batchGenerateContent"):
            super()._handle_post(handler)
            return
        body = handler.read_body()
        problem = self._key_problem(handler) if "upload_id=" not in query else None
        if problem is not None:
            self._send(handler, *problem)
        elif path == "/upload/v1beta/files" and "upload_id=" not in query:
            upload_id = uuid.uuid4().hex
            with self._batch_lock:
                self._uploads[upload_id] = bytearray()
            url = f"http://{self._host}:{self.port}/upload/v1beta/files?upload_id={upload_id}&upload_protocol=resumable"
            self._send(handler, 200, {}, {"X-Goog-Upload-URL": url, "X-Goog-Upload-Status": "active"})
        elif path == "/upload/v1beta/files":
            self._upload(handler, parse_qs(query)["upload_id"][0], body)
        else:
            self._create_job(handler, path.split("/")[-1].removesuffix(":batchGenerateContent"), body)

    def _cancel(self, handler: _Handler, name: str) -> None:
        """`POST /v1beta/batches/{id}:cancel`: a pending batch ends CANCELLED, its lines never run."""
        handler.read_body()
        problem = self._key_problem(handler)
        if problem is not None:
            self._send(handler, *problem)
            return
        with self._batch_lock:
            job = self.jobs.get(name)
            if job is not None and job["state"] == "BATCH_STATE_PENDING":
                job["state"] = "BATCH_STATE_CANCELLED"
                self.cancelled_batches += 1
        if job is None:
            self._send(handler, 404, google_error(404, "Batch not found."))
        else:
            self._send(handler, 200, {})

    def _upload(self, handler: _Handler, upload_id: str, chunk: bytes) -> None:
        with self._batch_lock:
            buffer = self._uploads.get(upload_id)
            if buffer is None:
                self._send(handler, 404, google_error(404, "No such upload."))
                return
            buffer.extend(chunk)
            if "finalize" not in handler.headers.get("X-Goog-Upload-Command", ""):
                self._send(handler, 200, {}, {"X-Goog-Upload-Status": "active"})
                return
            name = f"files/{uuid.uuid4().hex[:12]}"
            self.files[name] = bytes(self._uploads.pop(upload_id))
        document = {"name": name, "mimeType": "application/jsonl", "sizeBytes": str(len(buffer)), "state": "ACTIVE"}
        self._send(handler, 200, {"file": {**document, "source": "UPLOADED"}}, {"X-Goog-Upload-Status": "final"})

    def _create_job(self, handler: _Handler, model: str, body: bytes) -> None:
        request = json.loads(body or b"{}").get("batch") or {}
        name = str((request.get("inputConfig") or {}).get("fileName"))
        settings = self.settings
        if settings.models is not None and model not in settings.models:
            self._send(handler, 404, google_error(404, f"models/{model} is not found for API version v1beta."))
            return
        if name not in self.files:
            self._send(handler, 400, google_error(400, f"File {name} not found or not accessible."))
            return
        lines: list[Any] = []
        for text in self.files[name].decode().splitlines():
            try:
                lines.append(json.loads(text))
            except ValueError:
                lines.append(None)
        keys = [line.get("key") if isinstance(line, dict) else None for line in lines]
        valid = all(isinstance(line, dict) and isinstance(line.get("request"), dict) for line in lines)
        valid = valid and None not in keys and len(set(keys)) == len(keys) and len(lines) <= self.max_lines
        job: dict[str, Any] = {
            "name": f"batches/{uuid.uuid4().hex[:16]}",
            "model": f"models/{model}",
            "lines": lines,
            "state": "BATCH_STATE_PENDING" if valid else "BATCH_STATE_FAILED",
        }
        with self._batch_lock:
            self.jobs[job["name"]] = job
            self.batches_created += 1
            if valid:
                self.submitted_lines.update(str(k) for k in keys)
        self._send(handler, 200, self._operation(job))

    @staticmethod
    def _operation(job: dict[str, Any]) -> dict[str, Any]:
        metadata: dict[str, Any] = {
            "@type": "type.googleapis.com/google.ai.generativelanguage.v1beta.GenerateContentBatch",
            "model": job["model"],
            "displayName": "judgebench-flows",
            "state": job["state"],
            "createTime": "2026-11-25T00:00:00Z",
        }
        if job.get("output"):
            metadata["output"] = {"responsesFile": job["output"]}
        return {"name": job["name"], "metadata": metadata, "done": job["state"] != "BATCH_STATE_PENDING"}

    def _handle_get(self, handler: _Handler) -> None:
        path = handler.path.split("?", 1)[0]
        if path.startswith("/v1beta/batches/"):
            problem = self._key_problem(handler)
            if problem is not None:
                self._send(handler, *problem)
                return
            with self._batch_lock:
                job = self.jobs.get(path.removeprefix("/v1beta/"))
                if job is not None:
                    self._advance(job)
            if job is None:
                self._send(handler, 404, google_error(404, "Batch not found."))
            else:
                self._send(handler, 200, self._operation(job))
        elif path.startswith("/v1beta/files/") and path.endswith(":download"):
            content = self.files.get(path.removeprefix("/v1beta/").removesuffix(":download"))
            if content is None:
                self._send(handler, 404, google_error(404, "File not found."))
            else:
                handler.send_raw(200, content, "application/octet-stream")
        else:
            super()._handle_get(handler)

    def _advance(self, job: dict[str, Any]) -> None:
        """Answer a pending batch's lines unless held: all of them, or `expire_after` of them (expired)."""
        if job["state"] != "BATCH_STATE_PENDING" or self.hold:
            return
        done = len(job["lines"]) if self.expire_after is None else min(self.expire_after, len(job["lines"]))
        model = job["model"].removeprefix("models/")
        records = [{"key": line["key"], **self._answer_line(line["request"], model)} for line in job["lines"][:done]]
        job["state"] = "BATCH_STATE_SUCCEEDED" if done == len(job["lines"]) else "BATCH_STATE_EXPIRED"
        if records:
            job["output"] = f"files/batch-{job['name'].split('/')[-1]}"
            self.files[job["output"]] = "".join(json.dumps(r) + "\n" for r in records).encode()

    def _answer_line(self, request: dict[str, Any], model: str) -> dict[str, Any]:
        """One line's `response` (a native GenerateContentResponse) or `error`."""
        fault = self._line_fault()
        if fault is not None:
            return {
                "error": google_error(fault, "Internal error" if fault == 500 else "Resource exhausted")[0]["error"]
            }
        config = request.get("generationConfig") or {}
        refused = next((f for f in sorted(config) if CHAT_PARAMS.get(f, f) in self.settings.rejected_params), None)
        if refused:
            message = (
                f"Invalid JSON payload received. Unknown name \"{refused}\" at 'generation_config': Cannot find field."
            )
            return {"error": google_error(400, message)[0]["error"]}
        with self._lock:
            empty = self.rate_empty > 0 and self._empty_rng.random() < self.rate_empty
            self.empty_answers += empty
        if empty:  # Gemini under load: a candidate without content
            return {"response": {"candidates": [{"finishReason": "STOP", "index": 0}], "usageMetadata": {}}}
        chat = chat_of(request, model)
        problem = self.request_problem(chat, self.settings)
        if problem is not None:
            return {"error": problem[1][0]["error"]}
        answer = self.answer_body(chat)
        self.answered_lines[request_key(chat)] += 1
        choice, usage = answer["choices"][0], answer["usage"]
        text = choice["message"]["content"]
        return {
            "response": {
                "candidates": [
                    {
                        "content": {"role": "model", "parts": [{"text": text}] if text else []},
                        "finishReason": "MAX_TOKENS" if choice["finish_reason"] == "length" else "STOP",
                        "index": 0,
                    }
                ],
                "usageMetadata": {
                    "promptTokenCount": usage["prompt_tokens"],
                    "candidatesTokenCount": usage["completion_tokens"],
                    "totalTokenCount": usage["total_tokens"],
                    "thoughtsTokenCount": usage["total_tokens"] - usage["prompt_tokens"] - usage["completion_tokens"],
                },
                "modelVersion": "fake",
            }
        }


# A GenerateContentRequest's GenerationConfig fields and the chat parameters they are.
CHAT_PARAMS = {"temperature": "temperature", "topP": "top_p", "topK": "top_k", "maxOutputTokens": "max_tokens"}


def chat_of(request: dict[str, Any], model: str) -> dict[str, Any]:
    """A native request as the chat body the responder and the validation read (the batch's model)."""
    messages = []
    system = request.get("systemInstruction")
    if isinstance(system, dict):
        messages.append({"role": "system", "content": "".join(p.get("text", "") for p in system.get("parts") or [])})
    for content in request.get("contents") or []:
        role = "assistant" if content.get("role") == "model" else "user"
        messages.append({"role": role, "content": "".join(p.get("text", "") for p in content.get("parts") or [])})
    config = request.get("generationConfig") or {}
    params = {CHAT_PARAMS.get(k, k): v for k, v in config.items()}
    return {"model": model, "messages": messages, **params}


def main(argv: list[str] | None = None) -> int:
    """Serve Google's endpoints on loopback until Ctrl-C or SIGTERM (the docs' examples run against it):

        python -m judgebench_flows.testing.fake_google --port 8000 --oracle DATA.jsonl --api-key KEY
        python -m judgebench_flows.testing.fake_google --port 8000 --oracle DATA.jsonl --mode vertex \\
            --service-account sa.json --token-lifetime 60

    Gemini mode serves Batch Mode too. Vertex mode also serves the token endpoint, and writes a
    service-account file for it (`--service-account`) to point GOOGLE_APPLICATION_CREDENTIALS at."""
    import argparse

    from judgebench_flows.testing.oracle import VERDICTS, load_pairs, oracle_responder

    parser = argparse.ArgumentParser(prog="python -m judgebench_flows.testing.fake_google")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--mode", choices=("gemini", "vertex"), default="gemini")
    parser.add_argument("--oracle", required=True, help="a JudgeBench data file: answers as arena_hard, right on 75%%")
    parser.add_argument("--api-key", default=None, help="gemini: the key it takes (default: any)")
    parser.add_argument("--project", default="judge-project")
    parser.add_argument("--service-account", default="service-account.json")
    parser.add_argument("--token-lifetime", type=int, default=3600)
    parser.add_argument("--thinking-tokens", type=int, default=0)
    args = parser.parse_args(argv)
    answer = oracle_responder(load_pairs(args.oracle), VERDICTS["arena_hard"], accuracy=0.75)
    common = {"port": args.port, "thinking_tokens": args.thinking_tokens}
    with FakeTokenServer(lifetime=args.token_lifetime) as tokens:
        server: FakeGoogleServer
        if args.mode == "vertex":
            tokens.service_account(Path(args.service_account), args.project)
            server = FakeGoogleServer(answer, mode="vertex", tokens=tokens, project=args.project, **common)
        else:
            server = FakeGeminiBatchServer(answer, api_key=args.api_key, **common)
        return serve(server)


if __name__ == "__main__":
    raise SystemExit(main())

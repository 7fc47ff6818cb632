"""A real OpenAI-compatible chat-completions server on loopback, with fault injection and counters.

Why a real server instead of mocks: the product talks to judges through the official `openai` client,
and the interesting failures (429 with Retry-After, 5xx, dropped connections, hung requests, keep-alive
reuse under high concurrency) only happen on a real socket. Pointing the real client at this server
exercises the same code paths as production, and the counters let tests prove things like "each
distinct request was answered exactly once" after retries and resumes.

Standard library only: `ThreadingHTTPServer` speaking HTTP/1.1 with keep-alive, one daemon thread per
connection, every response carrying Content-Length.

Run it by hand or for benchmarks:

    python -m judgebench_flows.testing.fake_openai --port 8000 --latency 1.0 \
        --answer "My final verdict is [[A>B]]" --rate-429 0.1

Without `--answer` it answers every judge in its own format ("the response shown first is better", or
`--verdict second`), so any built-in judge runs against it and completes (at 0% accuracy: the verdict
does not depend on the pair).

Or as a judge that is right on 75% of the pairs of a data file (a first run with a real number):

    python -m judgebench_flows.testing.fake_openai --port 8000 --oracle DATA.jsonl --oracle-accuracy 0.75

`--noise 0.3 --noise-seed 1` re-draws each call's verdict at random with probability 0.3 (seeded, per prompt),
so repeated calls of one prompt can disagree, as a model sampled at temperature > 0 does.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import random
import signal
import socket
import socketserver
import struct
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from judgebench_flows.testing.oracle import VERDICTS, load_pairs, oracle_responder, unit_share

Responder = Callable[[dict], "str | dict"]
"""Gets the parsed request JSON body, returns the assistant message content, or a dict with `content` and
optionally `reasoning_content`, `finish_reason` and `reasoning_tokens` (a reasoning model's answer), or a
dict with `status` (400 or more), `message` and optionally `code`: this request refused with that error (a
content filter's refusal of one prompt, say)."""

DEFAULT_ANSWER = "My final verdict is [[A>B]]"
CHAT_PATH = "/v1/chat/completions"
# Text completions (a raw `prompt`), and vLLM's Pooling API at the server root (reward models): the
# responder's text is the completion, or for pooling the score as JSON (`0.5`, or per-token `[[0.1], [0.7]]`).
COMPLETIONS_PATH = "/v1/completions"
POOLING_PATH = "/pooling"
MODELS_PATH = "/v1/models"
FAULT_KINDS = ("429", "500", "503", "drop", "hang", "badjson")
HANG_STEP_SECONDS = 0.02  # how often a hung request checks whether the server is stopping
STOP_GRACE_SECONDS = 1.0  # how long stop() waits for handler threads to notice the stop


def request_key(body: dict) -> str:
    """Identify a distinct request: sha256 of its model and messages.

    Other fields (temperature, seed, max_tokens) are left out on purpose: a retry of the same judge
    call must map to the same key even if the client tweaks sampling parameters.
    """
    identity = {"model": body.get("model"), "messages": body.get("messages")}
    if "prompt" in body:  # a text-completions request
        identity["prompt"] = body.get("prompt")
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode("utf-8")).hexdigest()


def _content_text(content: Any) -> str:
    """Flatten a message content (string, or a list of parts as the API allows) into plain text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                pieces.append(part["text"])
            elif isinstance(part, str):
                pieces.append(part)
        return " ".join(pieces)
    return str(content)


def _message_texts(body: dict) -> list[str]:
    """All message contents of a chat request, as text; tolerant of malformed messages."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return []
    return [_content_text(m.get("content")) for m in messages if isinstance(m, dict)]


# The request fields vLLM's own request models declare (vLLM 0.11-0.33: `CompletionRequest`,
# `PoolingChatRequest`); a field outside them is logged as "present in the request but ignored".
VLLM_COMPLETION_FIELDS = frozenset(
    "model prompt echo frequency_penalty logit_bias logprobs max_tokens n presence_penalty seed "
    "stop stream stream_options suffix temperature top_p user use_beam_search top_k min_p repetition_penalty "
    "length_penalty stop_token_ids include_stop_str_in_output ignore_eos min_tokens skip_special_tokens "
    "spaces_between_special_tokens truncate_prompt_tokens allowed_token_ids prompt_logprobs add_special_tokens "
    "response_format structured_outputs priority request_id return_tokens_as_token_ids return_token_ids "
    "cache_salt kv_transfer_params vllm_xargs".split()
)
VLLM_POOLING_FIELDS = frozenset(
    "model messages user encoding_format dimensions truncate_prompt_tokens request_id priority "
    "mm_processor_kwargs chat_template chat_template_kwargs add_generation_prompt continue_final_message "
    "add_special_tokens cache_salt task use_activation embed_dtype endianness".split()
)


def float32(value: float) -> float:
    return float(struct.unpack("f", struct.pack("f", value))[0])


def sigmoid(value: float) -> float:
    """The activation of a one-label reward head, as vLLM returns it: in float32, so scores above about
    17 all come back as 1.0 and tie (Skywork-Reward-Gemma-2-27B's 64.29% on the GPT-4o pairs reads 61.71%)."""
    exact = 1.0 / (1.0 + math.exp(-value)) if value >= 0 else math.exp(value) / (1.0 + math.exp(value))
    return float32(exact)


def batch_wobble(value: float, batch: int) -> float:
    """`value` as a batched float32 pass returns it: its last bits move with the batch it was computed in
    (a real vLLM answered 0.00039572230889461935 for a text in a batch, 0.0003957213484682143 alone: a
    relative 2.4e-6). `batch` stands for the batch: consecutive requests land in different ones."""
    return float32(value * (1.0 + ((batch % 5) - 2) * 2.0**-19))


# A marker only one judge's prompt holds, and that judge's verdict for "the response shown first is better"
# and for the other one: what `--verdict` answers, so every built-in judge reads a valid verdict.
JUDGE_VERDICTS: tuple[tuple[str, str, str], ...] = (
    ("Output (a)", "Output (a)", "Output (b)"),  # vanilla
    ("[[A>>B]]", "My final verdict is [[A>B]]", "My final verdict is [[B>A]]"),  # arena_hard, compass_judger
    ("[RESULT]", "Response A is better. [RESULT] A", "Response B is better. [RESULT] B"),  # prometheus_2
    ("final decision", "So, the final decision is Response 1.", "So, the final decision is Response 2."),  # auto_j
    ("[[A]]", "[[A]]", "[[B]]"),  # skywork_critic
)


def judge_format_responder(first: bool = True) -> Responder:
    """Always the same verdict (the first response shown is better, or the second), in the format the
    request's judge prompt asks for; the default answer when no prompt is recognised. Both orders get
    the same position, so the two-order metric scores it 0 (not a failed run: every verdict is valid)."""

    def respond(body: dict) -> str:
        text = "\n".join(_message_texts(body))
        for marker, shown_first, shown_second in JUDGE_VERDICTS:
            if marker in text:
                return shown_first if first else shown_second
        return DEFAULT_ANSWER

    return respond


def _other_api_payload(
    path: str,
    model: str,
    body: dict,
    text: str,
    prompt_tokens: int,
    completion_tokens: int,
    settings: FaultSettings,
    batch: int = 0,
) -> dict:
    """A text-completions or Pooling API response body, in vLLM's shape.

    Pooling: the responder's score is the head's raw output; as vLLM does, the server applies the head's
    activation (a sigmoid: a one-label reward head's) unless asked `use_activation: false` (and only when it
    `honours_use_activation`); with `score_wobble`, each score's last bits move with its `batch`
    (`batch_wobble`), as a real vLLM's float32 scores do. Completions: a beam search (`use_beam_search`, beam width `n`) answers `n`
    choices, the best first, as vLLM's beam-search path does; a server without `beam_search` answers one.
    """
    if path == POOLING_PATH:
        value = json.loads(text)
        data = value if isinstance(value, list) else [value]
        raw = settings.honours_use_activation and body.get("use_activation") is False
        if settings.score_wobble:
            data = [
                [batch_wobble(v, batch) for v in i] if isinstance(i, list) else batch_wobble(i, batch) for i in data
            ]
        if not raw:
            data = [[sigmoid(v) for v in item] if isinstance(item, list) else sigmoid(item) for item in data]
        return {
            "id": f"pool-{uuid.uuid4().hex}",
            "object": "list",
            "created": int(time.time()),
            "model": model,
            "data": [{"index": 0, "object": "pooling", "data": data}],
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens, "completion_tokens": 0},
        }
    prompt_tokens = _word_count(str(body.get("prompt") or ""))
    beams = int(body.get("n") or 1) if settings.beam_search and body.get("use_beam_search") else 1
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": i, "text": text, "logprobs": None, "finish_reason": "stop"} for i in range(beams)],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens * beams,
            "total_tokens": prompt_tokens + completion_tokens * beams,
        },
    }


def chat_payload(model: str, text: str, extra: dict, prompt_tokens: int) -> dict:
    """A chat completion answering `text` (`extra`: a responder's `reasoning_content`, `finish_reason`,
    `reasoning_tokens`): what the chat endpoint and a batch's output lines carry."""
    reasoning_tokens = int(extra.get("reasoning_tokens") or 0)
    completion_tokens = _word_count(text) + reasoning_tokens
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if "reasoning_content" in extra:
        message["reasoning_content"] = extra["reasoning_content"]
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": extra.get("finish_reason", "stop")}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            **({"completion_tokens_details": {"reasoning_tokens": reasoning_tokens}} if reasoning_tokens else {}),
        },
    }


def _word_count(text: str) -> int:
    """Rough, deterministic token count: whitespace-separated words."""
    return len(text.split())


def _error_body(message: str, error_type: str, code: str | None, param: str | None = None) -> dict:
    """OpenAI's error body shape, so the client builds the same exception objects as in production."""
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


ERROR_STYLES = ("openai", "vllm", "vllm-legacy", "litellm", "anthropic")
# vLLM and LiteLLM name the exception class in `type` (vLLM) or the message (LiteLLM).
_EXCEPTION_BY_STATUS = {
    400: "BadRequestError",
    401: "AuthenticationError",
    404: "NotFoundError",
    429: "RateLimitError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}
_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                    429: "rate_limit_error", 500: "api_error", 503: "overloaded_error"}  # fmt: skip


def styled_error(style: str, status: int, payload: dict) -> dict:
    """An OpenAI error body (`_error_body`) as another server answers the same error.

    vLLM: the exception class in `type`, the HTTP status (a number) in `code`; before 0.9 the error object
    was the body itself (`"object": "error"`). LiteLLM: its exception class prefixed to the message, the
    status as a string in `code`, no param; a reasoning model's sampling parameter is refused in its own
    words (`UnsupportedParamsError`). Anthropic: `{"type": "error", "error": {"type", "message"}}`.
    """
    error = payload.get("error") if isinstance(payload, dict) else None  # Google's bodies are lists
    if not isinstance(error, dict):
        return payload
    refused_value, model = error.get("value"), error.get("model_group")
    error = {name: value for name, value in error.items() if name not in ("value", "model_group")}
    if style == "openai":
        return {"error": error}
    message, param = str(error.get("message") or ""), error.get("param")
    exception = _EXCEPTION_BY_STATUS.get(status, "APIError")
    if style == "vllm":
        return {"error": {"message": message, "type": exception, "param": param, "code": status}}
    if style == "vllm-legacy":
        return {"object": "error", "message": message, "type": exception, "param": param, "code": status}
    if style == "anthropic":
        return {"type": "error", "error": {"type": _ANTHROPIC_TYPES.get(status, "api_error"), "message": message}}
    if error.get("code") == "context_length_exceeded":  # LiteLLM 1.108.7's router, word for word
        message = (
            f"ContextWindowExceededError: OpenAIException - {message}\nmodel={model}. context_window_fallbacks=None. "
            "fallbacks=None.\n\nSet 'context_window_fallback' - https://docs.litellm.ai/docs/routing#fallbacks\n\n"
            f"LiteLLM: model group '{model}' failed with the error above. No fallback was attempted."
        )
        exception = "ContextWindowExceededError: litellm.BadRequestError"
    elif error.get("code") in ("unsupported_value", "unsupported_parameter") and param in REASONING_SAMPLING:
        message = (
            f"O-series models don't support {param}={refused_value}. Only {param}=1 "
            "is supported. To drop unsupported openai params from the call, set `litellm.drop_params = True`"
        )
        exception = "UnsupportedParamsError"
    return {"error": {"message": f"litellm.{exception}: {message}", "type": None, "param": None, "code": str(status)}}


# Like OpenAI's 401, except the message never echoes the key (it would end up in logs).
_UNAUTHORIZED_BODY = _error_body(
    "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.",
    "invalid_request_error",
    "invalid_api_key",
)


@dataclasses.dataclass(frozen=True)
class FaultSettings:
    """Everything that decides how a request is answered; replaced as a whole so handlers see one snapshot."""

    latency: float = 0.0
    rate_429: float = 0.0
    retry_after: float = 0.05
    rate_500: float = 0.0
    rate_503: float = 0.0
    rate_drop: float = 0.0
    rate_hang: float = 0.0
    hang_seconds: float = 30.0
    fail_first: int = 0
    fail_kind: str = "500"
    seed: int = 0
    api_key: str | None = None
    models: frozenset[str] | None = None
    max_context_chars: int | None = None
    # Reject what OpenAI's API rejects for reasoning models (see `openai_rejection`), by model name.
    openai_rules: bool = False
    # Parameters rejected for every model (400 unsupported_parameter naming it): an endpoint we do not know.
    rejected_params: frozenset[str] = frozenset()
    # Whose error bodies (and wording) the server answers with (`ERROR_STYLES`); the Pooling API, which only
    # vLLM serves, answers as "vllm" when this is "openai".
    error_style: str = "openai"
    # vLLM >= 0.11.1 honours `use_activation` on /pooling; False: an older one that ignores it (and says so).
    honours_use_activation: bool = True
    # vLLM's completions API beam-searches (`use_beam_search`, beam width `n`); False: a server that cannot.
    beam_search: bool = True
    # Pooling scores' last bits move with the batch a request lands in (`batch_wobble`), as vLLM's float32 do.
    score_wobble: bool = False
    # What the server says about the model that answers: the `model` its answers name (a dated snapshot
    # behind an alias; None: the name asked for) and their `system_fingerprint` (None: not said).
    served_model: str | None = None
    system_fingerprint: str | None = None
    # A vLLM server's `/v1/models` entry: the checkpoint it serves (`root`), its `max_model_len` and
    # `created`; with either of the first two set, entries are listed in vLLM's shape.
    model_root: str | None = None
    max_model_len: int | None = None
    model_created: int = 0

    def validate(self) -> None:
        """Fail at configuration time, not in a handler thread where the error would be easy to miss."""
        rates = [self.rate_429, self.rate_500, self.rate_503, self.rate_drop, self.rate_hang]
        for rate in rates:
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"fault rates must be between 0 and 1, got {rate}")
        if sum(rates) > 1.0 + 1e-9:
            raise ValueError(f"fault rates add up to {sum(rates)}, more than 1")
        if self.fail_kind not in FAULT_KINDS:
            raise ValueError(f"fail_kind must be one of {FAULT_KINDS}, got {self.fail_kind!r}")
        if self.fail_first < 0:
            raise ValueError(f"fail_first must be >= 0, got {self.fail_first}")
        if self.latency < 0 or self.hang_seconds < 0 or self.retry_after < 0:
            raise ValueError("latency, hang_seconds and retry_after must be >= 0")
        if self.error_style not in ERROR_STYLES:
            raise ValueError(f"error_style must be one of {ERROR_STYLES}, got {self.error_style!r}")


class _HTTPServer(ThreadingHTTPServer):
    """ThreadingHTTPServer that knows its FakeOpenAIServer and stays quiet about client disconnects."""

    daemon_threads = True
    block_on_close = False  # stop() does its own bounded wait; never block forever on a stuck client
    allow_reuse_address = True
    request_queue_size = 1024  # benchmarks open hundreds of connections at once; the default backlog is 5

    def __init__(self, address: tuple[str, int], fake: FakeOpenAIServer) -> None:
        self.fake = fake
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        """Bind without HTTPServer's reverse DNS lookup (socket.getfqdn), which can stall with no network."""
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = port

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Disconnects are normal here (timeouts, drops, stop()); real bugs still print a traceback."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)) or self.fake.stopping:
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    """One keep-alive connection; every request is delegated to the owning FakeOpenAIServer."""

    protocol_version = "HTTP/1.1"
    server_version = "FakeOpenAI/1.0"
    disable_nagle_algorithm = True  # headers and body go out in separate writes; avoid the 40 ms Nagle stall
    in_flight = False  # a chat request of this connection is being answered
    api_path = CHAT_PATH  # the API path of the request being answered (set per POST)
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        self.server.fake._connection_opened(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.fake._connection_closed(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        """Silence per-request logging: benchmarks send thousands of requests."""

    def do_GET(self) -> None:
        self.server.fake._handle_get(self)

    def do_POST(self) -> None:
        self.server.fake._handle_post(self)

    def read_body(self) -> bytes:
        """Read the request body (Content-Length, or chunked for completeness) so keep-alive stays in sync."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            while True:
                size_line = self.rfile.readline(65537)
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline(65537)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def send_json(self, status: int, payload: dict, extra_headers: dict[str, str] | None = None) -> bool:
        """Send one JSON response, with a request id as OpenAI's API sends; return False when the client had
        already gone away."""
        headers = [("x-request-id", f"req_{uuid.uuid4().hex}"), *(extra_headers or {}).items()]
        return self.send_raw(status, json.dumps(payload).encode("utf-8"), "application/json", headers)

    def send_raw(self, status: int, data: bytes, content_type: str, headers: Sequence[tuple[str, str]] = ()) -> bool:
        """Send a body as it is (a file's content, or what a misconfigured proxy answers); return False when
        the client had already gone away."""
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
            return True
        except (ConnectionError, TimeoutError, OSError):
            self.close_connection = True
            return False

    def drop(self) -> None:
        """Close the TCP connection without writing a response (socketserver closes it after we return)."""
        self.close_connection = True


class FakeOpenAIServer:
    """OpenAI-compatible `/v1/chat/completions` and `/v1/models` on loopback, with faults and counters.

    Order of checks for a chat request: bad JSON (400), API key (401), model (404), context length
    (400), then faults (`fail_first` for the first attempts of each distinct request, else one random
    draw), then `latency`, then the responder. All counters are guarded by one lock.

    `/v1/completions` and `/pooling` behave as vLLM's do (activation by default, beam search, the fields it
    ignores logged in its words: `ignored_log`); `error_style` answers errors as vLLM, LiteLLM or Anthropic
    shape them (`styled_error`).
    """

    def __init__(
        self,
        responder: Responder | str = DEFAULT_ANSWER,
        *,
        latency: float = 0.0,
        rate_429: float = 0.0,
        retry_after: float = 0.05,
        rate_500: float = 0.0,
        rate_503: float = 0.0,
        rate_drop: float = 0.0,
        rate_hang: float = 0.0,
        hang_seconds: float = 30.0,
        fail_first: int = 0,
        fail_kind: str = "500",
        seed: int = 0,
        api_key: str | None = None,
        models: set[str] | None = None,
        max_context_chars: int | None = None,
        openai_rules: bool = False,
        rejected_params: set[str] | frozenset[str] = frozenset(),
        error_style: str = "openai",
        honours_use_activation: bool = True,
        beam_search: bool = True,
        score_wobble: bool = False,
        served_model: str | None = None,
        system_fingerprint: str | None = None,
        model_root: str | None = None,
        max_model_len: int | None = None,
        model_created: int = 0,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        given = locals()  # every setting is a parameter of the same name
        settings = FaultSettings(**{field.name: given[field.name] for field in dataclasses.fields(FaultSettings)})
        settings = dataclasses.replace(
            settings,
            models=frozenset(models) if models is not None else None,
            rejected_params=frozenset(rejected_params),
        )
        settings.validate()
        self._settings = settings
        self._responder = self._as_responder(responder)
        self._host = host
        self._port = port
        self._lock = threading.Lock()
        self._rng = random.Random(seed)
        self._stop_event = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._serve_thread: threading.Thread | None = None
        self._connections: set[socket.socket] = set()
        self._connections_idle = threading.Condition(self._lock)
        self._attempts: Counter[str] = Counter()
        self._requests = 0
        self._answered = 0
        self._status_counts: Counter[int | str] = Counter()
        self._answered_keys: Counter[str] = Counter()
        self._refused_keys: Counter[str] = Counter()
        self._in_flight = 0
        self._max_in_flight = 0
        self._ignored: Counter[str] = Counter()
        self._log: list[str] = []
        self._beam_widths: Counter[int] = Counter()

    # ----- lifecycle -------------------------------------------------------------------------------

    def start(self) -> FakeOpenAIServer:
        """Bind the socket and serve in a daemon thread; returns self so `FakeOpenAIServer().start()` chains."""
        if self._httpd is not None:
            raise RuntimeError("FakeOpenAIServer is already running")
        self._stop_event.clear()
        self._httpd = _HTTPServer((self._host, self._port), self)
        self._serve_thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"fake-openai-{self.port}",
            daemon=True,
        )
        self._serve_thread.start()
        return self

    def stop(self) -> None:
        """Stop promptly even with hung or idle keep-alive connections, and close the listening socket."""
        httpd = self._httpd
        if httpd is None:
            return
        self._stop_event.set()  # wakes hung and sleeping handlers
        httpd.shutdown()  # ends serve_forever; no new connections are accepted
        with self._lock:
            open_connections = list(self._connections)
        for conn in open_connections:  # idle keep-alive handlers are blocked in recv(); unblock them
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        with self._connections_idle:
            while self._connections and time.monotonic() < deadline:
                self._connections_idle.wait(timeout=max(0.0, deadline - time.monotonic()))
        httpd.server_close()
        if self._serve_thread is not None:
            self._serve_thread.join(timeout=STOP_GRACE_SECONDS)
        self._httpd = None
        self._serve_thread = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def stopping(self) -> bool:
        """True once stop() has begun; handlers use it to give up early."""
        return self._stop_event.is_set()

    @property
    def port(self) -> int:
        """The bound port (the real one when constructed with port=0)."""
        if self._httpd is None:
            raise RuntimeError("FakeOpenAIServer is not started; call start() or use it as a context manager")
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        """What to pass as the openai client's base_url, e.g. http://127.0.0.1:PORT/v1."""
        return f"http://{self._host}:{self.port}/v1"

    # ----- runtime configuration -------------------------------------------------------------------

    def set_responder(self, responder: Responder | str) -> None:
        """Replace what the server answers; a string is answered verbatim to every request."""
        new_responder = self._as_responder(responder)
        with self._lock:
            self._responder = new_responder

    def configure(self, **fault_settings: Any) -> None:
        """Change settings at runtime (latency, rates, fail_first, api_key, ...); unknown names raise TypeError.

        Setting `fail_first` or `fail_kind` restarts the per-request attempt counts, so "the first N
        attempts" means the first N from now on. Setting `seed` reseeds the random fault generator.
        """
        known = {field.name for field in dataclasses.fields(FaultSettings)}
        unknown = sorted(set(fault_settings) - known)
        if unknown:
            raise TypeError(f"unknown fault settings: {', '.join(unknown)}")
        if "models" in fault_settings and fault_settings["models"] is not None:
            fault_settings["models"] = frozenset(fault_settings["models"])
        if "rejected_params" in fault_settings:
            fault_settings["rejected_params"] = frozenset(fault_settings["rejected_params"] or ())
        with self._lock:
            new_settings = dataclasses.replace(self._settings, **fault_settings)
            new_settings.validate()
            self._settings = new_settings
            if "fail_first" in fault_settings or "fail_kind" in fault_settings:
                self._attempts.clear()
            if "seed" in fault_settings:
                self._rng = random.Random(new_settings.seed)

    @property
    def settings(self) -> FaultSettings:
        """The current settings snapshot."""
        with self._lock:
            return self._settings

    # ----- counters --------------------------------------------------------------------------------

    @property
    def requests(self) -> int:
        """Every POST to /v1/chat/completions received (whatever happened to it)."""
        with self._lock:
            return self._requests

    @property
    def answered(self) -> int:
        """200 responses actually written to the socket."""
        with self._lock:
            return self._answered

    @property
    def status_counts(self) -> dict[int | str, int]:
        """Outcome of every chat request: HTTP status, or "drop"/"hang"/"client_gone"; sums to `requests`.

        An outcome is counted just before its response is written, so once the client holds a response
        the counters already include it (no race in tests that assert right after a call returns).
        """
        with self._lock:
            return dict(self._status_counts)

    @property
    def in_flight(self) -> int:
        """The chat requests being handled now (a benchmark samples it to see an endpoint's idle time)."""
        with self._lock:
            return self._in_flight

    @property
    def max_in_flight(self) -> int:
        """The most chat requests being handled at the same instant (from body read to response written),
        since start or `reset_counters`: what a client-side concurrency limit must keep bounded."""
        with self._lock:
            return self._max_in_flight

    def answered_count(self, body_key: str) -> int:
        """How many 200s were sent for one distinct request (key from `request_key(body)`)."""
        with self._lock:
            return self._answered_keys[body_key]

    def answered_keys(self) -> Counter[str]:
        """A copy of the 200-count per distinct request key."""
        with self._lock:
            return Counter(self._answered_keys)

    def refused_keys(self) -> Counter[str]:
        """How often each distinct request body (all its fields: a call's shapes are distinct) was refused
        (`_refusal`: a context too long, a parameter rejected, an unknown model): one refused twice was
        sent twice."""
        with self._lock:
            return Counter(self._refused_keys)

    def snapshot(self) -> dict[str, Any]:
        """All counters at one instant, for assertions and benchmark reports."""
        with self._lock:
            return {
                "requests": self._requests,
                "answered": self._answered,
                "status_counts": dict(self._status_counts),
                "distinct_answered": len(self._answered_keys),
                "max_in_flight": self._max_in_flight,
            }

    def reset_counters(self) -> None:
        """Zero all counters and the per-request attempt counts used by fail_first."""
        with self._lock:
            self._requests = 0
            self._answered = 0
            self._status_counts.clear()
            self._answered_keys.clear()
            self._refused_keys.clear()
            self._attempts.clear()
            self._max_in_flight = self._in_flight
            self._ignored.clear()
            self._log.clear()
            self._beam_widths.clear()

    # ----- request handling (called from handler threads) ------------------------------------------

    @staticmethod
    def _as_responder(responder: Responder | str) -> Responder:
        if isinstance(responder, str):
            text = responder
            return lambda body: text
        if not callable(responder):
            raise TypeError(f"responder must be a string or a callable, got {type(responder).__name__}")
        return responder

    def _connection_opened(self, conn: socket.socket) -> None:
        with self._lock:
            self._connections.add(conn)

    def _connection_closed(self, conn: socket.socket) -> None:
        with self._lock:
            self._connections.discard(conn)
            self._connections_idle.notify_all()

    def _count(self, outcome: int | str) -> None:
        with self._lock:
            self._status_counts[outcome] += 1

    def _authorized(self, handler: _Handler, settings: FaultSettings) -> bool:
        if settings.api_key is None:
            return True
        return handler.headers.get("Authorization", "") == f"Bearer {settings.api_key}"

    def _handle_get(self, handler: _Handler) -> None:
        """GET /v1/models and /v1/models/{id}; anything else is 404."""
        settings = self.settings
        path = handler.path.split("?", 1)[0].rstrip("/")
        if path != MODELS_PATH and not path.startswith(MODELS_PATH + "/"):
            self._send_unknown_path(handler)
            return
        if not self._authorized(handler, settings):
            handler.send_json(401, _UNAUTHORIZED_BODY)
            return
        model_ids = sorted(settings.models or ())
        if path == MODELS_PATH:
            listing = [self._model_object(m, settings) for m in model_ids]
            handler.send_json(200, {"object": "list", "data": listing})
            return
        model_id = path[len(MODELS_PATH) + 1 :]
        if settings.models is not None and model_id not in settings.models:
            handler.send_json(404, self._model_not_found_body(model_id))
            return
        handler.send_json(200, self._model_object(model_id, settings))

    @staticmethod
    def _model_object(model_id: str, settings: FaultSettings | None = None) -> dict:
        """A `/v1/models` entry: OpenAI's, or vLLM's (the checkpoint it serves the name from, its context)."""
        if settings is None or (settings.model_root is None and settings.max_model_len is None):
            created = settings.model_created if settings is not None else 0
            return {"id": model_id, "object": "model", "created": created, "owned_by": "fake-openai"}
        return {
            "id": model_id,
            "object": "model",
            "created": settings.model_created,
            "owned_by": "vllm",
            "root": settings.model_root or model_id,
            "parent": None,
            "max_model_len": settings.max_model_len,
            "permission": [],
        }

    @staticmethod
    def _model_not_found_body(model_id: str) -> dict:
        return _error_body(
            f"The model `{model_id}` does not exist or you do not have access to it.",
            "invalid_request_error",
            "model_not_found",
        )

    @staticmethod
    def _send_unknown_path(handler: _Handler) -> None:
        handler.send_json(
            404,
            _error_body(f"Invalid URL ({handler.command} {handler.path})", "invalid_request_error", None),
        )

    def _handle_post(self, handler: _Handler) -> None:
        """Read the body first (so keep-alive stays in sync), then answer the chat request."""
        body_bytes = handler.read_body()
        path = handler.path.split("?", 1)[0].rstrip("/")
        answer = self._answerer(path)
        if answer is None:
            self._send_unknown_path(handler)
            return
        handler.api_path = path
        with self._lock:
            self._requests += 1
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
        handler.in_flight = True
        try:
            answer(handler, body_bytes)
        finally:
            self._leave_flight(handler)

    def _answerer(self, path: str) -> Callable[[_Handler, bytes], None] | None:
        """What answers a POST to `path` (None: not a model path); a server whose paths carry the model
        (`fake_bedrock`) matches them here."""
        return self._model_paths().get(path)

    def _model_paths(self) -> dict[str, Callable[[_Handler, bytes], None]]:
        """The POST paths that call the model (counted as requests), and what answers each: a server
        speaking another API (`fake_anthropic`) names its own."""
        return {CHAT_PATH: self._answer_chat, COMPLETIONS_PATH: self._answer_chat, POOLING_PATH: self._answer_chat}

    def _leave_flight(self, handler: _Handler) -> None:
        """The request stops counting as in flight before its answer is written: a client may send its next
        request the instant it reads this answer, and that must not count as one call too many."""
        if handler.in_flight:
            handler.in_flight = False
            with self._lock:
                self._in_flight -= 1

    def _reply(
        self,
        handler: _Handler,
        status: int,
        payload: dict,
        key: str | None = None,
        extra_headers: dict[str, str] | None = None,
    ) -> None:
        """Count, then send. Counting first means a client that has its response always sees it counted.

        If the write fails (the client gave up), the count is moved to "client_gone", so `answered`
        ends up meaning "200s actually sent".
        """
        self._leave_flight(handler)
        if status >= 400:
            style = self.settings.error_style
            if style == "openai" and handler.api_path == POOLING_PATH:
                style = "vllm"  # only vLLM serves the Pooling API
            payload = styled_error(style, status, payload)
        with self._lock:
            self._status_counts[status] += 1
            if status == 200 and key is not None:
                self._answered += 1
                self._answered_keys[key] += 1
        if handler.send_json(status, payload, extra_headers):
            return
        with self._lock:
            self._status_counts[status] -= 1
            if self._status_counts[status] == 0:
                del self._status_counts[status]
            self._status_counts["client_gone"] += 1
            if status == 200 and key is not None:
                self._answered -= 1
                self._answered_keys[key] -= 1
                if self._answered_keys[key] == 0:
                    del self._answered_keys[key]

    def _drop(self, handler: _Handler, outcome: str) -> None:
        """Count, then close the connection without a response."""
        self._leave_flight(handler)
        self._count(outcome)
        handler.drop()

    def _answer_chat(self, handler: _Handler, body_bytes: bytes) -> None:
        """Answer one chat completion request; every path counts exactly one outcome."""
        settings = self.settings
        try:
            body = json.loads(body_bytes or b"null")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self._reply(
                handler,
                400,
                _error_body("We could not parse the JSON body of your request.", "invalid_request_error", None),
            )
            return
        if not self._authorized(handler, settings):
            self._reply(handler, 401, _UNAUTHORIZED_BODY)
            return
        refusal = self._refusal(body, settings, handler.api_path)
        if refusal is not None:
            with self._lock:
                self._refused_keys[hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()] += 1
            self._reply(handler, *refusal)
            return
        key = request_key(body)
        fault = self._choose_fault(key, settings)
        if not self._fault(handler, fault, settings):
            self._answer(handler, body, key, settings)

    def _refusal(
        self, body: dict[str, Any], settings: FaultSettings, api_path: str
    ) -> tuple[int, dict[str, Any]] | None:
        """What a real endpoint answers a request it refuses (status, body); None when it takes it."""
        model = body.get("model")
        if not isinstance(model, str) or not model:
            return 400, _error_body("you must provide a model parameter", "invalid_request_error", None, "model")
        if settings.models is not None and model not in settings.models:
            return self._unknown_model(model, settings, api_path)
        if body.get("stream"):
            return (
                400,
                _error_body(
                    "stream=true is not supported by the fake OpenAI server", "invalid_request_error", None, "stream"
                ),
            )
        # A gateway (LiteLLM) refuses parameters itself, before its upstream sees the request and its length.
        if settings.error_style == "litellm":
            return self._rejected_parameter(body, settings) or self._too_long(body, settings, api_path)
        return self._too_long(body, settings, api_path) or self._rejected_parameter(body, settings)

    @staticmethod
    def _too_long(body: dict[str, Any], settings: FaultSettings, api_path: str) -> tuple[int, dict[str, Any]] | None:
        """The context-length 400, when the request's text is longer than `max_context_chars`."""
        context_chars = sum(len(text) for text in _message_texts(body)) + len(str(body.get("prompt") or ""))
        if settings.max_context_chars is None or context_chars <= settings.max_context_chars:
            return None
        refusal = _error_body(
            # OpenAI's wording, or vLLM's; characters stand in for tokens here.
            f"This model's maximum context length is {settings.max_context_chars} tokens. "
            + (
                f"However, your request has {context_chars} input tokens. "
                "Please reduce the length of the input messages."
                if settings.error_style.startswith("vllm") or api_path == POOLING_PATH
                else f"However, your messages resulted in {context_chars} tokens. "
                "Please reduce the length of the messages."
            ),
            "invalid_request_error",
            "context_length_exceeded",
            "messages",
        )
        refusal["error"]["model_group"] = body.get("model")  # for `styled_error`'s wording; never sent
        return 400, refusal

    @staticmethod
    def _rejected_parameter(body: dict[str, Any], settings: FaultSettings) -> tuple[int, dict[str, Any]] | None:
        """A 400 for a parameter the model does not take (`openai_rules`, `rejected_params`)."""
        rejection = openai_rejection(body) if settings.openai_rules else None
        rejected = next((name for name in sorted(settings.rejected_params) if name in body), None)
        if rejection is None and rejected is not None:
            rejection = _error_body(
                f"Unsupported parameter: '{rejected}' is not supported with this model.",
                "invalid_request_error",
                "unsupported_parameter",
                rejected,
            )
            rejection["error"]["value"] = body[rejected]  # for `styled_error`'s wording; never sent
        return None if rejection is None else (400, rejection)

    def _fault(self, handler: _Handler, fault: str | None, settings: FaultSettings) -> bool:
        """Wait the latency and answer with the injected `fault` (a 429 or a hang before the latency, as
        real servers do); False when the request is to be answered."""
        if fault == "429":  # a rate limiter rejects at the door: no latency
            self._fault_reply(handler, fault, settings)
            return True
        if fault == "hang":  # counted now, so tests see it while the client is still waiting
            self._count("hang")
            self._stop_event.wait(settings.hang_seconds)  # returns early when stop() is called
            handler.drop()
            return True

        if settings.latency > 0 and self._stop_event.wait(settings.latency):
            self._drop(handler, "drop")  # the server is stopping; do not start a response now
            return True
        if fault == "drop":
            self._drop(handler, "drop")
            return True
        if fault in ("500", "503"):
            self._fault_reply(handler, fault, settings)
            return True
        if fault == "badjson":  # a proxy's error page with status 200
            self._leave_flight(handler)
            self._count("badjson")
            handler.send_raw(200, b"<html><body>502 Bad Gateway</body></html>", "text/html")
            return True
        return False

    def _fault_error(self, fault: str, settings: FaultSettings) -> tuple[int, dict[str, Any], dict[str, str]]:
        """An injected "429", "500" or "503" as this server's API words it (status, body, headers): a server
        speaking another API (`fake_anthropic`, `fake_bedrock`) words its own and shares the rest of the
        fault handling (latency, hang, drop, bad JSON)."""
        if fault == "429":
            message = "Rate limit reached for requests. Please try again later."
            headers = {
                "Retry-After": f"{settings.retry_after:g}",
                "retry-after-ms": str(int(round(settings.retry_after * 1000))),
            }
            return 429, _error_body(message, "requests", "rate_limit_exceeded"), headers
        if fault == "500":
            message = "The server had an error while processing your request. Sorry about that!"
            return 500, _error_body(message, "server_error", None), {}
        message = "The engine is currently overloaded, please try again later."
        return 503, _error_body(message, "server_error", None), {}

    def _fault_reply(self, handler: _Handler, fault: str, settings: FaultSettings) -> None:
        status, payload, headers = self._fault_error(fault, settings)
        self._reply(handler, status, payload, extra_headers=headers)

    def _scripted(self, handler: _Handler, request: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
        """The responder's answer to `request` (its text and the answer's other fields), or None once the
        responder's failure is answered as this server's 500 (`_responder_failed`), so test bugs are visible."""
        with self._lock:
            responder = self._responder
        try:
            answer = responder(request)
            extra = answer if isinstance(answer, dict) else {}
            text = extra.get("content", "") if isinstance(answer, dict) else answer
            if not isinstance(text, str):
                raise TypeError(f"responder returned {type(text).__name__}, expected str or dict")
        except Exception as error:  # noqa: BLE001 - surfaced to the client so test bugs are visible
            self._responder_failed(handler, f"responder raised {type(error).__name__}: {error}")
            return None
        return text, extra

    def _responder_failed(self, handler: _Handler, message: str) -> None:
        self._reply(handler, 500, _error_body(message, "server_error", "responder_error"))

    def _answer(self, handler: _Handler, body: dict[str, Any], key: str, settings: FaultSettings) -> None:
        """The responder's answer as an OpenAI chat completion (or the other API the path names)."""
        model = body["model"]
        scripted = self._scripted(handler, body)
        if scripted is None:
            return
        text, extra = scripted
        if int(extra.get("status") or 200) >= 400:  # the responder refuses this request
            error = _error_body(str(extra.get("message") or ""), "invalid_request_error", extra.get("code"))
            self._reply(handler, int(extra["status"]), error)
            return
        prompt_tokens = sum(_word_count(t) for t in _message_texts(body))
        reasoning_tokens = int(extra.get("reasoning_tokens") or 0)
        completion_tokens = _word_count(text) + reasoning_tokens
        path = getattr(handler, "api_path", CHAT_PATH)
        if path != CHAT_PATH:
            self._note_ignored(path, body, settings)
            with self._lock:
                batch = self._requests + self._in_flight  # which batch a real server would have put it in
            served = settings.served_model or model
            payload = _other_api_payload(path, served, body, text, prompt_tokens, completion_tokens, settings, batch)
            self._reply(handler, 200, payload, key)
            return
        payload = chat_payload(settings.served_model or model, text, extra, prompt_tokens)
        if settings.system_fingerprint is not None:
            payload["system_fingerprint"] = settings.system_fingerprint
        self._reply(handler, 200, payload, key)

    def _note_ignored(self, path: str, body: dict, settings: FaultSettings) -> None:
        """Log the fields vLLM would ignore in this request, in vLLM's words (`ignored_log`), and count them."""
        known = VLLM_POOLING_FIELDS if path == POOLING_PATH else VLLM_COMPLETION_FIELDS
        if not settings.honours_use_activation:
            known = known - {"use_activation"}
        if not settings.beam_search:
            known = known - {"use_beam_search", "length_penalty"}
        ignored = set(body) - known
        with self._lock:
            if path == COMPLETIONS_PATH and body.get("use_beam_search") and settings.beam_search:
                self._beam_widths[int(body.get("n") or 1)] += 1
            if ignored:
                self._ignored.update(ignored)
                self._log.append(f"The following fields were present in the request but ignored: {ignored}")

    @property
    def ignored_fields(self) -> Counter[str]:
        """How often each request field was ignored (vLLM's completions and Pooling APIs)."""
        with self._lock:
            return Counter(self._ignored)

    @property
    def ignored_log(self) -> list[str]:
        """The warnings vLLM would have logged about ignored fields, one per request that had any."""
        with self._lock:
            return list(self._log)

    @property
    def beam_widths(self) -> Counter[int]:
        """Beam searches run, by beam width (`n`)."""
        with self._lock:
            return Counter(self._beam_widths)

    def _unknown_model(self, model: str, settings: FaultSettings, api_path: str) -> tuple[int, dict[str, Any]]:
        """An unknown model, as each server says it: OpenAI's and vLLM's 404, a gateway's 400 (LiteLLM)."""
        if settings.error_style == "litellm":
            said = f"Invalid model name passed in model={model}. Call `/v1/models` to view available models."
            return 400, _error_body(said, "invalid_request_error", None, "model")
        if settings.error_style.startswith("vllm") or api_path == POOLING_PATH:
            return 404, _error_body(f"The model `{model}` does not exist.", "NotFoundError", None, "model")
        return 404, self._model_not_found_body(model)

    def _choose_fault(self, key: str, settings: FaultSettings) -> str | None:
        """fail_first wins for the first attempts of each distinct request; otherwise one seeded draw.

        The draw is a single `random()` mapped onto cumulative bands (429, 500, 503, drop, hang), so a
        given seed and request order always produce the same faults.
        """
        with self._lock:
            self._attempts[key] += 1
            if self._attempts[key] <= settings.fail_first:
                return settings.fail_kind
            bands = [
                ("429", settings.rate_429),
                ("500", settings.rate_500),
                ("503", settings.rate_503),
                ("drop", settings.rate_drop),
                ("hang", settings.rate_hang),
            ]
            if not any(rate > 0 for _, rate in bands):
                return None
            draw = self._rng.random()
        edge = 0.0
        for kind, rate in bands:
            edge += rate
            if draw < edge:
                return kind
        return None


REASONING_SAMPLING = ("temperature", "top_p", "presence_penalty", "frequency_penalty")
# What OpenAI's API rejects, per reasoning family (model-name prefix, longest first): whether a system
# message is refused, and whether reasoning_effort is accepted. Every family here also refuses
# temperature/top_p other than 1, penalties, and max_tokens (it wants max_completion_tokens).
OPENAI_REASONING_FAMILIES: tuple[tuple[str, bool, bool], ...] = (
    ("gpt-5-chat", False, False),  # the non-reasoning chat model: accepts everything
    ("o1-mini", True, False),
    ("o1-preview", True, False),
    ("o1", False, True),
    ("o3", False, True),
    ("o4", False, True),
    ("gpt-5", False, True),
)


def openai_rejection(body: dict) -> dict | None:
    """The 400 body OpenAI's API answers to this request, or None if it would accept it."""
    model = str(body.get("model") or "").rsplit("/", 1)[-1].lower()
    family = next((f for f in OPENAI_REASONING_FAMILIES if model.startswith(f[0])), None)
    if family is None or family[0] == "gpt-5-chat":
        return None
    _, refuses_system, takes_effort = family
    if "max_tokens" in body:
        return _error_body(
            "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead.",
            "invalid_request_error",
            "unsupported_parameter",
            "max_tokens",
        )
    for name in REASONING_SAMPLING:
        if name in body and body[name] != (1 if name in ("temperature", "top_p") else 0):
            rejection = _error_body(
                f"Unsupported value: '{name}' does not support {body[name]!r} with this model. "
                "Only the default (1) value is supported.",
                "invalid_request_error",
                "unsupported_value",
                name,
            )
            rejection["error"]["value"] = body[name]  # not sent: `styled_error` words LiteLLM's refusal with it
            return rejection
    for index, message in enumerate(body.get("messages") or []):
        if refuses_system and isinstance(message, dict) and message.get("role") == "system":
            return _error_body(
                f"Unsupported value: 'messages[{index}].role' does not support 'system' with this model.",
                "invalid_request_error",
                "unsupported_value",
                f"messages[{index}].role",
            )
    if "reasoning_effort" in body:
        if not takes_effort:
            return _error_body(
                "Unsupported parameter: 'reasoning_effort' is not supported with this model.",
                "invalid_request_error",
                "unsupported_parameter",
                "reasoning_effort",
            )
        if body["reasoning_effort"] not in ("minimal", "low", "medium", "high"):
            return _error_body(
                f"Unsupported value: 'reasoning_effort' does not support {body['reasoning_effort']!r}.",
                "invalid_request_error",
                "unsupported_value",
                "reasoning_effort",
            )
    return None


def _add_oracle_args(parser: argparse.ArgumentParser) -> None:
    """--oracle and its settings: a judge that knows the labels (testing/oracle.py)."""
    parser.add_argument(
        "--oracle",
        metavar="DATA",
        nargs="+",
        default=None,
        help="answer as a judge knowing the labels of these data files (or folders of .jsonl files)",
    )
    parser.add_argument(
        "--oracle-judge",
        default="auto",
        choices=["auto", *sorted(VERDICTS)],
        help="the oracle's verdict format (default auto: the one the request's judge prompt asks for)",
    )
    parser.add_argument(
        "--oracle-accuracy",
        type=float,
        default=0.75,
        help="share of pairs the oracle gets right, in both orders (default 0.75; seeded by --seed)",
    )
    # Read as text and checked in `oracle_settings`: a bad value is one line, not argparse's usage block.
    parser.add_argument(
        "--noise",
        metavar="Q",
        default="0",
        help="with --oracle: re-draw each call's verdict at random with probability Q, so repeated calls of "
        "one prompt can disagree as at temperature > 0 (0 to 1, default 0)",
    )
    parser.add_argument(
        "--noise-seed", metavar="N", default="0", help="seed of --noise's draws (per prompt and asking; default 0)"
    )


def oracle_settings(args: argparse.Namespace) -> str | None:
    """Check --oracle-accuracy, --noise and --noise-seed (turning them into numbers on `args`); the one
    line to print, exit 2, when one is wrong, before the server starts."""
    for option, name in (("--oracle-accuracy", "oracle_accuracy"), ("--noise", "noise")):
        value = getattr(args, name)
        try:
            share = float(value)
        except ValueError:
            share = math.nan
        if not unit_share(share):
            return f"error: {option} {value}: give a number from 0 to 1"
        setattr(args, name, share)
    try:
        args.noise_seed = int(args.noise_seed)
    except ValueError:
        return f"error: --noise-seed {args.noise_seed}: give a whole number"
    if args.noise and not args.oracle:
        return f"error: --noise {args.noise}: only the --oracle judge has noise (add --oracle DATA)"
    return None


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m judgebench_flows.testing.fake_openai",
        description="Serve a fake OpenAI-compatible chat-completions API on loopback.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--answer", default=None, help="assistant content returned for every request")
    parser.add_argument(
        "--verdict",
        choices=("first", "second"),
        default="first",
        help="without --answer: always this verdict, in the format of the request's judge (default: first)",
    )
    _add_oracle_args(parser)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds slept before every answer")
    parser.add_argument("--rate-429", type=float, default=0.0)
    parser.add_argument("--retry-after", type=float, default=0.05)
    parser.add_argument("--rate-500", type=float, default=0.0)
    parser.add_argument("--rate-503", type=float, default=0.0)
    parser.add_argument("--rate-drop", type=float, default=0.0)
    parser.add_argument("--rate-hang", type=float, default=0.0)
    parser.add_argument("--hang-seconds", type=float, default=30.0)
    parser.add_argument("--fail-first", type=int, default=0)
    parser.add_argument("--fail-kind", choices=FAULT_KINDS, default="500")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--api-key", default=None, help="require this Bearer token")
    parser.add_argument(
        "--model",
        action="append",
        dest="models",
        default=None,
        help="accepted model name (repeatable); default accepts any",
    )
    parser.add_argument("--max-context-chars", type=int, default=None)
    parser.add_argument(
        "--openai-rules",
        action="store_true",
        help="reject what OpenAI rejects for reasoning models (o1-mini: system messages; o1/o3/o4/gpt-5: "
        "temperature, top_p, max_tokens)",
    )
    parser.add_argument(
        "--reject-param",
        action="append",
        dest="rejected_params",
        default=[],
        help="reject requests carrying this parameter (400 unsupported_parameter; repeatable)",
    )
    parser.add_argument(
        "--error-style", choices=ERROR_STYLES, default="openai", help="whose error bodies to answer with"
    )
    parser.add_argument(
        "--ignore-use-activation",
        action="store_true",
        help="/pooling: apply the activation even when asked `use_activation: false`, as vLLM before 0.11.1",
    )
    parser.add_argument(
        "--score-wobble",
        action="store_true",
        help="/pooling: move a score's last bits with its batch, as vLLM's float32 scores do",
    )
    _model_identity_options(parser)
    return parser.parse_args(argv)


def _model_identity_options(parser: argparse.ArgumentParser) -> None:
    """What the server says about the model that answers (a drift test by hand: restart with another)."""
    parser.add_argument("--served-model", default=None, help="the `model` every answer names (a dated snapshot)")
    parser.add_argument("--system-fingerprint", default=None, help="the `system_fingerprint` every answer says")
    parser.add_argument("--model-root", default=None, help="/v1/models as vLLM lists it: the checkpoint served")
    parser.add_argument("--max-model-len", type=int, default=None, help="/v1/models as vLLM lists it")


def oracle_pairs(paths: list[str]) -> list[dict]:
    """The pairs of every data file given, a folder standing for the .jsonl files in it; an unreadable
    path is one line and exit 2, before the server starts."""
    files: list[Path] = []
    for given in paths:
        path = Path(given).expanduser()
        found = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
        if not found or not all(f.is_file() for f in found):
            raise SystemExit(f"error: --oracle {given}: no such data file (or folder of .jsonl files)")
        files += found
    pairs = [pair for file in files for pair in load_pairs(file)]
    noun = "data file" if len(files) == 1 else "data files"
    print(f"oracle: {len(pairs)} pairs of {len(files)} {noun}", file=sys.stderr, flush=True)
    return pairs


def _verdict_in(shown_first: str, shown_second: str) -> Callable[[bool], str]:
    return lambda better_first: shown_first if better_first else shown_second


def auto_oracle(pairs: list[dict], accuracy: float, seed: int, noise: float = 0.0, noise_seed: int = 0) -> Responder:
    """The oracle in the verdict format of the request's own judge prompt; a pair it does not know is
    answered "I cannot tell." and said once on stderr (the run then counts it invalid, with the reason).
    One oracle per format, made up front: each keeps its `noise` count of how often a prompt was asked."""
    told: set[str] = set()
    settings: dict[str, Any] = {"accuracy": accuracy, "seed": seed, "noise": noise, "noise_seed": noise_seed}
    fallback = oracle_responder(pairs, VERDICTS["arena_hard"], **settings)
    by_marker = {marker: oracle_responder(pairs, _verdict_in(f, s), **settings) for marker, f, s in JUDGE_VERDICTS}

    def respond(body: dict) -> str:
        text = "\n".join(_message_texts(body))
        oracle = next((by_marker[marker] for marker, _, _ in JUDGE_VERDICTS if marker in text), fallback)
        answer = oracle(body)
        if answer == "I cannot tell." and "unknown" not in told:
            told.add("unknown")
            print(
                "oracle: a request shows a pair none of its data files holds: answered 'I cannot tell.' "
                "(give every data file the runs judge to --oracle)",
                file=sys.stderr,
                flush=True,
            )
        return answer

    return respond


def main(argv: list[str] | None = None) -> int:
    """Serve until Ctrl-C or SIGTERM, then print the counters to stderr."""
    args = _parse_args(argv)
    wrong = oracle_settings(args)
    if wrong is not None:
        print(wrong, file=sys.stderr, flush=True)
        return 2
    answer: Responder | str = (
        args.answer if args.answer is not None else judge_format_responder(args.verdict == "first")
    )
    if args.oracle:
        pairs = oracle_pairs(args.oracle)
        if args.oracle_judge == "auto":
            answer = auto_oracle(pairs, args.oracle_accuracy, args.seed, noise=args.noise, noise_seed=args.noise_seed)
        else:
            verdict = VERDICTS[args.oracle_judge]
            answer = oracle_responder(
                pairs,
                verdict,
                accuracy=args.oracle_accuracy,
                seed=args.seed,
                noise=args.noise,
                noise_seed=args.noise_seed,
            )
    server = FakeOpenAIServer(
        answer,
        latency=args.latency,
        rate_429=args.rate_429,
        retry_after=args.retry_after,
        rate_500=args.rate_500,
        rate_503=args.rate_503,
        rate_drop=args.rate_drop,
        rate_hang=args.rate_hang,
        hang_seconds=args.hang_seconds,
        fail_first=args.fail_first,
        fail_kind=args.fail_kind,
        seed=args.seed,
        api_key=args.api_key,
        models=set(args.models) if args.models else None,
        max_context_chars=args.max_context_chars,
        openai_rules=args.openai_rules,
        rejected_params=set(args.rejected_params),
        error_style=args.error_style,
        honours_use_activation=not args.ignore_use_activation,
        score_wobble=args.score_wobble,
        served_model=args.served_model,
        system_fingerprint=args.system_fingerprint,
        model_root=args.model_root,
        max_model_len=args.max_model_len,
        host=args.host,
        port=args.port,
    )
    return serve(server)


def serve(server: FakeOpenAIServer, url: Callable[[Any], str] | None = None) -> int:
    """Every stand-in's command line: start, print where it serves (`url(server)`, else its base URL), serve
    until Ctrl-C or SIGTERM, then print the counters (`snapshot()`) to stderr."""
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: done.set())
    try:
        server.start()
    except OSError as exc:  # the port is taken (another server, a stand-in left running): one line, not a traceback
        print(
            f"error: --port {server._port}: cannot listen on {server._host} ({exc.strerror or exc}); "
            "stop what listens there, or pick another port (--port 0: a free one)",
            file=sys.stderr,
            flush=True,
        )
        return 2
    print(url(server) if url else server.base_url, flush=True)
    try:
        while not done.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        print(json.dumps(server.snapshot(), default=str), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

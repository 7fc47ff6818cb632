"""A real server speaking AWS Bedrock Runtime's Converse API on loopback, checking what Bedrock checks.

`FakeOpenAIServer` with Bedrock's API on top (the same scripted answers or responder, seeded faults,
counters and lifecycle), answering `POST /model/{model id}/converse`:

- Every request's SigV4 signature is recomputed with botocore from what arrived (method, path, the
  headers it says it signed, the body) and the secret of the access key it names; a missing, unknown,
  expired (more than 5 minutes off) or wrong signature, a credential scoped to another region or service,
  or a missing or wrong session token is refused with 403 in Bedrock's shape (`x-amzn-ErrorType` and
  `{"message": ...}`), counted in `signature_failures`.
- The body is validated as Bedrock validates it (400 `ValidationException`): an unknown model id,
  turns that do not alternate from the user, fields Converse does not know, and each model family's own
  limits (written here as Bedrock states them, apart from the client's table): the newer Claude models
  refuse `temperature` with `topP`; Llama refuses stop sequences, `top_k` and more than 2048 tokens;
  Mistral 7B and Mixtral refuse system messages; temperature within [0, 1].
- Faults: `rate_429` and `fail_first` with `fail_kind="429"` answer `ThrottlingException` (429),
  500 `InternalServerException`, 503 `ServiceUnavailableException`; drops and hangs as the base server.

The responder sees the request as chat messages (`{"model", "messages": [{"role", "content"}]}`, the
system message first), so `oracle.oracle_responder` and the replays answer Bedrock as they answer chat.

    AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... python -m judgebench_flows.testing.fake_bedrock \\
        --port 8002 --region us-east-1 --oracle DATA.jsonl
"""

from __future__ import annotations

import argparse
import datetime
import hmac
import json
import os
import re
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from judgebench_flows.testing.fake_batches import BatchFaults
from judgebench_flows.testing.fake_openai import (
    FakeOpenAIServer,
    FaultSettings,
    _Handler,
    _word_count,
    request_key,
    serve,
)
from judgebench_flows.testing.oracle import VERDICTS, load_pairs, oracle_responder

CONVERSE_PATH = re.compile(r"^/model/([^/]+)/converse$")
SERVICE = "bedrock"
MAX_SKEW = datetime.timedelta(minutes=5)
CONVERSE_FIELDS = frozenset(
    {
        "messages",
        "system",
        "inferenceConfig",
        "additionalModelRequestFields",
        "toolConfig",
        "guardrailConfig",
        "promptVariables",
        "additionalModelResponseFieldPaths",
        "requestMetadata",
        "performanceConfig",
    }
)
INFERENCE_FIELDS = frozenset({"maxTokens", "temperature", "topP", "stopSequences"})
BAD_SIGNATURE = (
    "The request signature we calculated does not match the signature you provided. Check your AWS Secret "
    "Access Key and signing method. Consult the service documentation for details."
)
BAD_TOKEN = "The security token included in the request is invalid."
# Bedrock's own limits per model family (model-id prefix after any geography), as its documentation and
# its 400s state them.
BOTH_SAMPLING_REFUSED = ("anthropic.claude-sonnet-4-5", "anthropic.claude-haiku-4-5", "anthropic.claude-opus-4-")
NO_SYSTEM = ("mistral.mistral-7b-instruct", "mistral.mixtral-8x7b-instruct")
LLAMA_MAX_TOKENS = 2048
EXTRA_FIELDS = {"anthropic.": {"top_k"}, "mistral.": {"top_k"}}


class Refused(Exception):
    """A request Bedrock answers with an error: `status`, its exception's name and message."""

    def __init__(self, status: int, kind: str, message: str):
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


def bare_model(model: str) -> str:
    name = model.rsplit("/", 1)[-1].lower()
    geography, _, rest = name.partition(".")
    return rest if geography in {"us", "eu", "apac", "global", "us-gov", "jp", "au", "ca"} and rest else name


def body_problem(model: str, body: Any) -> str | None:
    """Why Bedrock would refuse this Converse body for `model` (None: it takes it)."""
    if not isinstance(body, dict):
        return "Malformed input request, please reformat your input and try again."
    extra = sorted(set(body) - CONVERSE_FIELDS)
    if extra:
        return f"Malformed input request: extraneous key [{extra[0]}] is not permitted, please reformat your input and try again."
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "A conversation must start with a user message. Try again with a conversation that starts with a user message."
    for index, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("user", "assistant") or (index == 0 and role != "user"):
            return "A conversation must start with a user message. Try again with a conversation that starts with a user message."
        if index and role == messages[index - 1].get("role"):
            return "A conversation must alternate between user and assistant roles. Make sure the conversation alternates between user and assistant roles and try again."
        content = message.get("content")
        if not isinstance(content, list) or not all(
            isinstance(b, dict) and isinstance(b.get("text"), str) for b in content
        ):
            return f"The content field in the Message object at messages.{index} is empty or not a list of content blocks. Add a content block to the message and try again."
    return config_problem(bare_model(model), body)


def config_problem(name: str, body: dict[str, Any]) -> str | None:
    """The inference configuration against the model family's limits."""
    config = body.get("inferenceConfig") or {}
    extra = sorted(set(config) - INFERENCE_FIELDS)
    if extra:
        return f"Malformed input request: extraneous key [{extra[0]}] is not permitted, please reformat your input and try again."
    temperature = config.get("temperature")
    if temperature is not None and not (isinstance(temperature, (int, float)) and 0 <= temperature <= 1):
        return "The value at inferenceConfig.temperature must be between 0 and 1."
    additional = body.get("additionalModelRequestFields") or {}
    allowed = next((fields for prefix, fields in EXTRA_FIELDS.items() if name.startswith(prefix)), set())
    unknown = sorted(set(additional) - allowed)
    if unknown:
        return f"Malformed input request: #: extraneous key [{unknown[0]}] is not permitted, please reformat your input and try again."
    if name.startswith(BOTH_SAMPLING_REFUSED) and "temperature" in config and "topP" in config:
        return "The model returned the following errors: `temperature` and `top_p` cannot both be specified for this model. Please use only one."
    if name.startswith("meta.llama"):
        if "stopSequences" in config:
            return "This model doesn't support the stopSequences field. Remove stopSequences and try again."
        if int(config.get("maxTokens") or 0) > LLAMA_MAX_TOKENS:
            return f"The maximum tokens you requested exceeds the model limit of {LLAMA_MAX_TOKENS}. Try again with a maximum tokens value that is lower than {LLAMA_MAX_TOKENS}."
    if name.startswith(NO_SYSTEM) and body.get("system"):
        return "This model doesn't support system messages. Try again without system messages."
    return None


def chat_view(model: str, body: dict[str, Any]) -> dict[str, Any]:
    """The request as chat messages, for responders written for chat APIs."""
    messages = (
        [{"role": "system", "content": "".join(b.get("text", "") for b in body["system"])}]
        if body.get("system")
        else []
    )
    messages += [{"role": m["role"], "content": "".join(b["text"] for b in m["content"])} for m in body["messages"]]
    return {"model": model, "messages": messages, **(body.get("inferenceConfig") or {})}


def converse_answer(view: dict[str, Any], text: str, finish_reason: str | None) -> dict[str, Any]:
    prompt = sum(_word_count(m["content"]) for m in view["messages"])
    completion = _word_count(text)
    return {
        "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
        "stopReason": "max_tokens" if finish_reason == "length" else "end_turn",
        "usage": {"inputTokens": prompt, "outputTokens": completion, "totalTokens": prompt + completion},
        "metrics": {"latencyMs": 1},
    }


class SigV4Check:
    """Bedrock's authentication of one request, redone with botocore's signer: `credentials` maps an
    access key id to (secret, session token or None)."""

    def __init__(self, credentials: dict[str, tuple[str, str | None]], region: str):
        self.credentials, self.region = credentials, region

    def problem(self, method: str, url: str, headers: Any, body: bytes) -> tuple[str, str] | None:
        """(exception name, message) of a request Bedrock would refuse, else None."""
        headers = {name.lower(): value for name, value in headers.items()}
        auth = headers.get("authorization") or ""
        found = re.fullmatch(
            r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, ?"
            r"SignedHeaders=([a-z0-9;-]+), ?Signature=([0-9a-f]{64})",
            auth,
        )
        if not found:
            return "MissingAuthenticationTokenException", "Missing Authentication Token"
        key_id, day, region, service, signed, signature = found.groups()
        if key_id not in self.credentials:
            return "UnrecognizedClientException", BAD_TOKEN
        secret, token = self.credentials[key_id]
        if token is not None and headers.get("x-amz-security-token") != token:
            return "UnrecognizedClientException", BAD_TOKEN
        if region != self.region:
            return "InvalidSignatureException", f"Credential should be scoped to a valid region, not '{region}'. "
        if service != SERVICE:
            return "InvalidSignatureException", f"Credential should be scoped to correct service: '{SERVICE}'. "
        stamp = headers.get("x-amz-date") or ""
        try:
            when = datetime.datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
        except ValueError:
            return (
                "IncompleteSignatureException",
                "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.",
            )
        now = datetime.datetime.now(datetime.timezone.utc)
        if abs(now - when) > MAX_SKEW or stamp[:8] != day:
            return "InvalidSignatureException", f"Signature expired: {stamp} is now earlier than {now:%Y%m%dT%H%M%SZ}"
        expected = self.signature(method, url, headers, body, signed.split(";"), stamp, secret, token, key_id)
        if not hmac.compare_digest(expected, signature):
            return "InvalidSignatureException", BAD_SIGNATURE
        return None

    def signature(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        body: bytes,
        signed: list[str],
        stamp: str,
        secret: str,
        token: str | None,
        key_id: str,
    ) -> str:
        """The signature botocore computes for the request as it arrived: only the headers it signed."""
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials

        request = AWSRequest(method=method, url=url, data=body, headers={n: headers.get(n) or "" for n in signed})
        request.context["timestamp"] = stamp
        signer = SigV4Auth(Credentials(key_id, secret, token), SERVICE, self.region)
        return signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)


class FakeBedrockServer(FakeOpenAIServer):
    """Bedrock Runtime's Converse API; `base_url` is the endpoint (`AWS_ENDPOINT_URL_BEDROCK_RUNTIME`)."""

    def __init__(
        self,
        responder: Any = "My final verdict is [[A>B]]",
        *,
        credentials: dict[str, tuple[str, str | None]],
        region: str = "us-east-1",
        **settings: Any,
    ):
        super().__init__(responder, **settings)
        self.check = SigV4Check(dict(credentials), region)
        self.signature_failures = 0
        self.bodies: list[dict[str, Any]] = []  # every Converse body that passed the signature check

    @property
    def base_url(self) -> str:
        return f"http://{self._host}:{self.port}"

    def _answerer(self, path: str) -> Callable[[_Handler, bytes], None] | None:
        return self._answer_converse if CONVERSE_PATH.match(path) else None

    @staticmethod
    def _error(status: int, kind: str, message: str) -> tuple[int, dict[str, Any], dict[str, str]]:
        """Bedrock's error response: the exception's name in `x-amzn-ErrorType`, its message in the body."""
        return (
            status,
            {"message": message},
            {"x-amzn-ErrorType": f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"},
        )

    def _refuse(self, handler: _Handler, status: int, kind: str, message: str) -> None:
        status, payload, headers = self._error(status, kind, message)
        self._reply(handler, status, payload, extra_headers=headers)

    def _answer_converse(self, handler: _Handler, body_bytes: bytes) -> None:
        """The signature, then the body's validation, then the faults, then the responder."""
        path = handler.path.split("?", 1)[0]
        url = f"http://{handler.headers.get('Host')}{handler.path}"
        refused = self.check.problem("POST", url, handler.headers, body_bytes)
        if refused is not None:
            with self._lock:
                self.signature_failures += 1
            self._refuse(handler, 403, *refused)
            return
        model = unquote(CONVERSE_PATH.match(path).group(1))  # type: ignore[union-attr]
        try:
            body = json.loads(body_bytes or b"null")
        except ValueError:
            body = None
        settings = self.settings
        problem = body_problem(model, body)
        if problem is None and settings.models is not None and model not in settings.models:
            problem = "The provided model identifier is invalid."
        if problem is not None:
            self._refuse(handler, 400, "ValidationException", problem)
            return
        with self._lock:
            self.bodies.append(body)
        view = chat_view(model, body)
        if self._fault(handler, self._choose_fault(request_key(view), settings), settings):
            return
        scripted = self._scripted(handler, view)
        if scripted is not None:
            text, extra = scripted
            self._reply(handler, 200, converse_answer(view, text, extra.get("finish_reason")), request_key(view))

    def _fault_error(self, fault: str, settings: FaultSettings) -> tuple[int, dict[str, Any], dict[str, str]]:
        """Bedrock's ThrottlingException (429), InternalServerException and ServiceUnavailableException."""
        if fault == "429":
            return self._error(429, "ThrottlingException", "Too many requests, please wait before trying again.")
        if fault == "500":
            return self._error(500, "InternalServerException", "The server encountered an internal error.")
        return self._error(503, "ServiceUnavailableException", "Bedrock is unable to process your request.")

    def _responder_failed(self, handler: _Handler, message: str) -> None:
        self._refuse(handler, 500, "InternalServerException", message)

    def snapshot(self) -> dict[str, Any]:
        counters = super().snapshot()
        with self._lock:
            return {**counters, "signature_failures": self.signature_failures}


JOB_PATH = re.compile(r"^/model-invocation-job(?:/([^/]+))?(/stop)?$")
ROLE_ARN = re.compile(r"^arn:aws(-[a-z]+)*:iam::\d{12}:role/.+$")
JOB_ENDED = frozenset({"Completed", "PartiallyCompleted", "Failed", "Stopped", "Expired"})
MIN_RECORDS = 100  # Bedrock's minimum number of records per batch inference job


class FakeBedrockBatchServer(BatchFaults, FakeBedrockServer):
    """Bedrock Runtime's Converse API plus the control plane's batch inference (`AWS_ENDPOINT_URL_BEDROCK`):
    `POST /model-invocation-job` (CreateModelInvocationJob: the role ARN's shape, an S3 input and output,
    `modelInvocationType` Converse; a `clientRequestToken` seen before returns its job), `GET
    /model-invocation-job/{arn}` and `POST .../stop`, every request's SigV4 signature checked as the runtime's.
    A job is read from and written to a real S3 API (`s3_endpoint`, moto's server in the tests, with the
    credentials the server accepts): Validating reads the input file (fewer than `min_records` records, or
    a record without `recordId`/`modelInput`: the job fails as Bedrock fails it), InProgress answers each
    record as Converse would (body validation, the responder), and the output `{output}/{job id}/{input
    name}.out` and `manifest.json.out` are written. The fake batch server's faults and counters
    (`BatchFaults`: `hold`, `expire_after`, `line_failure_rate`, `submitted_lines`, `answered_lines`,
    `batches_created`) apply; an expired job is `Expired`, with the records it finished in its output."""

    MAX_LINES = 50_000

    def __init__(self, *args: Any, s3_endpoint: str, min_records: int = MIN_RECORDS, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.s3_endpoint, self.min_records = s3_endpoint, min_records
        self.jobs: dict[str, dict[str, Any]] = {}
        self._tokens: dict[str, str] = {}  # clientRequestToken -> job ARN

    def _s3(self) -> Any:
        import botocore.session

        key_id, (secret, token) = next(iter(self.check.credentials.items()))
        return botocore.session.Session().create_client(
            "s3",
            region_name=self.check.region,
            endpoint_url=self.s3_endpoint,
            aws_access_key_id=key_id,
            aws_secret_access_key=secret,
            aws_session_token=token,
        )

    def _handle_post(self, handler: _Handler) -> None:
        match = JOB_PATH.match(handler.path.split("?", 1)[0])
        if match is None:
            super()._handle_post(handler)
            return
        body = handler.read_body()
        if self._signed(handler, "POST", body):
            if match.group(1) and match.group(2):
                self._stop(handler, unquote(match.group(1)))
            elif not match.group(1):
                self._create(handler, body)
            else:
                self._refuse(handler, 404, "ResourceNotFoundException", "Unknown operation")

    def _handle_get(self, handler: _Handler) -> None:
        match = JOB_PATH.match(handler.path.split("?", 1)[0])
        if match is None or not match.group(1) or match.group(2):
            super()._handle_get(handler)
            return
        if self._signed(handler, "GET", b""):
            job = self.jobs.get(unquote(match.group(1)))
            if job is None:
                self._refuse(handler, 404, "ResourceNotFoundException", "The specified job was not found.")
                return
            with self._batch_lock:
                self._advance(job)
            handler.send_json(200, self._job_json(job))

    def _signed(self, handler: _Handler, method: str, body: bytes) -> bool:
        url = f"http://{handler.headers.get('Host')}{handler.path}"
        refused = self.check.problem(method, url, handler.headers, body)
        if refused is not None:
            with self._lock:
                self.signature_failures += 1
            self._refuse(handler, 403, *refused)
            return False
        return True

    def _create(self, handler: _Handler, body: bytes) -> None:
        try:
            request = json.loads(body or b"{}")
            input_uri = request["inputDataConfig"]["s3InputDataConfig"]["s3Uri"]
            output_uri = request["outputDataConfig"]["s3OutputDataConfig"]["s3Uri"]
        except (ValueError, KeyError, TypeError):
            self._refuse(handler, 400, "ValidationException", "inputDataConfig and outputDataConfig are required")
            return
        problem = None
        if not ROLE_ARN.match(str(request.get("roleArn"))):
            problem = "1 validation error detected: Value at 'roleArn' failed to satisfy constraint"
        elif not str(input_uri).startswith("s3://") or not str(output_uri).startswith("s3://"):
            problem = "The S3 URIs must start with s3://"
        elif request.get("modelInvocationType", "InvokeModel") != "Converse":
            problem = "this stand-in serves Converse jobs only (modelInvocationType Converse)"
        if problem:
            self._refuse(handler, 400, "ValidationException", problem)
            return
        token = str(request.get("clientRequestToken") or "")
        with self._batch_lock:
            if token and token in self._tokens:  # idempotent: the job this token made
                handler.send_json(200, {"jobArn": self._tokens[token]})
                return
            job_id = uuid.uuid4().hex[:12]
            arn = f"arn:aws:bedrock:{self.check.region}:123456789012:model-invocation-job/{job_id}"
            self.jobs[arn] = {
                "jobArn": arn,
                "jobName": request.get("jobName"),
                "modelId": request.get("modelId"),
                "roleArn": request["roleArn"],
                "status": "Submitted",
                "inputDataConfig": request["inputDataConfig"],
                "outputDataConfig": request["outputDataConfig"],
                "modelInvocationType": "Converse",
                "created": time.time(),
                "records": None,
            }
            if token:
                self._tokens[token] = arn
            self.batches_created += 1
        handler.send_json(200, {"jobArn": arn})

    def _stop(self, handler: _Handler, arn: str) -> None:
        job = self.jobs.get(arn)
        if job is None:
            self._refuse(handler, 404, "ResourceNotFoundException", "The specified job was not found.")
            return
        with self._batch_lock:
            if job["status"] not in JOB_ENDED:
                self.cancelled_batches += 1
                if job["records"] is None:
                    job["status"] = "Stopped"
                else:
                    self._finish(job, done=0, final="Stopped")
        handler.send_json(200, {})

    def _advance(self, job: dict[str, Any]) -> None:
        if job["status"] == "Submitted":
            job["status"] = "Validating"
        elif job["status"] == "Validating":
            problem = self._read_input(job)
            job["status"] = "Failed" if problem else "InProgress"
            job["message"] = problem
        elif job["status"] == "InProgress" and self._due(job["created"]):
            done = len(job["records"]) if self.expire_after is None else self.expire_after
            self._finish(job, done=done, final="Completed")

    def _read_input(self, job: dict[str, Any]) -> str | None:
        """The input file's records, or why Bedrock fails the job at validation."""
        bucket, _, key = job["inputDataConfig"]["s3InputDataConfig"]["s3Uri"].removeprefix("s3://").partition("/")
        try:
            text = self._s3().get_object(Bucket=bucket, Key=key)["Body"].read().decode()
        except Exception as exc:  # noqa: BLE001 - whatever S3 said, as the job's message
            return f"Unable to read the input file: {exc}"
        records = []
        for number, raw in enumerate(text.splitlines(), start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except ValueError:
                return f"Line {number} of the input file is not valid JSON"
            if not isinstance(record, dict) or "recordId" not in record or "modelInput" not in record:
                return f"Line {number} of the input file needs recordId and modelInput"
            records.append(record)
        if len(records) < self.min_records:
            return (
                f"The number of records in the input file ({len(records)}) is less than the minimum number of "
                f"records required for a batch inference job ({self.min_records})."
            )
        if len(records) > self.max_lines:
            return f"The input file has more than {self.max_lines} records."
        job["records"] = records
        self.submitted_lines.update(str(r["recordId"]) for r in records)
        return None

    def _finish(self, job: dict[str, Any], done: int, final: str) -> None:
        """Answer the first `done` records and write the output and manifest; the rest never run."""
        outputs = []
        for index, record in enumerate(job["records"]):
            if index >= done:
                break
            out = {"recordId": record["recordId"], "modelInput": record["modelInput"]}
            out.update(self._answer_record(job["modelId"], record["modelInput"]))
            outputs.append(out)
            if "modelOutput" in out:
                self.answered_lines[str(record["recordId"])] += 1
        errors = sum(1 for o in outputs if "error" in o)
        job.update(
            status="Expired" if final == "Completed" and done < len(job["records"]) else final,
            processedRecordCount=len(outputs),
            successRecordCount=len(outputs) - errors,
            errorRecordCount=errors,
            totalRecordCount=len(job["records"]),
        )
        input_name = job["inputDataConfig"]["s3InputDataConfig"]["s3Uri"].rsplit("/", 1)[-1]
        bucket, _, prefix = job["outputDataConfig"]["s3OutputDataConfig"]["s3Uri"].removeprefix("s3://").partition("/")
        folder = f"{prefix.rstrip('/') + '/' if prefix.strip('/') else ''}{job['jobArn'].rsplit('/', 1)[-1]}/"
        s3 = self._s3()
        content = "".join(json.dumps(o) + "\n" for o in outputs).encode()
        s3.put_object(Bucket=bucket, Key=f"{folder}{input_name}.out", Body=content)
        manifest = {k: job[k] for k in ("totalRecordCount", "processedRecordCount", "successRecordCount")}
        s3.put_object(Bucket=bucket, Key=f"{folder}manifest.json.out", Body=json.dumps(manifest).encode())

    def _answer_record(self, model: str, body: Any) -> dict[str, Any]:
        """One record as Converse answers it: `modelOutput`, or `error` with Bedrock's code and message."""
        problem = body_problem(model, body)
        if problem is not None:
            return {"error": {"errorCode": 400, "errorMessage": problem}}
        fault = self._line_fault()
        if fault is not None:
            message = "Too many requests" if fault == 429 else "The server encountered an internal error."
            return {"error": {"errorCode": fault, "errorMessage": message}}
        view = chat_view(model, body)
        answer = self._responder(view)
        extra = answer if isinstance(answer, dict) else {}
        text = str(extra.get("content", "")) if isinstance(answer, dict) else str(answer)
        return {"modelOutput": converse_answer(view, text, extra.get("finish_reason"))}

    def _job_json(self, job: dict[str, Any]) -> dict[str, Any]:
        fields = (
            "jobArn", "jobName", "modelId", "roleArn", "status", "message", "inputDataConfig", "outputDataConfig",
            "modelInvocationType", "totalRecordCount", "processedRecordCount", "successRecordCount", "errorRecordCount",
        )  # fmt: skip
        shown = {k: job[k] for k in fields if job.get(k) is not None}
        stamp = datetime.datetime.fromtimestamp(job["created"], datetime.timezone.utc).isoformat()
        return {**shown, "submitTime": stamp}


def environment_credentials() -> dict[str, tuple[str, str | None]]:
    """The credentials of this process's environment (AWS_ACCESS_KEY_ID, ...), which the server accepts."""
    key_id, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if not key_id or not secret:
        raise SystemExit("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY: the credentials the server accepts")
    return {key_id: (secret, os.environ.get("AWS_SESSION_TOKEN") or None)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m judgebench_flows.testing.fake_bedrock",
        description="Serve a fake AWS Bedrock Runtime Converse API on loopback, checking SigV4 signatures made "
        "with the credentials of this environment, for `judgebench run --provider bedrock` with "
        "AWS_ENDPOINT_URL_BEDROCK_RUNTIME=http://127.0.0.1:PORT.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8002)
    parser.add_argument("--region", default=os.environ.get("AWS_REGION") or "us-east-1")
    parser.add_argument("--answer", default="My final verdict is [[A>B]]")
    parser.add_argument("--oracle", metavar="DATA.jsonl", default=None, help="answer as a judge that knows the labels")
    parser.add_argument("--oracle-judge", default="arena_hard", choices=sorted(VERDICTS))
    parser.add_argument("--oracle-accuracy", type=float, default=0.75)
    parser.add_argument("--rate-429", type=float, default=0.0, help="share of requests throttled (ThrottlingException)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", action="append", dest="models", default=None, help="accepted model id (repeatable)")
    args = parser.parse_args(argv)
    answer: Any = args.answer
    if args.oracle:
        answer = oracle_responder(
            load_pairs(args.oracle), VERDICTS[args.oracle_judge], accuracy=args.oracle_accuracy, seed=args.seed
        )
    server = FakeBedrockServer(
        answer,
        credentials=environment_credentials(),
        region=args.region,
        rate_429=args.rate_429,
        seed=args.seed,
        models=set(args.models) if args.models else None,
        host=args.host,
        port=args.port,
    )
    return serve(server)


__all__ = ["FakeBedrockBatchServer", "FakeBedrockServer", "SigV4Check", "body_problem", "main"]

if __name__ == "__main__":
    sys.exit(main())

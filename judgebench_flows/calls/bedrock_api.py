"""The wire for AWS Bedrock's Converse API: botocore's own `bedrock-runtime` client, in a thread pool.

botocore signs each request (SigV4) with the credentials of AWS's chain (`core.aws_credentials`, refreshed
by botocore before they expire) and sends it with urllib3. Its client is synchronous, so each call runs in
a thread of a pool sized to the run's concurrency (the caller's limits keep that many in flight at most).
Measured against signing with botocore and sending with httpx from the event loop, the client in threads
costs less CPU per call and answers more calls per second (docs/performance.md). botocore's own retries
are off: the caller's policies retry, as for every provider. The request is `converse(modelId, ...)`: the
leading system message as `system`, the other turns as `messages` of text blocks, the judge's sampling in
`inferenceConfig` (and `additionalModelRequestFields`) as its model family takes it (`bedrock_rules`).

Errors come out as `CallError`s with Bedrock's exception name as their code: `ThrottlingException` (429)
is retried as a rate limit, a refused signature, credential or model access (403) stops the run, and a
400 (`ValidationException`) that refuses a parameter names it (`param`), which `request_rules.Learned`
adapts to. A secret never leaves here: the credentials are registered for redaction when read.
"""

from __future__ import annotations

import asyncio
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import JsonValue

from judgebench_flows.calls.bedrock_rules import INFERENCE_CONFIG, Family, family_of
from judgebench_flows.calls.errors import CallError, http_error
from judgebench_flows.calls.transport import BadAnswerBody, JsonBody
from judgebench_flows.core import aws_credentials
from judgebench_flows.core.completion import Completion, Sampling, finish_reason
from judgebench_flows.core.secrets import redact, register_secret

# A Converse field a 400 names -> the judge's parameter behind it.
FIELD_PARAMS = {field: param for param, field in INFERENCE_CONFIG.items()} | {"top_k": "top_k"}
REFUSAL = re.compile(r"not support|doesn't support|does not support|cannot both be specified|not permitted", re.I)


def converse_body(family: Family, messages: list[dict[str, str]], params: Sampling) -> JsonBody:
    """The Converse body for chat messages and the parameters the family's rule let through."""
    system: list[JsonValue] = []
    if messages and messages[0].get("role") == "system":
        system, messages = [{"text": str(messages[0]["content"])}], messages[1:]
    params = dict(params)
    if family.one_of and all(name in params for name in family.one_of):
        params.pop(family.one_of[1])
    config: dict[str, JsonValue] = {"maxTokens": family.asked_tokens(params.get("max_tokens"))}
    for name, value in params.items():
        if name == "stop":
            config["stopSequences"] = [value] if isinstance(value, str) else value
        elif name in INFERENCE_CONFIG and name != "max_tokens":
            config[INFERENCE_CONFIG[name]] = value
    body: JsonBody = {
        "messages": [{"role": m["role"], "content": [{"text": str(m["content"])}]} for m in messages],
        "inferenceConfig": config,
    }
    if system:
        body["system"] = system
    additional = {name: params[name] for name in sorted(family.additional & params.keys())}
    if additional:
        body["additionalModelRequestFields"] = additional
    return body


def completion_of(response: Any) -> Completion:
    """The answer's text blocks (never a reasoning block) and token counts of a Converse answer."""
    if not isinstance(response, dict):
        raise BadAnswerBody()
    message = (response.get("output") or {}).get("message") or {}
    blocks = message.get("content") or []
    text = "".join(b["text"] for b in blocks if isinstance(b, dict) and isinstance(b.get("text"), str))
    usage = response.get("usage") or {}
    stop = response.get("stopReason")
    return Completion(
        redact(text),
        int(usage.get("inputTokens") or 0),
        int(usage.get("outputTokens") or 0),
        finish_reason=finish_reason(stop),
    )


def refused_parameter(message: str, sent: JsonBody) -> str | None:
    """The judge's parameter a 400 refuses, if it names one this request carried: `top_p` when it may not
    go with `temperature` (JudgeBench's), `messages` for a system message the model does not take."""
    if not REFUSAL.search(message):
        return None
    if re.search(r"system message", message, re.I) and "system" in sent:
        return "messages"
    carried = {**(sent.get("inferenceConfig") or {}), **(sent.get("additionalModelRequestFields") or {})}  # type: ignore[dict-item]
    named = [
        param
        for field, param in FIELD_PARAMS.items()
        if field in carried and re.search(rf"\b({field}|{param})\b", message)  # Converse's name or the model API's
    ]
    if "cannot both be specified" in message and "top_p" in named:
        return "top_p"
    return named[0] if named else None


def client_error(exc: Exception, sent: JsonBody) -> CallError:
    """The `CallError` of a botocore failure: an error answer's status, Bedrock's exception name (its
    code), its message and the parameter a 400 refuses; a timeout; a connection that failed or dropped."""
    import botocore.exceptions as aws

    if isinstance(exc, aws.ClientError):
        answer: Any = exc.response
        error = answer.get("Error") or {}
        meta = answer.get("ResponseMetadata") or {}
        said = str(error.get("Message") or "")
        status = int(meta.get("HTTPStatusCode") or 0)
        param = refused_parameter(said, sent) if status == 400 else None
        body = {"error": {"code": str(error.get("Code") or ""), "message": said}}
        return http_error(status, body, meta.get("HTTPHeaders") or {}, param=param)
    if isinstance(exc, aws.ReadTimeoutError | aws.ConnectTimeoutError):
        return CallError("timeout")
    if isinstance(exc, aws.EndpointConnectionError | aws.ConnectionClosedError | aws.HTTPClientError):
        return CallError("connection")
    return CallError("other", message=f"{type(exc).__name__}: {redact(str(exc))}")


class BedrockTransport:
    """botocore's `bedrock-runtime` client for one endpoint and model, its calls in a thread pool of
    `concurrency` threads (started as calls need them). `aws`: a botocore session (else one of this
    process's environment: AWS_PROFILE and the files it names)."""

    checks_raw_scores = False
    answers_scores = False

    def __init__(
        self, base_url: str, model: str, api_key: str, request_timeout: float, concurrency: int, aws: Any = None
    ):
        import botocore.config

        aws = aws or aws_credentials.session()
        self.base_url, self.model = base_url.rstrip("/"), model
        self.family = family_of(model)
        self.credentials = aws_credentials.credentials(aws)
        config = botocore.config.Config(
            retries={"total_max_attempts": 1, "mode": "standard"},  # the caller retries, as for every provider
            connect_timeout=request_timeout,
            read_timeout=request_timeout,
            max_pool_connections=concurrency,
        )
        self.client = aws_credentials.client(
            aws, "bedrock-runtime", region_name=aws_credentials.region(aws), endpoint_url=self.base_url, config=config
        )
        self.pool = ThreadPoolExecutor(concurrency, thread_name_prefix="bedrock")
        self._registered: tuple[str, str | None] | None = None

    def _register(self) -> None:
        """The credentials' secrets for redaction, again whenever botocore has refreshed them."""
        frozen = self.credentials.get_frozen_credentials()
        if self._registered != (frozen.secret_key, frozen.token):
            for secret in (frozen.secret_key, frozen.token):
                if secret:
                    register_secret(secret)
            self._registered = (frozen.secret_key, frozen.token)

    def _converse(self, body: JsonBody) -> Any:
        self._register()
        return self.client.converse(modelId=self.model, **body)

    async def post(self, messages: list[dict[str, str]], sampling: Sampling) -> Any:
        """One attempt, in a thread of the pool: the parsed answer."""
        from botocore.parsers import ResponseParserError

        body = converse_body(self.family, messages, sampling)
        try:
            return await asyncio.get_running_loop().run_in_executor(self.pool, self._converse, body)
        except ResponseParserError as exc:  # a 200 that is not Bedrock's JSON: a broken answer, retried
            raise BadAnswerBody() from exc
        except Exception as exc:
            raise client_error(exc, body) from None

    @staticmethod
    def answer(response: Any) -> Completion:
        try:
            return completion_of(response)
        except (ValueError, TypeError, AttributeError) as exc:
            raise BadAnswerBody() from exc

    def ignored(self, params: Sampling, response: Any) -> tuple[str, str] | None:
        return None

    async def aclose(self) -> None:
        """The pool's threads end with the calls they carry (a cancelled call's thread finishes its request
        within the request timeout); the client's connections are closed."""
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()


__all__ = ["BedrockTransport", "client_error", "completion_of", "converse_body", "refused_parameter"]

"""Each provider classifies its own failures into the project's one `CallError` (kind, status, retry-after,
rejected parameter, the server's words): the policies around the wires read nothing else."""

from __future__ import annotations

import pickle

import anthropic
import httpx
import openai

from judgebench_flows.calls.anthropic_api import anthropic_call_error
from judgebench_flows.calls.batch import LineResult, line_error
from judgebench_flows.calls.errors import CallError, http_error
from judgebench_flows.calls.retry import RetryPolicy, deterministic_reason
from judgebench_flows.calls.transport import BadAnswerBody, openai_call_error

REQUEST = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")


def test_openai_status_errors_keep_status_code_retry_after_and_words() -> None:
    response = httpx.Response(429, headers={"retry-after-ms": "1500"}, request=REQUEST, text="")
    body = {"message": "Rate limit reached for gpt-4o\n in organization org-1", "code": "rate_limit_exceeded"}
    failed = openai_call_error(openai.RateLimitError("slow down", response=response, body=body))
    assert (failed.kind, failed.status, failed.code, failed.retry_after) == ("status", 429, "rate_limit_exceeded", 1.5)
    assert failed.retryable and failed.rate_limited and not failed.fatal
    assert failed.message == "Rate limit reached for gpt-4o in organization org-1"  # whole, on one line
    assert failed.failure_kind() == "HTTP 429 (rate_limit_exceeded)" and failed.server_message == failed.message
    assert openai_call_error(openai.APITimeoutError(request=REQUEST)).kind == "timeout"
    dropped = openai_call_error(openai.APIConnectionError(request=REQUEST))
    assert dropped.describe() == "connection failed or dropped" and dropped.server_message == ""


def test_deterministic_and_fatal_statuses() -> None:
    context = http_error(400, {"error": {"message": "maximum context length is 8192", "code": "context_length"}})
    assert not context.retryable and not context.fatal
    assert context.describe() == "HTTP 400 (context_length): maximum context length is 8192"
    assert http_error(400, {"error": {"message": "Invalid model name passed in model=x"}}).fatal
    assert http_error(404, {"detail": "Not Found"}).message == "Not Found"  # FastAPI's shape
    assert http_error(503, None, text="<html>busy</html>").message == ""  # an HTML page is not words
    assert all(http_error(status, {}).retryable for status in (408, 409, 425, 500, 529))


def test_anthropic_names_the_refused_parameter_without_openai_classes() -> None:
    body = {"type": "error", "error": {"type": "invalid_request_error", "message": "temperature is not supported"}}
    response = httpx.Response(400, json=body, request=REQUEST)
    exc = anthropic.BadRequestError("temperature is not supported", response=response, body=body)
    failed = anthropic_call_error(exc, {"temperature": 0.0, "max_tokens": 8})
    assert isinstance(failed, CallError) and not isinstance(failed, openai.APIError)
    assert (failed.status, failed.param, failed.error["code"]) == (400, "temperature", "unsupported_parameter")
    overloaded = httpx.Response(529, headers={"retry-after": "2"}, json={}, request=REQUEST)
    busy = anthropic_call_error(anthropic.APIStatusError("overloaded", response=overloaded, body={}), {})
    assert busy.retryable and busy.retry_after == 2.0


def test_a_failed_batch_line_is_a_call_error_not_a_made_up_response() -> None:
    failed = line_error(LineResult(400, {"error": {"message": "bad request: messages", "code": "invalid"}}))
    assert (failed.status, failed.message, failed.retry_after) == (400, "bad request: messages", None)
    assert not hasattr(failed, "response") and not failed.retryable
    server_failed = line_error(LineResult(500, {}))
    assert server_failed.message == "batch line failed with HTTP 500" and server_failed.retryable


def test_call_errors_survive_pickling() -> None:
    """Prefect and Dask pickle exceptions between processes."""
    failed = http_error(429, {"error": {"message": "slow", "param": "x"}}, {"retry-after": "3"}, param="top_p")
    again = pickle.loads(pickle.dumps(failed))
    assert (again.kind, again.status, again.message, again.retry_after, again.param) == (
        "status",
        429,
        "slow",
        3.0,
        "top_p",
    )
    assert str(again) == str(failed)


def test_no_api_name_is_compared_outside_the_factory() -> None:
    """`providers.model_api` picks the wire once; nothing else in the product code compares an endpoint
    API's name (`api == "chat"`, `judge.api != "pooling"`, ...): a provider or API is added in one place."""
    import ast

    from tests.test_layout import source_files

    apis = {"chat", "completions", "pooling", "transformers"}
    found = []
    for module, path in source_files().items():
        if module.startswith("judgebench_flows.testing") or module == "judgebench_flows.calls.providers":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            names = {
                s.id if isinstance(s, ast.Name) else s.attr for s in sides if isinstance(s, ast.Name | ast.Attribute)
            }
            constants = {s.value for s in sides if isinstance(s, ast.Constant)}
            constants |= {
                e.value for s in sides if isinstance(s, ast.Tuple) for e in s.elts if isinstance(e, ast.Constant)
            }
            if "api" in names and constants & apis:
                found.append(f"{module}:{node.lineno}")
    assert not found, f"API names compared outside providers.py: {found}"


def test_the_retry_policy_retries_what_call_error_calls_retryable_and_nothing_else() -> None:
    """One home per decision: the policy asks `CallError.retryable`; a broken answer is a retried
    `CallError`; any other exception (a stopped run, a bug) is never retried; a recorded reason is
    deterministic exactly when its status is one `CallError` does not retry."""
    broken = BadAnswerBody()
    assert isinstance(broken, CallError) and broken.retryable and not broken.fatal
    assert (
        broken.describe() == broken.failure_kind() == "the endpoint answered 200 with a body that is not a JSON object"
    )
    assert isinstance(pickle.loads(pickle.dumps(broken)), BadAnswerBody)
    assert RetryPolicy.retries(broken) and RetryPolicy.retries(http_error(503, {}))
    assert not RetryPolicy.retries(http_error(400, {})) and not RetryPolicy.retries(ValueError("a bug"))
    for status in (400, 401, 404, 408, 409, 413, 422, 425, 429, 500, 503, 529):
        reason = http_error(status, {"error": {"message": "said"}}).describe()
        assert deterministic_reason(reason) == (not http_error(status, {}).retryable), reason
        assert deterministic_reason(f"HTTP {status} after 3 attempts") == deterministic_reason(reason)
    assert not deterministic_reason("request timed out") and not deterministic_reason(None)

"""What a finished run tells Prefect's automations (flows/events.py), and which failures are retried
(flows/retries.py): the event names, the configuration as a stable resource, the payload, no secrets."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from judgebench_flows.calls.errors import http_error
from judgebench_flows.calls.transport import openai_call_error
from judgebench_flows.core.config import RunConfig
from judgebench_flows.core.errors import FatalEndpointError, RunFailed, UserError
from judgebench_flows.core.secrets import register_secret
from judgebench_flows.flows.events import RunTrace, config_resource, night_status, run_payload, run_status
from judgebench_flows.flows.retries import carried_results, is_transient
from judgebench_flows.judging.matrix import parse_matrix
from judgebench_flows.scoring.run_results import RunResults
from tests.conftest import CANARY_KEY, GPT4O_FILE


def _document(accuracy: float = 0.5, regressed: bool | None = None, failed: bool = False) -> dict:
    """results.json's content, as the judging flow returns it (`run.status` only on a failed run)."""
    regression = (
        None
        if regressed is None
        else {
            "delta": -0.25,
            "ci_low": -0.4,
            "ci_high": -0.1,
            "p_drop": 0.99,
            "regressed": regressed,
            "baseline_run_id": "b" * 32,
            "baseline_accuracy": 0.75,
            "n_pairs": 20,
            "message": "accuracy dropped",
        }
    )
    return {
        "overall_accuracy": {"accuracy": accuracy, "ci_low": 0.3, "ci_high": 0.7},
        "invalid": {"failed_judgments": 1, "invalid_judgments": 2},
        "usage": {"judgments": 40, "cost_usd": 0.12},
        "dataset": {"n_pairs": 20},
        "regression": regression,
        "run": {"run_id": "r" * 32, **({"status": "failed"} if failed else {})},
    }


def _results(accuracy: float = 0.5, regressed: bool | None = None, failed: bool = False) -> RunResults:
    return RunResults.model_validate(_document(accuracy, regressed, failed))


def _config(**extra) -> RunConfig:
    return RunConfig(model="judge-a", judge_type="vanilla", data_file=GPT4O_FILE, **extra)


def test_run_status_follows_results() -> None:
    assert run_status(_results(), None) == "completed"
    assert run_status(_results(regressed=False), None) == "completed"
    assert run_status(_results(regressed=True), None) == "regressed"
    assert run_status(_results(failed=True), None) == "failed"
    assert run_status(None, RuntimeError("x")) == "failed"
    assert night_status(["completed", "regressed"]) == "regressed"
    assert night_status(["regressed", "failed", "completed"]) == "failed"
    assert night_status([]) == "completed"


def test_payload_holds_accuracy_change_counts_and_cost() -> None:
    payload = run_payload(_results(regressed=True), None, RunTrace(), "f-1")
    assert payload["status"] == "regressed" and payload["accuracy"] == 0.5 and payload["run_id"] == "r" * 32
    assert payload["change"]["delta"] == -0.25 and payload["change"]["ci_low"] == -0.4
    assert payload["change"]["baseline_run_id"] == "b" * 32
    assert (payload["failed_judgments"], payload["invalid_judgments"], payload["judgments"]) == (1, 2, 40)
    assert payload["cost_usd"] == 0.12 and payload["flow_run_id"] == "f-1"
    assert run_payload(_results(), None, RunTrace(), None)["change"] is None  # no baseline
    json.dumps(payload)  # plain JSON: what an event carries


def test_night_payload_lists_each_cell_as_its_outcome_and_the_timing_once_the_night_ran() -> None:
    from judgebench_flows.flows.events import NightPayload, NightRefused
    from judgebench_flows.flows.outcomes import CellOutcome

    cell = CellOutcome(name="a", status="regressed", result_path="a/results.json", accuracy=0.5, endpoint="e")
    usage = {"e": {"calls": 3, "busy_s": 1.5, "max_in_flight": 2, "concurrency": 4, "busy_share": 0.75}}
    counts = {"completed": 0, "regressed": 1, "failed": 0}
    ran = NightPayload(status="regressed", attempt=1, cells=[cell], counts=counts, wall_s=2.0, endpoints=usage)
    assert json.loads(json.dumps(ran.as_json())) == {
        "status": "regressed",
        "attempt": 1,
        "cells": [cell.model_dump()],
        "counts": counts,
        "wall_s": 2.0,
        "endpoints": usage,
    }
    assert type(ran.as_json()["endpoints"]["e"]["calls"]) is int  # counts stay integers in the JSON
    refused = NightPayload(
        status="failed", attempt=2, cells=[NightRefused(message="bad ref")], counts={**counts, "failed": 1}
    )
    assert refused.as_json()["cells"] == [{"name": "preflight", "status": "failed", "message": "bad ref"}]
    assert "wall_s" not in refused.as_json() and "endpoints" not in refused.as_json()


def test_configuration_is_a_stable_resource() -> None:
    config = _config(base_url="http://127.0.0.1:9/v1")
    trace = RunTrace(run_id="x", commit="c" * 40, config_key="k" * 16, data_file=GPT4O_FILE)
    resource = config_resource(config, trace)
    assert resource["prefect.resource.id"] == "judgebench.config." + "k" * 16
    assert (resource["judgebench.judge"], resource["judgebench.model"]) == ("vanilla", "judge-a")
    assert (resource["judgebench.dataset"], resource["judgebench.commit"]) == (GPT4O_FILE, "c" * 40)
    assert all(isinstance(v, str) for v in resource.values())
    # before the commit is known (the clone failed) the key is still the configuration's, night after night
    early = config_resource(config, RunTrace())["prefect.resource.id"]
    assert early == config_resource(_config(base_url="http://127.0.0.1:9/v1"), RunTrace())["prefect.resource.id"]


def test_no_secret_reaches_an_event() -> None:
    register_secret(CANARY_KEY)
    config = _config(repo_url=f"https://user:{CANARY_KEY}@example.com/JudgeBench.git", base_url="http://127.0.0.1:9/v1")
    error = RuntimeError(f"the endpoint said: bad key {CANARY_KEY}")
    trace = RunTrace()
    event = json.dumps([config_resource(config, trace), run_payload(None, error, trace, None)])
    assert CANARY_KEY not in event and "user:" not in event


def test_a_failure_another_attempt_follows_is_announced_as_retrying() -> None:
    from judgebench_flows.flows.events import run_event

    error = RuntimeError("endpoint down")
    assert run_event(_config(), None, RunTrace(), error=error, retrying=True)["event"] == "judgebench.run.retrying"
    assert run_event(_config(), None, RunTrace(), error=error)["event"] == "judgebench.run.failed"
    done = run_event(_config(), _results(), RunTrace(), retrying=True)  # only a failure is retried
    assert done["event"] == "judgebench.run.completed" and done["payload"]["retrying"] is False
    # what a RunFailed carries (results.json's content, a dict) is checked once into RunResults: the same payload
    failed = RunFailed("too little", _document())
    carried = run_event(_config(), carried_results(failed), RunTrace(), error=failed)
    assert carried["payload"] == run_event(_config(), _results(), RunTrace(), error=failed)["payload"]
    assert carried["payload"]["accuracy"] == 0.5
    # content that is not a results.json never fails the run over its event: the run's error decides
    unreadable = RunFailed("too little", {"run": "?"})
    assert carried_results(unreadable) is None and carried_results(error) is None
    event = run_event(_config(), carried_results(unreadable), RunTrace(), error=unreadable)
    assert event["event"] == "judgebench.run.failed" and event["payload"]["accuracy"] is None


def test_only_passing_failures_are_retried() -> None:
    request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    assert is_transient(openai_call_error(openai.APIConnectionError(request=request)))
    assert is_transient(httpx.ConnectError("refused"))
    rate_limited = openai.RateLimitError("slow down", response=httpx.Response(429, request=request), body=None)
    assert is_transient(openai_call_error(rate_limited))
    assert not is_transient(http_error(400, {"error": {"message": "context too long"}}))
    # measured too little because nothing answered: worth another try; because verdicts were garbage: not
    unanswered = {"invalid": {"failed_judgments": 30, "invalid_judgments": 0}}
    garbage = {"invalid": {"failed_judgments": 0, "invalid_judgments": 30}}
    # as read back from the run's results.json (a night's cell, whose error lost what it carried)
    assert is_transient(RunFailed("too little"), RunResults.model_validate(unanswered))
    assert not is_transient(RunFailed("too little"), RunResults.model_validate(garbage))
    assert is_transient(RunFailed("too little", unanswered))  # what the error itself carries
    assert not is_transient(RunFailed("too little", garbage))
    assert not is_transient(RunFailed("too little", {"invalid": "?"}))  # not a results.json: no results
    assert not is_transient(RunFailed("stopped early: all rejected"))  # nothing published: a refusal
    assert not is_transient(UserError("cannot clone /nowhere: does not exist"))
    assert not is_transient(FatalEndpointError("unknown model"))
    assert not is_transient(ValueError("a bug"))


def test_deployment_parameters_override_the_matrix(tmp_path) -> None:
    matrix = parse_matrix({"judge_types": ["vanilla"], "models": ["judge-a"], "data_files": [GPT4O_FILE]})
    other = matrix.overridden(repo_url=str(tmp_path), ref="abc1234", data_files=["a.jsonl", "b.jsonl"])
    entries = other.entries()
    assert [e.config.data_file for e in entries] == ["a.jsonl", "b.jsonl"]
    assert {(e.config.repo_url, e.config.ref) for e in entries} == {(str(tmp_path), "abc1234")}
    assert matrix.overridden() is matrix
    with pytest.raises(UserError, match="^parameters: data_files"):
        matrix.overridden(data_files=["a.jsonl", "a.jsonl"])


def test_a_secret_inside_another_leaves_nothing_of_either() -> None:
    """Redaction replaces the longest secret first, whatever order they were registered in: a short key
    that is part of a longer one must not turn the longer into a partly visible `sk-***-tail`."""
    from judgebench_flows.core.secrets import redact

    register_secret("inner-7731")
    register_secret("sk-outer-inner-7731-tail")
    assert redact("key sk-outer-inner-7731-tail and inner-7731") == "key *** and ***"


def test_too_little_is_measured_on_the_typed_results() -> None:
    from judgebench_flows.flows.judgebench_flow import measured_too_little

    document = _document() | {"invalid": {"failed_judgments": 1, "invalid_judgments": 2, "reasons": {"no verdict": 2}}}
    results = RunResults.model_validate(document)  # 3 of 40 judgments without a verdict: 7.5%
    assert measured_too_little(results, 0.1) is None
    too_little = measured_too_little(results, 0.05)
    assert too_little == (
        "3 of 40 judgments failed or were invalid (7.5%, more than --max-failed-fraction 0.05): no verdict (2)"
    )
    assert measured_too_little(RunResults.model_validate(document | {"usage": None}), 0.0) is None  # nothing judged

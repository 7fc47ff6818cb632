"""One endpoint settings model carried whole, one record <-> row mapping, one results model (issue 15, 4-5)."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from judgebench_flows.calls.caller import ChatCaller
from judgebench_flows.core.config import RunConfig, build_config
from judgebench_flows.core.endpoint import ENDPOINT_OPTIONS, EndpointSettings
from judgebench_flows.core.errors import UserError
from judgebench_flows.core.records import JudgmentRecord
from judgebench_flows.data import db
from judgebench_flows.judging.shards import JudgeSpec
from judgebench_flows.scoring.result_types import SliceAccuracy
from judgebench_flows.scoring.run_results import DatasetInfo, RunHeader, RunInfo, RunResults, Timings


def test_flat_options_build_the_nested_settings_and_dump_flat() -> None:
    config = build_config(
        model="m", base_url="http://127.0.0.1:9/v1", concurrency=3, rpm=60, cache="refresh", drop_params=["top_p"]
    )
    assert config.endpoint == EndpointSettings(
        provider="openai",  # a base URL given, no --provider: OpenAI-compatible
        base_url="http://127.0.0.1:9/v1",
        concurrency=3,
        rpm=60,
        cache="refresh",
        drop_params=["top_p"],
    )
    dumped = config.model_dump()
    assert "endpoint" not in dumped and dumped["concurrency"] == 3 and dumped["base_url"] == "http://127.0.0.1:9/v1"
    assert RunConfig.model_validate(dumped) == config  # Prefect's stored parameters and config_json validate back
    assert RunConfig.model_validate_json(config.model_dump_json()) == config
    assert ENDPOINT_OPTIONS <= RunConfig.option_names()


def test_defaults_are_written_once() -> None:
    """RunConfig and JudgeSpec have no endpoint field of their own: each takes the settings whole."""
    assert not ENDPOINT_OPTIONS & set(RunConfig.model_fields)
    assert not (ENDPOINT_OPTIONS - {"base_url"}) & set(JudgeSpec.model_fields)
    assert RunConfig(model="m").endpoint.concurrency == EndpointSettings.model_fields["concurrency"].default


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"concurrency": 0}, "--concurrency: Input should be greater than or equal to 1"),
        ({"base_url": "ftp://x"}, "--base-url: must start with http:// or https://"),
        ({"api_key_env": "A", "api_key_secret": "b"}, "configuration: give the key's source once"),
        ({"request_style": "nope"}, "--request-style:"),
    ],
)
def test_errors_name_the_flat_option(options: dict, message: str) -> None:
    with pytest.raises(UserError) as caught:
        build_config(model="m", **options)
    assert str(caught.value).startswith(message)


def test_caller_is_built_from_the_settings_whole() -> None:
    settings = EndpointSettings(
        base_url="http://127.0.0.1:9/v1",
        concurrency=5,
        request_timeout=7,
        max_retries=2,
        retry_initial_wait=0.5,
        retry_max_wait=3,
        rpm=30,
        cache="off",
        adaptive_concurrency=True,
    )

    async def build() -> ChatCaller:
        caller = ChatCaller(settings, model="m", api_key="k")
        await caller.aclose()
        return caller

    caller = asyncio.run(build())
    assert caller.settings is settings and caller.base_url == "http://127.0.0.1:9/v1"
    # Each policy configured from them: limits (adaptive from 5, paced at 30 rpm), cache mode, retries.
    limits = caller.limits
    assert limits.adaptive is not None and limits.adaptive.maximum == 5
    assert limits.pacer is not None and limits.pacer.interval == 60 / 30
    assert caller.cache.mode == "off" and not caller.cache.reads
    assert (caller.retry.max_retries, caller.retry.initial_wait, caller.retry.max_wait) == (2, 0.5, 3)


def test_record_row_mapping_round_trips(tmp_path) -> None:
    engine = db.open_database(f"sqlite:///{tmp_path / 'r.db'}")
    record = JudgmentRecord(
        pair_id="p1",
        order=1,
        source="mmlu-pro-law",
        category="mmlu-pro",
        label="A>B",
        status="invalid",
        decision="",
        decision_for_pair="",
        judge_model="m",
        prompt="not stored",
        response="raw",
        error="e",
        latency_s=1.5,
        calls=2,
        cached_calls=1,
        prompt_tokens=10,
        completion_tokens=20,
    )
    db.save_judgments(engine, db.judgment_rows("run", [record]))
    [back] = db.judgment_records(db.run_judgments(engine, "run"))
    assert back == record.model_copy(update={"judge_model": "", "prompt": ""})
    # Every column but the keys comes from a record field: a column added without one would be lost.
    stored = {column for _, column in db._stored_fields()}
    assert set(db.JudgmentRow.model_fields) - stored == {"id", "run_id"}


def test_mapping_is_the_one_used_by_publish_and_compare() -> None:
    from judgebench_flows.scoring import compare
    from judgebench_flows.tasks import publish

    assert publish.judgment_rows is db.judgment_rows
    assert "db.judgment_records" in inspect.getsource(compare.records_of)


def _results(**run: object) -> RunResults:
    header = RunHeader(
        model="m",
        judge_type="vanilla",
        dataset=DatasetInfo(repo_url=None, commit=None, data_file="d.jsonl", n_pairs=1, skipped_rows=0, skipped=[]),
    )
    info = RunInfo(
        run_id="r",
        config_key="k",
        started="s",
        finished="f",
        duration_s=1.0,
        flow_run_id="fr",
        mode="both-orders",
        shuffle_responses=False,
        seed=42,
        timings=Timings(fetch_s=0.1, load_s=0.2, judge_s=0.3, judge_cpu_ms_per_judgment=0.4),
        **run,
    )
    acc = {"accuracy": 1.0, "correct_count": 1, "valid_samples": 1, "total_samples": 1}
    return RunResults(
        **header.model_dump(),
        overall_accuracy=acc,
        category_accuracy={},
        source_accuracy={},
        consistency={},
        invalid={},
        usage={"judgments": 2},
        run=info,
    )


def test_results_keep_their_json_shape() -> None:
    """Keys present only in some runs stay absent while unset (never null); the order is results.json's."""
    plain = _results().as_json()
    assert list(plain) == [
        "model",
        "judge_type",
        "dataset",
        "overall_accuracy",
        "category_accuracy",
        "source_accuracy",
        "consistency",
        "invalid",
        "usage",
        "regression",
        "run",
    ]
    assert plain["regression"] is None
    assert list(plain["run"]) == [
        "run_id",
        "config_key",
        "started",
        "finished",
        "duration_s",
        "flow_run_id",
        "mode",
        "shuffle_responses",
        "seed",
        "timings",
    ]
    assert list(plain["run"]["timings"]) == ["fetch_s", "load_s", "judge_s", "judge_cpu_ms_per_judgment"]
    full = _results(requests={"rule": "standard"}, status="failed", failure="why")
    full.outputs, full.run.timings.publish_s = {"results": "x.json"}, 0.5
    shaped = full.as_json()
    assert shaped["outputs"] == {"results": "x.json"} and shaped["run"]["timings"]["publish_s"] == 0.5
    assert (shaped["run"]["requests"], shaped["run"]["status"], shaped["run"]["failure"]) == (
        {"rule": "standard"},
        "failed",
        "why",
    )


def test_run_lifecycle_helpers(tmp_path) -> None:
    """start -> finish records the measurement; fail keeps a user error's line but only an unexpected
    error's type (its message may carry anything)."""
    from datetime import datetime, timezone

    engine = db.open_database(f"sqlite:///{tmp_path / 'r.db'}")
    now = datetime.now(timezone.utc)
    for run_id in ("a", "b", "c"):
        db.start_run(engine, run_id, config_key="k", judge_type="vanilla", model="m", started=now, n_pairs=3)
    running = db.get_run(engine, "a")
    assert running is not None and (running.status, running.pid, running.host) == (
        "running",
        __import__("os").getpid(),
        __import__("socket").gethostname(),
    )
    db.finish_run(
        engine,
        "a",
        status="regressed",
        finished=now,
        overall=SliceAccuracy(accuracy=0.5, ci_low=0.1, ci_high=0.9),
        message="dropped",
        results_json="{}",
    )
    db.fail_run(engine, "b", UserError("--data-file: no such file"))
    db.fail_run(engine, "c", RuntimeError("secret-ish detail"))
    got = {r.run_id: (r.status, r.message, r.overall_accuracy) for r in db.list_runs(engine)}
    assert got == {
        "a": ("regressed", "dropped", 0.5),
        "b": ("failed", "--data-file: no such file", None),
        "c": ("failed", "RuntimeError", None),
    }

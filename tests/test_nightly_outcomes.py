"""A dead night must not look like a good one.

A cell whose endpoint answers HTTP 500 to every call ends failed, the night ends Failed, the summary shows
its failed judgments, and the run is never the baseline the next night is compared with. The matrix gives
each model its own endpoint and key variable. Also: the configuration key separates endpoints, commits and
prompts; artifact keys are per configuration; a key pasted into the matrix is refused without being echoed.
"""

from __future__ import annotations

import asyncio
import json
import re
from datetime import datetime, timezone

import pytest
import yaml

from judgebench_flows.core.artifact_keys import configuration_slug
from judgebench_flows.core.config import RunConfig, build_config
from judgebench_flows.core.errors import UserError
from judgebench_flows.data import db
from judgebench_flows.judging.matrix import cell_name, parse_matrix
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._helpers import night_summary, run_events, run_night
from tests.conftest import CANARY_KEY, GPT4O_FILE, VERDICTS, oracle_responder

OTHER_KEY = "sk-other-endpoint-key-7d1c0b9e"


pytestmark = pytest.mark.usefixtures("release_prefect_workers")


def test_config_key_separates_what_changes_the_answer():
    base = RunConfig(model="m", base_url="https://api.example.com/v1")
    assert (
        base.config_key() == RunConfig(model="m", base_url="https://user:secret@API.example.com/v1/").config_key()
    )  # credentials, case
    assert base.config_key() != RunConfig(model="m", base_url="http://127.0.0.1:8000/v1").config_key()
    assert base.config_key("a" * 40) != base.config_key("b" * 40)  # the commit judged
    assert base.config_key("a" * 40, "prompts-1") != base.config_key(
        "a" * 40, "prompts-2"
    )  # prompts/sampling fingerprint
    assert base.config_key() != RunConfig(model="m", base_url="https://api.example.com/v1", max_samples=5).config_key()
    assert (
        base.config_key() != RunConfig(model="m", base_url="https://api.example.com/v1", temperature=0.5).config_key()
    )
    assert "secret" not in json.dumps(RunConfig(model="m", base_url="https://user:secret@h/v1").identity())
    # paths, speed and the key's source do not change the answer
    assert (
        base.config_key()
        == RunConfig(
            model="m", base_url="https://api.example.com/v1", concurrency=3, output_dir="x", api_key_env="K"
        ).config_key()
    )


def test_artifact_keys_per_configuration():
    keys = {
        configuration_slug(judge, model, url, data)
        for judge in ("arena_hard", "vanilla")
        for model in ("gpt-4o-mini", "Qwen/Qwen2.5-7B-Instruct")
        for url in ("https://api.openai.com/v1", "http://gpu-host:8000/v1")
        for data in (GPT4O_FILE, "dataset=judgebench,response_model=claude-3-5-sonnet-20240620.jsonl")
    }
    assert len(keys) == 16 and all(re.fullmatch(r"[a-z0-9-]+", k) and len(k) < 160 for k in keys)
    assert configuration_slug("vanilla", "gpt-4o-mini", "https://u:pw@api.openai.com/v1", GPT4O_FILE).startswith(
        "vanilla-gpt-4o-mini-api-openai-com-judgebench-gpt-4o"
    )
    assert "pw" not in configuration_slug("vanilla", "m", "https://u:pw@h/v1", GPT4O_FILE).split("-")


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ({"model": "m", "api_key": CANARY_KEY}, "never the key itself"),
        ({"model": "m", "api_key_env": CANARY_KEY}, "looks like a key itself"),
        ({"model": "m", "api_key_secret": "sk-proj-abcdefghijklmnopqrstuvwx12"}, "looks like a key itself"),
        ({"model": "m", "api_key_env": "MY KEY"}, "must be an environment variable name"),
        ({"model": "m", "api_key_env": "A", "api_key_secret": "b"}, "not both"),
        ({"model": "m", "endpoint": "http://h/v1"}, "models.0.endpoint: unknown key"),
        ({"model": "m", "base_url": "gpu-host:8000"}, "models.0.base_url: must start with http"),
    ],
)
def test_bad_model_entries_are_refused_without_echoing_keys(model, message):
    with pytest.raises(UserError, match=re.escape(message)) as caught:
        parse_matrix({"judge_types": ["vanilla"], "models": [model], "data_files": [GPT4O_FILE]}, "m.yaml")
    assert (
        str(caught.value).startswith("m.yaml: ")
        and CANARY_KEY not in str(caught.value)
        and "sk-proj" not in str(caught.value)
    )


def test_a_key_given_as_an_option_is_not_echoed():
    with pytest.raises(UserError) as caught:
        build_config(model="m", api_key_env=CANARY_KEY)
    assert CANARY_KEY not in str(caught.value) and "--api-key-env" in str(caught.value)


def test_each_model_has_its_endpoint_and_key_source():
    matrix = parse_matrix(
        {
            "judge_types": ["vanilla"],
            "data_files": [GPT4O_FILE],
            "base_url": "https://api.openai.com/v1",
            "api_key_secret": "openai-key",
            "models": [
                "gpt-4o-mini",
                {"model": "qwen", "base_url": "http://gpu-host:8000/v1", "api_key_env": "VLLM_KEY"},
                {"model": "qwen", "label": "qwen-b", "base_url": "http://gpu-2:8000/v1"},
            ],
        },
        "m.yaml",
    )
    got = {
        e.name: (
            e.config.model,
            e.config.endpoint.base_url,
            e.config.endpoint.api_key_env,
            e.config.endpoint.api_key_secret,
        )
        for e in matrix.entries()
    }
    assert got == {
        cell_name("vanilla", "gpt-4o-mini", GPT4O_FILE): (
            "gpt-4o-mini",
            "https://api.openai.com/v1",
            None,
            "openai-key",
        ),
        cell_name("vanilla", "qwen", GPT4O_FILE): ("qwen", "http://gpu-host:8000/v1", "VLLM_KEY", None),
        cell_name("vanilla", "qwen-b", GPT4O_FILE): ("qwen", "http://gpu-2:8000/v1", None, "openai-key"),
    }
    assert len({e.config.config_key() for e in matrix.entries()}) == 3


def _night_runs(state):
    """The night's flow run and its cells' subflow runs (every attempt), as the Prefect server has them."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    night_id = state.state_details.flow_run_id
    with get_client(sync_client=True) as client:
        night = client.read_flow_run(night_id)
        cells = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[night_id]))
        )
    return night, cells


def _run_events(model: str, since: datetime) -> list[str]:
    """The `judgebench.run.*` events of `model`'s runs since `since`, oldest first, once the last is not
    a retry (the session's server: other tests' runs are older)."""
    events = run_events(
        {"prefix": ["judgebench.run."]},
        since,
        model,
        done=lambda found: bool(found) and found[-1]["event"] != "judgebench.run.retrying",
    )
    return [e["event"] for e in events]


@pytest.mark.slow
def test_a_cell_whose_calls_all_fail_fails_the_night_and_is_never_a_baseline(
    prefect_server, judgebench_repo, gpt4o_pairs, tmp_path, monkeypatch
):
    url, sha = judgebench_repo
    db_url = f"sqlite:///{tmp_path}/history.db"
    monkeypatch.setenv("JUDGE_A_KEY", CANARY_KEY)
    monkeypatch.setenv("JUDGE_B_KEY", OTHER_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong-for-both-endpoints-0")  # each cell must use its own variable
    good, bad = cell_name("vanilla", "judge-a", GPT4O_FILE), cell_name("vanilla", "judge-b", GPT4O_FILE)
    oracle = oracle_responder(gpt4o_pairs, VERDICTS["vanilla"])

    def write_matrix(a_url: str, b_url: str):
        path = tmp_path / "matrix.yaml"
        path.write_text(
            yaml.safe_dump(
                {
                    "judge_types": ["vanilla"],
                    "data_files": [GPT4O_FILE],
                    "repo_url": url,
                    "ref": sha,
                    "db_url": db_url,
                    "output_root": str(tmp_path / "nightly"),
                    "max_samples": 4,
                    "concurrency": 4,
                    "models": [
                        {"model": "judge-a", "base_url": a_url, "api_key_env": "JUDGE_A_KEY"},
                        {"model": "judge-b", "base_url": b_url, "api_key_env": "JUDGE_B_KEY"},
                    ],
                    "options": {
                        "cache_dir": str(tmp_path / "cache"),
                        "bootstrap_resamples": 200,
                        "max_retries": 0,
                        "shard_retries": 0,
                    },
                }
            )
        )
        return path

    # night 1: judge-b's endpoint answers HTTP 500 to every call
    started = datetime.now(timezone.utc)
    with (
        FakeOpenAIServer(oracle, api_key=CANARY_KEY, models={"judge-a"}) as a,
        FakeOpenAIServer(oracle, api_key=OTHER_KEY, models={"judge-b"}, rate_500=1.0) as b,
    ):
        b_port = b.port
        state = run_night(write_matrix(a.base_url, b.base_url))
        a_url = a.base_url
        assert a.snapshot()["distinct_answered"] == 8  # judge-a's key came from JUDGE_A_KEY
    runs = db.list_runs(db.open_database(db_url))
    seen = f"{state!r}; runs: {[(r.model, r.status, r.message) for r in runs]}"
    good_title, bad_title = "vanilla · judge-a · gpt-4o", "vanilla · judge-b · gpt-4o"
    # the night's reason, in its state message: which cell, and why
    assert state.is_failed() and f"{bad_title} (failed: " in state.message and good_title not in state.message, seen
    assert "HTTP 500" in state.message or "500" in state.message, seen
    night_run, cell_runs = _night_runs(state)
    assert re.fullmatch(r"nightly \d{4}-\d{2}-\d{2}", night_run.name), night_run.name
    day = night_run.name.removeprefix("nightly ")
    assert sorted({r.name for r in cell_runs}) == [f"{day} {good_title}", f"{day} {bad_title}"]
    # judge-b's endpoint was down (no call answered): a passing failure, so it was tried once more
    assert sorted((r.model, r.status) for r in runs) == [
        ("judge-a", "completed"),
        ("judge-b", "failed"),
        ("judge-b", "failed"),
    ], seen
    # its first attempt announced a retry, not a failure: one alert, for the attempt that decided
    assert _run_events("judge-b", started) == ["judgebench.run.retrying", "judgebench.run.failed"]
    assert _run_events("judge-a", started) == ["judgebench.run.completed"]
    summary = night_summary(state)
    assert "| failed / invalid | cost |" in summary
    assert f"| {good_title} | completed | 100.00% (" in summary and "| 0 / 0 of 8 |" in summary, summary
    assert re.search(rf"\| {re.escape(bad_title)} \| \*\*FAILED\*\* \|[^\n]*\| 8 / 0 of 8 \|", summary), summary
    assert f"- **{bad_title}** (failed): " in summary, summary  # the reason, whole, below the table
    first_a = next(r.run_id for r in runs if r.model == "judge-a")

    # night 2: the same endpoint (same port) now answers; its failed night must not be its baseline
    with (
        FakeOpenAIServer(
            oracle, api_key=CANARY_KEY, models={"judge-a"}, port=int(a_url.rsplit(":", 1)[1].split("/")[0])
        ) as a2,
        FakeOpenAIServer(oracle, api_key=OTHER_KEY, models={"judge-b"}, port=b_port) as b2,
    ):
        state2 = run_night(write_matrix(a2.base_url, b2.base_url))
    assert state2.is_completed(), f"{state2!r}"
    nightly = tmp_path / "nightly"
    good_results = json.loads((nightly / good / "latest" / "results.json").read_text())
    bad_results = json.loads((nightly / bad / "latest" / "results.json").read_text())
    assert good_results["regression"]["baseline_run_id"] == first_a  # a healthy run is a baseline
    # each night's run of a cell keeps its own folder; `latest` links the newest
    kept = sorted(p.name for p in (nightly / good).iterdir() if p.is_dir() and not p.is_symlink())
    assert first_a in kept and good_results["run"]["run_id"] in kept and len(kept) == 2, kept
    assert (
        bad_results["regression"] is None and bad_results["overall_accuracy"]["accuracy"] == 1.0
    )  # the dead night is not
    for text in (
        (nightly / good / "latest" / "results.json").read_text(),
        (nightly / bad / "latest" / "results.json").read_text(),
        summary,
    ):
        assert CANARY_KEY not in text and OTHER_KEY not in text


@pytest.mark.slow
def test_adhoc_run_shows_results_and_links_on_its_own_page(
    prefect_server, judgebench_repo, gpt4o_pairs, tmp_path, monkeypatch
):
    """The ad-hoc deployment's flow run (not only its judging subflow) carries the results summary, the
    file locations and a link to the subflow, and logs the headline numbers; per-configuration keys."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, LogFilter, LogFilterFlowRunId

    from judgebench_flows.flows.nightly import judgebench_adhoc

    monkeypatch.setenv("ADHOC_KEY", CANARY_KEY)
    url, sha = judgebench_repo
    out = tmp_path / "adhoc"
    with FakeOpenAIServer(
        oracle_responder(gpt4o_pairs, VERDICTS["vanilla"]), api_key=CANARY_KEY, models={"judge-x"}
    ) as server:
        state = asyncio.run(
            judgebench_adhoc(
                model="judge-x",
                judge_type="vanilla",
                repo_url=url,
                ref=sha,
                max_samples=3,
                base_url=server.base_url,
                db_url=f"sqlite:///{tmp_path}/h.db",
                output_dir=str(out),
                api_key_env="ADHOC_KEY",
                return_state=True,
            )
        )
        endpoint = server.base_url
    assert state.is_completed(), f"{state!r}"
    flow_run_id = state.state_details.flow_run_id
    results = json.loads((out / "results.json").read_text())
    with get_client(sync_client=True) as client:  # the run and its judging subflow, named by what they judge
        names = [client.read_flow_run(i).name for i in (flow_run_id, results["run"]["flow_run_id"])]
    assert names == ["vanilla · judge-x · gpt-4o"] * 2, names
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=30)  # logs are sent in the background
    with get_client(sync_client=True) as client:
        own = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
        sub = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[results["run"]["flow_run_id"]]))
        )
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
    [page] = [a for a in own if a.key]  # not the record of the judging subflow's persisted result
    assert page.key.startswith("judgebench-adhoc-vanilla-judge-x-127-0-0-1-"), page.key
    assert (
        "| overall | 100.00%" in page.data
        and str(out / "report.html") in page.data
        and results["run"]["flow_run_id"] in page.data
    )
    assert "**Status: completed**" in page.data
    slug = configuration_slug("vanilla", "judge-x", endpoint, GPT4O_FILE)
    assert {a.key for a in sub} >= {f"judgebench-summary-{slug}", f"judgebench-accuracy-{slug}"}
    messages = "\n".join(log.message for log in logs)
    assert (
        "vanilla · judge-x · gpt-4o: completed, accuracy 100.00%" in messages
        and "failed judgments 0 / 6, invalid judgments 0 / 6" in messages
    ), messages
    assert CANARY_KEY not in messages + page.data
    assert (
        f"flow run 'vanilla · judge-x · gpt-4o' in Prefect's UI: {prefect_server.removesuffix('/api')}/runs/flow-run/{flow_run_id}"
        in messages
    )


def test_key_sources_are_read_by_name(prefect_server, monkeypatch):
    """A named variable or a Prefect Secret block gives the key; a named variable that is missing or a
    block that does not exist is one clear line, not a call made with no key."""
    from prefect.blocks.system import Secret

    from judgebench_flows.core.api_keys import read_api_key
    from judgebench_flows.core.secrets import redact

    Secret(value=OTHER_KEY).save("judge-b-key", overwrite=True)
    assert read_api_key(None, "judge-b-key") == OTHER_KEY and redact(f"x {OTHER_KEY} y") == "x *** y"
    monkeypatch.setenv("JUDGE_A_KEY", CANARY_KEY)
    assert read_api_key("JUDGE_A_KEY", None) == CANARY_KEY
    monkeypatch.delenv("NOT_SET_KEY", raising=False)
    with pytest.raises(UserError, match=r"\$NOT_SET_KEY is not set"):
        read_api_key("NOT_SET_KEY", None)
    with pytest.raises(UserError, match="no Prefect Secret block named 'missing-block'"):
        read_api_key(None, "missing-block")

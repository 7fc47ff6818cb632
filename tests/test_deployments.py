"""Deployments end to end: prefect.yaml and deployments/deploy.py register on a real Prefect API, a real
process worker runs the ad-hoc deployment, and the nightly matrix flow survives a failing configuration.

The worker runs the flow from the repository's own entrypoints (flows/nightly.py, flows/adhoc_flow.py)
against a real OpenAI-compatible server on loopback that answers with the labelled verdict, so the expected
accuracy is exactly 100%.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from judgebench_flows.core.errors import UserError
from judgebench_flows.core.run_names import run_name
from judgebench_flows.data import db
from judgebench_flows.judging.matrix import cell_name, load_matrix, parse_matrix
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests.conftest import CANARY_KEY, GPT4O_FILE, VERDICTS, oracle_responder

ROOT = Path(__file__).resolve().parents[1]
POOL = "judgebench-pool"


pytestmark = pytest.mark.usefixtures("release_prefect_workers")


def _matrix(**overrides) -> dict:
    return {"judge_types": ["arena_hard"], "models": ["judge-a"], "data_files": [GPT4O_FILE], **overrides}


def test_shipped_matrix_is_valid():
    entries = load_matrix(ROOT / "deployments" / "nightly.yaml").entries()
    assert len(entries) == len({e.name for e in entries}) == len({e.config.result_path for e in entries}) >= 2
    assert len({e.config.config_key() for e in entries}) == len(entries)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({**_matrix(), "judges": ["vanilla"]}, "judges: unknown key"),
        ({"judge": ["vanilla"]}, "judge: unknown key"),
        (_matrix(judge_types=["nope"]), "judge_types: unknown judge type 'nope'"),
        (_matrix(judge_types=["arena_hard", "custom"]), "judge_types: 'custom' needs options.judge_template"),
        (_matrix(models=[]), "models: List should have at least 1 item"),
        (_matrix(options={"temprature": 0.5}), "options: unknown run option 'temprature'"),
        (_matrix(options={"model": "x"}), "options: 'model' is set by the matrix itself"),
        (_matrix(options={"concurrency": 4}), "options: 'concurrency' is a top-level setting"),
        (_matrix(options={"temperature": 7}), "options.temperature: Input should be less than or equal to 2"),
        (_matrix(concurrency=0), "concurrency: Input should be greater than or equal to 1"),
        (_matrix(base_url="localhost:8000"), "base_url: must start with http:// or https://"),
        (["arena_hard"], "expected a mapping"),
    ],
)
def test_bad_matrix_names_the_key(data, message):
    with pytest.raises(UserError, match="^m.yaml: " + message.replace("(", r"\(")):
        parse_matrix(data, "m.yaml")


def _read_deployment(name: str):
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_deployment_by_name(name)


def _wait_final(flow_run_id, timeout: float = 120):
    from prefect.client.orchestration import get_client

    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while True:
            run = client.read_flow_run(flow_run_id)
            if run.state and run.state.is_final() or time.monotonic() > deadline:
                return run
            time.sleep(0.5)


@pytest.mark.slow
def _one_night_at_a_time(deployment) -> bool:
    """Runs of the nightly deployment are serialized the Prefect way: a limit of 1, later runs enqueued."""
    options = deployment.concurrency_options
    return (
        deployment.global_concurrency_limit is not None
        and deployment.global_concurrency_limit.limit == 1
        and options is not None
        and options.collision_strategy == "ENQUEUE"
    )


def test_prefect_yaml_deploys_both(prefect_server, tmp_path):
    """`prefect deploy --all` with the project file, then `prefect deployment ls` lists the deployments."""
    from judgebench_flows.deployments.deploy import ensure_work_pool

    ensure_work_pool(POOL)
    env = {**os.environ, "PREFECT_API_URL": prefect_server}
    deployed = subprocess.run(
        [sys.executable, "-m", "prefect", "--no-prompt", "deploy", "--all"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert deployed.returncode == 0, deployed.stdout[-3000:] + deployed.stderr[-3000:]
    listed = subprocess.run(
        [sys.executable, "-m", "prefect", "deployment", "ls"],
        cwd=tmp_path,
        env={**env, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "nightly-benchmarks/nightly" in listed.stdout and "judgebench-adhoc/adhoc" in listed.stdout, listed.stdout
    assert "judgebench-retention/retention" in listed.stdout, listed.stdout

    nightly = _read_deployment("nightly-benchmarks/nightly")
    [schedule] = nightly.schedules
    assert (schedule.schedule.cron, schedule.schedule.timezone, schedule.active) == ("0 2 * * *", "UTC", True)
    assert nightly.entrypoint == "flows/nightly.py:nightly_benchmarks" and nightly.work_pool_name == POOL
    assert nightly.pull_steps == [{"prefect.deployments.steps.set_working_directory": {"directory": str(ROOT)}}]
    assert _one_night_at_a_time(nightly)
    adhoc = _read_deployment("judgebench-adhoc/adhoc")
    assert adhoc.entrypoint == "flows/adhoc_flow.py:judgebench_adhoc" and not adhoc.schedules
    assert adhoc.parameter_openapi_schema["required"] == ["model"]
    retention = _read_deployment("judgebench-retention/retention")
    [daily] = retention.schedules
    assert (daily.schedule.cron, daily.schedule.timezone, retention.parameters) == (
        "30 5 * * *",
        "UTC",
        {"keep_days": 90},
    )
    assert retention.entrypoint == "flows/retention_flow.py:judgebench_retention"


@pytest.mark.slow
def test_adhoc_deployment_runs_on_a_process_worker(prefect_server, judgebench_repo, gpt4o_pairs, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment

    from judgebench_flows.deployments.deploy import deploy_all

    assert len(deploy_all(ROOT, POOL)) == 3  # nightly, adhoc, retention
    nightly = _read_deployment("nightly-benchmarks/nightly")
    [schedule] = nightly.schedules
    assert (schedule.schedule.cron, schedule.schedule.timezone) == ("0 2 * * *", "UTC")
    assert nightly.parameters == {"matrix_path": "deployments/nightly.yaml"} and nightly.work_queue_name == "nightly"
    assert _one_night_at_a_time(nightly)
    adhoc = _read_deployment("judgebench-adhoc/adhoc")
    assert adhoc.entrypoint == "flows/adhoc_flow.py:judgebench_adhoc"
    assert adhoc.pull_steps == [{"prefect.deployments.steps.set_working_directory": {"directory": str(ROOT)}}]

    url, sha = judgebench_repo
    out, db_url = tmp_path / "adhoc", f"sqlite:///{tmp_path}/history.db"
    with FakeOpenAIServer(
        oracle_responder(gpt4o_pairs, VERDICTS["vanilla"]), api_key=CANARY_KEY, models={"judge-x"}
    ) as server:
        flow_run = run_deployment(
            "judgebench-adhoc/adhoc",
            parameters={
                "model": "judge-x",
                "judge_type": "vanilla",
                "repo_url": url,
                "ref": sha,
                "max_samples": 10,
                "base_url": server.base_url,
                "db_url": db_url,
                "output_dir": str(out),
            },
            timeout=0,
        )
        worker = subprocess.run(
            [sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL, "--work-queue", "adhoc", "--run-once"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=240,
            env={
                **os.environ,
                "PREFECT_API_URL": prefect_server,
                "OPENAI_API_KEY": CANARY_KEY,
                "JUDGEBENCH_CACHE_DIR": str(tmp_path / "cache"),
            },
        )
        finished = _wait_final(flow_run.id)
        assert finished.state.is_completed(), f"{finished.state!r}\n{worker.stdout[-4000:]}\n{worker.stderr[-4000:]}"
        assert server.snapshot()["distinct_answered"] == 20  # 10 pairs x 2 orders

    results = json.loads((out / "results.json").read_text())
    assert results["overall_accuracy"]["accuracy"] == 1.0 and results["overall_accuracy"]["total_samples"] == 10
    assert results["dataset"]["commit"] == sha and results["model"] == "judge-x" and results["judge_type"] == "vanilla"
    assert (out / "report.html").is_file()
    [run] = db.list_runs(db.open_database(db_url))
    assert (run.run_id, run.status, run.overall_accuracy, run.commit) == (
        results["run"]["run_id"],
        "completed",
        1.0,
        sha,
    )
    with get_client(sync_client=True) as client:  # the DB row points at the judgebench subflow of this deployment run
        subflow = client.read_flow_run(run.flow_run_id)
        assert client.read_task_run(subflow.parent_task_run_id).flow_run_id == flow_run.id
    assert CANARY_KEY not in json.dumps(finished.parameters) + (out / "results.json").read_text()


@pytest.mark.slow
def test_nightly_runs_every_configuration_and_fails_at_the_end(
    prefect_server, judgebench_repo, gpt4o_pairs, tmp_path, monkeypatch
):
    """One configuration fails (unknown model): the other still runs, the summary lists both, and the flow
    is Failed at once: an endpoint that does not know the model will not learn it on a second attempt."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey

    from judgebench_flows.flows.nightly import NIGHTLY_ARTIFACT_KEY, nightly_benchmarks

    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    url, sha = judgebench_repo
    db_url = f"sqlite:///{tmp_path}/history.db"
    with FakeOpenAIServer(oracle_responder(gpt4o_pairs, VERDICTS["arena_hard"]), models={"judge-a"}) as server:
        matrix = _matrix(
            models=["judge-a", "judge-missing"],
            repo_url=url,
            ref=sha,
            base_url=server.base_url,
            db_url=db_url,
            output_root=str(tmp_path / "nightly"),
            max_samples=6,
            options={"cache_dir": str(tmp_path / "cache"), "bootstrap_resamples": 200},
        )
        path = tmp_path / "matrix.yaml"
        path.write_text(yaml.safe_dump(matrix))
        state = asyncio.run(nightly_benchmarks(str(path), retry_delay_seconds=0, return_state=True))
        answered = server.snapshot()["distinct_answered"]

    good = cell_name("arena_hard", "judge-a", GPT4O_FILE)  # its folder
    runs = db.list_runs(db.open_database(db_url))
    seen = f"{state!r}; runs: {[(r.model, r.status, r.message) for r in runs]}"
    good_title, bad_title = (run_name("arena_hard", m, GPT4O_FILE) for m in ("judge-a", "judge-missing"))
    assert state.is_failed() and f"{bad_title} (failed" in state.message and good_title not in state.message, seen
    assert answered == 12, seen  # judge-a's 6 pairs x 2 orders, asked once
    # no second attempt of anything: an unknown model is not a passing failure
    assert sorted((r.model, r.status) for r in runs) == [("judge-a", "completed"), ("judge-missing", "failed")], seen
    results = json.loads((tmp_path / "nightly" / good / "latest" / "results.json").read_text())
    assert (
        results["overall_accuracy"]["accuracy"] == 1.0
        and (tmp_path / "nightly" / good / "latest" / "report.html").is_file()
    )

    with get_client(sync_client=True) as client:
        assert client.read_flow_run(state.state_details.flow_run_id).run_count == 1
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=[NIGHTLY_ARTIFACT_KEY]),
                flow_run_id=ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id]),
            )
        )
    summary = artifacts[-1].data
    assert (
        f"| {good_title} | completed | 100.00%" in summary
        and f"| {bad_title} | **FAILED** |" in summary
        and "model 'judge-missing'" in summary
    )
    # the embedded leaderboard lists tonight's run in bold (this checkout publishes no outputs/)
    assert "## Leaderboard" in summary and "| **arena_hard** | **judge-a** |" in summary, summary
    assert (tmp_path / "nightly" / "leaderboard.html").is_file()


@pytest.mark.slow
def test_a_failed_adhoc_run_says_why_in_its_state(prefect_server, tmp_path):
    """An ad-hoc deployment run that cannot clone its repository (offline, a wrong URL) ends Failed with the
    one-line reason the CLI prints as its state message: `--watch` and the UI show it, not only the
    worker's tracebacks."""
    from prefect.deployments import run_deployment

    from judgebench_flows.deployments.deploy import deploy_all

    deploy_all(ROOT, POOL)
    missing = tmp_path / "no-such-clone"
    flow_run = run_deployment(
        "judgebench-adhoc/adhoc",
        parameters={
            "model": "judge-x",
            "repo_url": str(missing),
            "base_url": "http://127.0.0.1:9/v1",
            "db_url": f"sqlite:///{tmp_path}/history.db",
            "output_dir": str(tmp_path / "adhoc"),
            "retry_delay_seconds": 0,
        },
        timeout=0,
    )
    worker = subprocess.run(
        [sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL, "--work-queue", "adhoc", "--run-once"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        env={
            **os.environ,
            "PREFECT_API_URL": prefect_server,
            "OPENAI_API_KEY": CANARY_KEY,
            "JUDGEBENCH_CACHE_DIR": str(tmp_path / "cache"),
        },
    )
    finished = _wait_final(flow_run.id)
    seen = f"{finished.state!r}\n{worker.stdout[-3000:]}\n{worker.stderr[-3000:]}"
    assert finished.state.is_failed(), seen
    message = finished.state.message or ""
    assert message == f"error: --repo-url: no repository at local path '{missing}'", seen


@pytest.mark.slow
@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ({"data_files": [GPT4O_FILE, "no-such-file.jsonl"]}, "error: data_files: data file 'no-such-file.jsonl'"),
        ({"ref": "0" * 40}, "error: "),
        (
            {"repo_url": "file:///nowhere/JudgeBench"},
            "error: --repo-url: no repository at 'file:///nowhere/JudgeBench'",
        ),
    ],
)
def test_a_bad_night_fails_before_its_first_cell(
    prefect_server, judgebench_repo, tmp_path, monkeypatch, override, expected
):
    """A wrong data file, ref or repository is found once for the whole night, before any cell runs or any
    call is made: the night is Failed with one line as its state message."""
    from judgebench_flows.flows.nightly import nightly_benchmarks

    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    url, sha = judgebench_repo
    db_url = f"sqlite:///{tmp_path}/history.db"
    with FakeOpenAIServer("My final verdict is [[A>B]]", models={"judge-a", "judge-b"}) as server:
        matrix = _matrix(
            models=["judge-a", "judge-b"],
            repo_url=url,
            ref=sha,
            base_url=server.base_url,
            db_url=db_url,
            output_root=str(tmp_path / "nightly"),
            max_samples=2,
            options={"cache_dir": str(tmp_path / "cache")},
        )
        path = tmp_path / "matrix.yaml"
        path.write_text(yaml.safe_dump({**matrix, **override}))
        state = asyncio.run(nightly_benchmarks(str(path), retry_delay_seconds=0, return_state=True))
        assert server.requests == 0
    assert state.is_failed() and state.message.startswith(expected), f"{state!r}"
    assert "\n" not in state.message and "Traceback" not in state.message
    assert not db.list_runs(db.open_database(db_url)), "a cell ran before the night's inputs were checked"

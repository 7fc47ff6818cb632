"""One real flow run against a temporary Prefect server: 3000 rows in 6 shards, with failing rows.

The judge (fixtures/external/flaky_judge.py) raises on id % 97 == 0, returns 1.5 on id % 101 == 0,
NA on id % 89 == 0 and (id % 10) / 10 otherwise, so every count below is known in advance.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd
import pytest
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    ArtifactFilterKey,
    FlowRunFilter,
    FlowRunFilterId,
)

from judgebench_flows.core.errors import UserError
from judgebench_flows.flows.external_flow import ARTIFACT_KEY, run_external
from judgebench_flows.judges.external.config import external_config_from_options
from judgebench_flows.tasks.external import score_shard

pytestmark = pytest.mark.slow

FLAKY = str(Path(__file__).parent / "fixtures" / "external" / "flaky_judge.py")
ROWS = 3000


def expected_outcome(qid: int) -> tuple[str, float | None, str]:
    if qid % 97 == 0:
        return "error", None, f"RuntimeError: judge cannot handle record {qid}"
    if qid % 101 == 0:
        return "error", None, "InvalidJudgeOutput: score 1.5 is outside [0, 1]"
    if qid % 89 == 0:
        return "na", None, ""
    return "scored", (qid % 10) / 10, ""


@pytest.fixture(scope="module")
def run(prefect_server, tmp_path_factory):
    base = tmp_path_factory.mktemp("external_flow")
    data = base / "data.csv"
    pd.DataFrame(
        {
            "id": range(ROWS),
            "model_input": [f"question {i}" for i in range(ROWS)],
            "response": [f"answer {i}" for i in range(ROWS)],
            "ground_truth": "x",
        }
    ).to_csv(data, index=False)
    config = external_config_from_options(
        None,
        {
            "external_judge_path": FLAKY,
            "external_judge_config": '{"label": "ok"}',
            "data_path": str(data),
            "output_dir": str(base / "out"),
            "result_path": str(base / "result.json"),
            "shard_size": 500,
            "max_workers": 2,
        },
    )
    return config, run_external(config)


def test_counts_and_mean(run):
    _, summary = run
    outcomes = [expected_outcome(qid) for qid in range(ROWS)]
    scores = [score for status, score, _ in outcomes if status == "scored"]
    assert (summary["total"], summary["scored"], summary["na"], summary["errors"]) == (3000, 2907, 33, 60)
    assert summary["mean_score"] == pytest.approx(sum(scores) / len(scores))
    assert summary["distribution"]["value_counts"] == {f"{k / 10}": scores.count(k / 10) for k in range(10)}
    assert [b["count"] for b in summary["distribution"]["bins"]] == [scores.count(k / 10) for k in range(10)]
    assert summary["error_examples"][:3] == [
        {"qid": 0, "error": "RuntimeError: judge cannot handle record 0"},
        {"qid": 97, "error": "RuntimeError: judge cannot handle record 97"},
        {"qid": 101, "error": "InvalidJudgeOutput: score 1.5 is outside [0, 1]"},
    ]


def test_output_rows_in_order_with_verdicts(run):
    config, summary = run
    out = Path(config.output_dir) / "data_scored.csv"
    assert summary["output_files"] == [str(out)]
    scored = pd.read_csv(out, keep_default_na=False, na_values=[""])
    assert list(scored.columns) == [
        "id",
        "model_input",
        "response",
        "ground_truth",
        "evaluation_text",
        "score",
        "status",
        "error",
    ]
    assert scored["id"].tolist() == list(range(ROWS))
    assert scored["response"].tolist() == [f"answer {i}" for i in range(ROWS)]
    for qid, status, score, error in zip(
        scored["id"], scored["status"], scored["score"], scored["error"].fillna(""), strict=False
    ):
        want_status, want_score, want_error = expected_outcome(qid)
        assert (status, error) == (want_status, want_error), qid
        assert (pd.isna(score) and want_score is None) or score == want_score, qid
    assert scored.loc[1, "evaluation_text"] == "ok 1"  # external_judge_config reached the judge


def test_result_json_matches_return(run):
    config, summary = run
    assert json.loads(Path(config.result_path).read_text()) == summary


def _wait_for_task_runs(flow_run_id: str, count: int):
    with get_client(sync_client=True) as client:
        deadline = time.monotonic() + 15
        while True:
            task_runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
            done = [t for t in task_runs if t.state_type is not None and t.state_type.value == "COMPLETED"]
            if len(done) >= count or time.monotonic() > deadline:
                return done
            time.sleep(0.2)


def test_shards_ran_as_tasks_at_most_max_workers_at_once(run):
    config, summary = run
    task_runs = _wait_for_task_runs(summary["flow_run_id"], 6)
    assert sorted(t.name for t in task_runs) == [f"score-shard-{i}" for i in range(6)]
    intervals = [(t.start_time, t.end_time) for t in task_runs]
    most = max(sum(1 for s, e in intervals if s <= start < e) for start, _ in intervals)
    assert most <= config.max_workers


def test_summary_artifact(run):
    _, summary = run
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=[ARTIFACT_KEY]),
                flow_run_id=ArtifactFilterFlowRunId(any_=[summary["flow_run_id"]]),
            )
        )
    assert len(artifacts) == 1  # one summary per run (other tests' runs on the session's server have theirs)
    assert "| 3000 | 2907 | 33 | 60 |" in artifacts[0].data


def test_bad_input_fails_before_any_flow_run(run):
    config, _ = run
    with get_client(sync_client=True) as client:
        before = len(client.read_flow_runs())
    bad = config.model_copy(update={"reference_column": "gold"})
    with pytest.raises(
        UserError, match=r"^Column 'gold' \(reference_column\) not found in .*data\.csv \(columns: id, "
    ):
        run_external(bad)
    with get_client(sync_client=True) as client:
        assert len(client.read_flow_runs()) == before


@flow
def _one_shard(rows, judge_path: str) -> str:
    """Submit one shard and report its task run id, whatever became of it."""
    future = score_shard.submit(rows, judge_path, "evaluate", {"qid_column": "id", "label": "x"})
    future.wait()
    return str(future.task_run_id)


def _final_task_run(task_run_id: str):
    with get_client(sync_client=True) as client:
        deadline = time.monotonic() + 15
        while True:
            task_run = client.read_task_run(task_run_id)
            if (
                task_run.state_type is not None and task_run.state_type.value == "FAILED"
            ) or time.monotonic() > deadline:
                return task_run
            time.sleep(0.2)


def test_task_retries_infrastructure_errors_but_not_user_errors(prefect_server, tmp_path):
    # Not a DataFrame: the task itself breaks, as an infrastructure fault would -> 1 run + 2 retries.
    broken = _final_task_run(_one_shard(None, FLAKY))
    assert (broken.state_type.value, broken.run_count) == ("FAILED", 3)
    # The judge file is gone: a UserError, which no retry can fix -> 1 run.
    missing = _final_task_run(_one_shard(pd.DataFrame({"id": [1]}), str(tmp_path / "gone.py")))
    assert (missing.state_type.value, missing.run_count) == ("FAILED", 1)

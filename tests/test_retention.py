"""Retention (issue 41): judgment rows and call-cache answers older than the kept days are deleted, runs and
metrics kept for good, by `judgebench retention` and by the retention deployment's flow. The sizes and
times on a year of nights are benchmarks/bench_history.py's (docs/performance.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from judgebench_flows.data import db
from judgebench_flows.data.retention import prune

OLD, NEW, STILL_RUNNING, OTHER = "a" * 32, "b" * 32, "c" * 32, "d" * 32


def _seed(tmp_path: Path) -> str:
    """Three runs of one configuration: finished 30 days ago, finished today, and one started 30 days ago
    that is still running, and another configuration's only run, 30 days old; each with two judgments and a
    metric row; answers written 30 days ago and today."""
    url = f"sqlite:///{tmp_path}/results.db"
    engine = db.open_database(url)
    now = db.utcnow()
    for run_id, started, status, config_key in (
        (OLD, now - timedelta(days=30), "completed", "k"),
        (NEW, now, "completed", "k"),
        (STILL_RUNNING, now - timedelta(days=30), "running", "k"),
        (OTHER, now - timedelta(days=30), "completed", "other"),  # its configuration's latest: the next baseline
    ):
        db.save_run(
            engine,
            run_id=run_id,
            config_key=config_key,
            judge_type="vanilla",
            model="m",
            status=status,
            started=started,
            n_pairs=1,
            overall_accuracy=0.5,
            results_json="{}",
        )
        db.save_judgments(
            engine,
            [
                {"run_id": run_id, "pair_id": "p1", "order_index": order, "source": "s", "category": "c"}
                | {"label": "A>B", "status": "ok", "decision_for_pair": "A>B" if order else "B>A"}
                for order in (0, 1)
            ],
        )
        db.save_metrics(
            engine,
            [
                db.MetricRow(
                    run_id=run_id,
                    scope="overall",
                    name="overall",
                    accuracy=0.5,
                    correct_count=1,
                    valid_samples=1,
                    total_samples=1,
                )
            ],
        )
    db.cache_put_many(
        engine,
        [
            {"key": "old", "model": "m", "response": "x", "created": now - timedelta(days=30), "paid_by": OLD},
            {"key": "new", "model": "m", "response": "y", "created": now, "paid_by": NEW},
        ],
    )
    return url


def _left(url: str) -> dict[str, object]:
    engine = db.open_database(url)
    return {
        "runs": sorted(run.run_id for run in db.list_runs(engine)),
        "judged": sorted(run_id for run_id in (OLD, NEW, STILL_RUNNING, OTHER) if db.run_judgments(engine, run_id)),
        "metrics": sorted(run_id for run_id in (OLD, NEW, STILL_RUNNING, OTHER) if db.run_metrics(engine, run_id)),
        "answers": sorted(db.cache_get_many(engine, ["old", "new"])),
    }


def test_retention_deletes_old_judgments_and_answers_and_keeps_runs_and_metrics(tmp_path):
    url = _seed(tmp_path)
    engine = db.open_database(url)
    counted = prune(engine, keep_days=7, dry_run=True)
    assert (counted.runs, counted.judgments, counted.answers) == (1, 2, 1)
    assert _left(url)["judged"] == [OLD, NEW, STILL_RUNNING, OTHER]  # a dry run deletes nothing
    pruned = prune(engine, keep_days=7)
    assert (pruned.runs, pruned.judgments, pruned.answers) == (1, 2, 1)
    assert _left(url) == {
        "runs": sorted([OLD, NEW, STILL_RUNNING, OTHER]),  # kept for good
        # a run still running may be resumed, a configuration's latest run is its next run's baseline
        "judged": [NEW, STILL_RUNNING, OTHER],
        "metrics": sorted([OLD, NEW, STILL_RUNNING, OTHER]),
        "answers": ["new"],
    }
    assert pruned.line().startswith("retention: deleted 2 judgment rows of 1 runs started before ")
    assert prune(engine, keep_days=7).judgments == 0  # nothing more the second time


def _judgebench(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "judgebench_flows.cli.main", *args],
        cwd=cwd,
        env={**os.environ, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_command_prunes_and_a_pruned_run_says_why_it_cannot_be_compared(tmp_path):
    url = _seed(tmp_path)
    done = _judgebench("retention", "--keep-days", "7", "--vacuum", "--db-url", url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "retention: deleted 2 judgment rows of 1 runs" in done.stdout and "database " in done.stdout
    assert _left(url)["judged"] == [NEW, STILL_RUNNING, OTHER]
    history = _judgebench("history", "--db-url", url, "--format", "json", cwd=tmp_path)
    assert OLD in history.stdout  # the run and its accuracy stay
    compared = _judgebench("compare", OLD, NEW, "--db-url", url, cwd=tmp_path)
    assert compared.returncode == 2
    assert f"run {OLD[:8]}: its judgments are no longer kept" in compared.stderr, compared.stderr


@pytest.mark.parametrize(("args", "fragment"), [(["--keep-days", "0"], "--keep-days: "), (["--keep-days", "x"], "")])
def test_a_bad_keep_days_is_one_line_and_exit_2(tmp_path, args, fragment):
    done = _judgebench("retention", *args, "--db-url", f"sqlite:///{tmp_path}/none.db", cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert fragment in done.stderr
    assert not (tmp_path / "none.db").exists()


@pytest.mark.slow
def test_the_retention_flow_prunes_on_a_prefect_server(prefect_server, tmp_path):
    from judgebench_flows.flows.retention_flow import judgebench_retention

    url = _seed(tmp_path)
    result = judgebench_retention(keep_days=7, db_url=url)
    assert (result["runs"], result["judgments"], result["answers"]) == (1, 2, 1)
    assert _left(url)["answers"] == ["new"]

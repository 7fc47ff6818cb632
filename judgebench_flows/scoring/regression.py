"""A run against the latest finished run of its configuration: the regression check the JudgeBench flow
reports (results.json's `regression`, exit 1 on a regression)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Engine

from judgebench_flows.core.config import RunConfig
from judgebench_flows.core.records import FINISHED
from judgebench_flows.data import db
from judgebench_flows.scoring.metrics import Tally, pair_scores
from judgebench_flows.scoring.results import correctness_of, regression_check


def regression_against_baseline(
    engine: Engine, config: RunConfig, config_key: str, run_id: str, tally: Tally
) -> dict[str, Any] | None:
    """This run against the latest finished run of the same configuration (None without one)."""
    previous = [
        r for r in db.list_runs(engine, limit=2, config_key=config_key, statuses=FINISHED) if r.run_id != run_id
    ]
    if not previous or not config.bootstrap_resamples:
        return None
    baseline = pair_scores(db.run_verdicts(engine, previous[0].run_id))
    if not baseline:
        return None
    return regression_check(
        correctness_of(baseline),
        correctness_of(tally.scores),
        baseline_run_id=previous[0].run_id,
        seed=config.seed,
        resamples=config.bootstrap_resamples,
        min_drop=config.regression_min_drop,
    )


__all__ = ["regression_against_baseline"]

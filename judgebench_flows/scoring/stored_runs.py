"""Stored runs scored again from their judgments: what the regression check's baselines and the sequential
test's earlier nights are made of, each run's pairs scored by its benchmark's rule."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.engine import Engine

from judgebench_flows.data import db
from judgebench_flows.scoring.metrics import PairScore, pair_scores
from judgebench_flows.scoring.published import FileVerdict

ScoredRun = tuple[str, dict[str, PairScore]]  # a finished run's id and its pairs scored


def scored_runs(engine: Engine, rows: Sequence[db.RunRow], rule: str = "judgebench") -> list[ScoredRun]:
    """Each of these runs (in their order) with its pairs scored by `rule`, from one read of their
    judgments; a run whose judgments are gone (retention) is left out."""
    verdicts = db.runs_verdicts(engine, [r.run_id for r in rows])
    found = []
    for row in rows:
        scores = pair_scores(
            (
                FileVerdict(pair_id, order, source, category, label, status, decision or "", epoch)
                for pair_id, order, source, category, label, status, decision, epoch in verdicts.get(row.run_id, ())
            ),
            rule,
        )
        if scores:
            found.append((row.run_id, scores))
    return found

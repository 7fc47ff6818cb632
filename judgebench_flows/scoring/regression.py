"""A run against the latest finished run of its configuration: the regression check the JudgeBench flow
reports (results.json's `regression`, exit 1 on a regression)."""

from __future__ import annotations

from sqlalchemy.engine import Engine

from judgebench_flows.core.config import RunConfig
from judgebench_flows.core.records import FINISHED
from judgebench_flows.data import db
from judgebench_flows.scoring.metrics import PairScore, Tally, consistency, pair_scores
from judgebench_flows.scoring.result_types import PositionBiasChange, Regression
from judgebench_flows.scoring.results import correctness_of, regression_check
from judgebench_flows.scoring.stats import exact_binomial_two_sided

POSITION_ALPHA = 0.05  # for the two position-bias tests together (Bonferroni: each at 0.025)


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def position_bias_change(
    baseline: dict[str, PairScore], candidate: dict[str, PairScore], *, baseline_run_id: str
) -> PositionBiasChange:
    """Did the judge's position bias change between two runs of a configuration, beyond noise?

    Two paired exact tests over the pairs both runs judged, each a two-sided sign test (the exact McNemar
    test when outcomes are yes/no): order consistency on the pairs with two valid verdicts in both runs
    (pairs that became inconsistent against pairs that became consistent), and the first-position rate
    by pair (pairs with more verdicts for the response shown first against pairs with fewer). A change
    is reported when either p-value is below 0.05 / 2. The same judgments judged again give no changed
    pair, p = 1: a re-run never reports anything.
    """
    shared = sorted(set(baseline) & set(candidate))
    both = [p for p in shared if all(s[p].orders == 2 and s[p].valid for s in (baseline, candidate))]
    lost = sum(1 for p in both if baseline[p].consistent and not candidate[p].consistent)
    gained = sum(1 for p in both if candidate[p].consistent and not baseline[p].consistent)
    more = sum(1 for p in shared if candidate[p].first_position > baseline[p].first_position)
    fewer = sum(1 for p in shared if candidate[p].first_position < baseline[p].first_position)
    p_consistency = exact_binomial_two_sided(lost, lost + gained)
    p_first = exact_binomial_two_sided(more, more + fewer)
    before = consistency({p: baseline[p] for p in shared})
    after = consistency({p: candidate[p] for p in shared})
    changed = min(p_consistency, p_first) * 2 < POSITION_ALPHA
    figures = (
        f"order consistency {_rate(before.consistency)} -> {_rate(after.consistency)} (p {p_consistency:.2g}), "
        f"first-position rate {_rate(before.first_position_rate)} -> {_rate(after.first_position_rate)} "
        f"(p {p_first:.2g}) against run {baseline_run_id[:8]} over {len(shared)} pairs"
    )
    return PositionBiasChange.model_validate(
        {
            "changed": changed,
            "baseline_run_id": baseline_run_id,
            "n_pairs": len(shared),
            "order_consistency": {"baseline": before.consistency, "candidate": after.consistency},
            "first_position_rate": {"baseline": before.first_position_rate, "candidate": after.first_position_rate},
            "consistency_test": {"p_value": p_consistency, "became_inconsistent": lost, "became_consistent": gained},
            "first_position_test": {"p_value": p_first, "more_first": more, "fewer_first": fewer},
            "alpha": POSITION_ALPHA,
            "message": ("position bias changed: " if changed else "position bias within sampling noise: ") + figures,
        }
    )


def regression_against_baseline(
    engine: Engine, config: RunConfig, config_key: str, run_id: str, tally: Tally
) -> Regression | None:
    """This run against the latest finished run of the same configuration (None without one): accuracy,
    and position bias unless `position_bias_check` is off. `regressed` is True when either changed for the
    worse beyond noise (`accuracy_regressed` says whether accuracy did)."""
    previous = [
        r for r in db.list_runs(engine, limit=2, config_key=config_key, statuses=FINISHED) if r.run_id != run_id
    ]
    if not previous or not config.bootstrap_resamples:
        return None
    baseline = pair_scores(db.run_verdicts(engine, previous[0].run_id))
    if not baseline:
        return None
    check = regression_check(
        correctness_of(baseline),
        correctness_of(tally.scores),
        baseline_run_id=previous[0].run_id,
        seed=config.seed,
        resamples=config.bootstrap_resamples,
        min_drop=config.regression_min_drop,
    )
    check.accuracy_regressed = check.regressed
    if config.position_bias_check:
        bias = position_bias_change(baseline, tally.scores, baseline_run_id=previous[0].run_id)
        check.position_bias = bias
        if bias.changed:  # reported as a regression is: the run's status, exit 1, the event and its alert
            check.regressed = True
            check.message = f"{check.message}; {bias.message}"
    return check


__all__ = ["position_bias_change", "regression_against_baseline"]

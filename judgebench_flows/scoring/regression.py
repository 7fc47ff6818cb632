"""A run against its configuration's recent finished runs: the regression check the JudgeBench flow reports
(results.json's `regression`, exit 1 on a regression), and the judge's noise measured across those runs
when the run has one epoch. The tests themselves are `scoring.alerts`; this module reads the baselines."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.engine import Engine

from judgebench_flows.core.config import RunConfig
from judgebench_flows.core.records import FINISHED
from judgebench_flows.data import db
from judgebench_flows.scoring.alerts import DEFAULT_WITHIN_VARIANCE, AlertPlan, RunAlerts, ShiftTest, run_alerts
from judgebench_flows.scoring.metrics import PairScore, Tally, consistency
from judgebench_flows.scoring.night_watch import sequential_check
from judgebench_flows.scoring.noise import Z95, JudgeNoise, as_epochs, measure_noise
from judgebench_flows.scoring.result_types import PositionBiasChange, Regression, SequentialChange
from judgebench_flows.scoring.stats import DeltaResult
from judgebench_flows.scoring.stored_runs import ScoredRun, scored_runs

Baseline = ScoredRun  # a finished run's id and its pairs scored


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def recent_runs(engine: Engine, config_key: str, run_id: str, limit: int, rule: str = "judgebench") -> list[Baseline]:
    """The configuration's `limit` newest finished runs before this one, newest first, each scored by its
    benchmark's `rule` (a configuration is one benchmark's: its key holds it)."""
    rows = [
        r for r in db.list_runs(engine, limit=limit + 1, config_key=config_key, statuses=FINISHED) if r.run_id != run_id
    ]
    rows = rows[:limit]
    return scored_runs(engine, rows, rule)


def _mean_rate(runs: Sequence[dict[str, PairScore]], shared: list[str], which: str) -> float | None:
    rates = [getattr(consistency({p: run[p] for p in shared}), which) for run in runs]
    known = [r for r in rates if r is not None]
    return round(sum(known) / len(known), 6) if known else None


def _against(runs: int) -> str:
    return "the previous run" if runs == 1 else f"the mean of {runs} recent runs"


def position_bias_change(
    candidate: dict[str, PairScore], baselines: Sequence[Baseline], alerts: RunAlerts, plan: AlertPlan
) -> PositionBiasChange:
    """Whether the judge's position bias got worse than its recent runs' beyond its noise: order
    consistency lower, or the lean to one shown position stronger (`scoring.alerts`). A bias that got
    better is reported as it is, never as a regression."""
    runs = [scores for _, scores in baselines]
    shared = sorted(set(candidate).intersection(*(set(r) for r in runs)))
    cons, first = alerts.consistency, alerts.first_position
    p_cons = cons.p_value if cons else 1.0
    p_first = first.p_value if first else 1.0
    before_c, after_c = _mean_rate(runs, shared, "consistency"), _mean_rate([candidate], shared, "consistency")
    before_f = _mean_rate(runs, shared, "first_position_rate")
    after_f = _mean_rate([candidate], shared, "first_position_rate")
    lost = sum(1 for p in shared if candidate[p].consistency_share < _mean_share(runs, p))
    gained = sum(1 for p in shared if candidate[p].consistency_share > _mean_share(runs, p))
    more = sum(1 for p in shared if _lean_of(candidate[p]) > _mean_lean(runs, p))
    fewer = sum(1 for p in shared if _lean_of(candidate[p]) < _mean_lean(runs, p))
    changed = alerts.position_alerted
    figures = (
        f"order consistency {_rate(before_c)} -> {_rate(after_c)} (p {p_cons:.2g}), "
        f"first-position rate {_rate(before_f)} -> {_rate(after_f)} (p {p_first:.2g}) against "
        f"{_against(len(runs))} over {len(shared)} pairs, each test at {plan.position_alpha:.2g}"
    )
    return PositionBiasChange.model_validate(
        {
            "changed": changed,
            "baseline_run_id": baselines[0][0],
            "n_pairs": len(shared),
            "order_consistency": {"baseline": before_c, "candidate": after_c},
            "first_position_rate": {"baseline": before_f, "candidate": after_f},
            "consistency_test": {"p_value": p_cons, "became_inconsistent": lost, "became_consistent": gained},
            "first_position_test": {"p_value": p_first, "more_first": more, "fewer_first": fewer},
            "alpha": plan.position_alpha,
            "message": ("position bias got worse: " if changed else "position bias not worse beyond noise: ") + figures,
        }
    )


def _mean_share(runs: Sequence[dict[str, PairScore]], pair_id: str) -> float:
    return sum(run[pair_id].consistency_share for run in runs) / len(runs)


def _lean_of(score: PairScore) -> float:
    """The pair's lean to the first shown, per epoch, in the direction it leans."""
    return abs(sum(score.first_lean_by_epoch) / score.epochs)


def _mean_lean(runs: Sequence[dict[str, PairScore]], pair_id: str) -> float:
    return sum(_lean_of(run[pair_id]) for run in runs) / len(runs)


def _accuracy_regression(test: ShiftTest, baselines: Sequence[Baseline], min_drop: float) -> Regression:
    regressed = test.alerted and test.delta < -min_drop
    ci_low, ci_high = test.delta - Z95 * test.se, test.delta + Z95 * test.se
    against = f"{_against(len(baselines))} (newest {baselines[0][0][:8]})"
    seen = (
        f"a drop of {test.detectable * 100:.1f} points is detected 80% of the time"
        if test.detectable <= 1
        else f"too few pairs for any drop to be detected 80% of the time at this rate ({test.n_pairs})"
    )
    if regressed:
        message = (
            f"accuracy dropped by {-test.delta * 100:.1f} points against {against} (95% CI of the change "
            f"{ci_low * 100:+.1f} to {ci_high * 100:+.1f} points over {test.n_pairs} pairs, p {test.p_value:.2g} "
            f"< {test.alpha:.2g}, the judge's noise included): regression"
        )
    else:
        message = (
            f"change {test.delta * 100:+.1f} points against {against} is within the judge's noise "
            f"(p {test.p_value:.2g}, alert below {test.alpha:.2g}); {seen}"
        )
    result = DeltaResult(
        delta=test.delta,
        ci_low=ci_low,
        ci_high=ci_high,
        n_pairs=test.n_pairs,
        p_drop=test.p_value,
        regressed=regressed,
        baseline_accuracy=test.baseline,
        candidate_accuracy=test.candidate,
        confidence=0.95,
        min_drop=min_drop,
    )
    check = Regression.of(result, baseline_run_id=baselines[0][0], message=message)
    check.baseline_run_ids = [run_id for run_id, _ in baselines]
    check.alpha = test.alpha
    check.se = test.se
    check.detectable_drop = round(test.detectable, 6)
    return check


def compare_with_recent(
    candidate: dict[str, PairScore], baselines: Sequence[Baseline], plan: AlertPlan, min_drop: float = 0.0
) -> Regression:
    """The run against its baselines (newest first): accuracy and, with `plan.position_bias`, position bias;
    `regressed` when either got worse beyond the judge's noise (`accuracy_regressed`: accuracy did)."""
    alerts = run_alerts(candidate, [scores for _, scores in baselines], plan)
    check = _accuracy_regression(alerts.accuracy, baselines, min_drop)
    check.accuracy_regressed = check.regressed
    check.false_alarm_rate = plan.false_alarm_rate
    check.cells = plan.cells
    if plan.position_bias:
        bias = position_bias_change(candidate, baselines, alerts, plan)
        check.position_bias = bias
        if bias.changed:  # reported as a regression is: the run's status, exit 1, the event and its alert
            check.regressed = True
            check.message = f"{check.message}; {bias.message}"
    return check


def plan_of(config: RunConfig) -> AlertPlan:
    return AlertPlan(config.alert_false_alarm_rate, config.alert_cells, config.position_bias_check)


def regression_against_baseline(
    engine: Engine,
    config: RunConfig,
    config_key: str,
    run_id: str,
    tally: Tally,
    baselines: Sequence[Baseline] | None = None,
) -> Regression | None:
    """This run against its configuration's recent finished runs (None without one, or without resamples)."""
    if baselines is None:
        baselines = recent_runs(engine, config_key, run_id, config.baseline_runs, tally.rule)
    if not baselines or not config.bootstrap_resamples:
        return None
    return compare_with_recent(tally.scores, baselines, plan_of(config), config.regression_min_drop)


def run_noise(scores: dict[str, PairScore], baselines: Sequence[Baseline], changed: bool = False) -> JudgeNoise | None:
    """The judge's noise: over the run's own epochs when it has several, else across it and its recent
    runs; a run found `changed` (regressed) is left out, its judge is not the baselines' (None with too
    few runs)."""
    own = measure_noise(list(scores.values()))
    if own is not None:
        return own
    runs = [s for _, s in baselines] if changed else [scores, *(s for _, s in baselines)]
    if len(runs) < 2:
        return None
    # the figures describe one run of one epoch (this one's, or a baseline's when this one changed)
    return measure_noise(as_epochs(runs), source="runs", run_epochs=1)


def against_recent_runs(
    engine: Engine, config: RunConfig, config_key: str, run_id: str, tally: Tally
) -> tuple[Regression | None, JudgeNoise | None]:
    """The run's regression check and its judge's noise, from one read of its recent runs."""
    baselines = recent_runs(engine, config_key, run_id, config.baseline_runs, tally.rule)
    regression = regression_against_baseline(engine, config, config_key, run_id, tally, baselines)
    noise = run_noise(tally.scores, baselines, changed=bool(regression and regression.regressed))
    if regression is not None:
        within = noise.within_variance if noise and noise.within_variance else DEFAULT_WITHIN_VARIANCE
        sequential = sequential_check(engine, config_key, run_id, tally.scores, plan_of(config), within, tally.rule)
        with_sequential(regression, sequential)
    return regression, noise


def with_sequential(check: Regression, sequential: SequentialChange | None) -> None:
    """The sequential test's result in the regression check: a change it flags tonight is a regression
    (exit 1, the event and its alert, once); a flag raised earlier is said on every run until a reset."""
    if sequential is None:
        return
    check.sequential = sequential
    if sequential.new:
        check.regressed = True
        check.message = f"{check.message}; sequential test: {sequential.message}"
    elif sequential.flagged:
        check.message = f"{check.message}; sequential test: {sequential.message}"


__all__ = [
    "Baseline",
    "against_recent_runs",
    "compare_with_recent",
    "plan_of",
    "position_bias_change",
    "recent_runs",
    "regression_against_baseline",
    "run_noise",
]

"""Compare two runs from the database: accuracy deltas per slice and the pairs whose verdict changed."""

from __future__ import annotations

from pydantic import BaseModel, ValidationError
from sqlalchemy.engine import Engine

from judgebench_flows.core import benchmarks
from judgebench_flows.core.errors import UserError
from judgebench_flows.core.pricing import run_cost_text
from judgebench_flows.core.records import CATEGORIES, FINISHED, JudgmentRecord
from judgebench_flows.data import db
from judgebench_flows.scoring import metrics, stats
from judgebench_flows.scoring.noise import stored_noise_sd
from judgebench_flows.scoring.provenance import provenance_in, sent_changes, served_changes
from judgebench_flows.scoring.result_types import Comparison, FieldChange, FlippedPair, RunCosts, SliceComparison
from judgebench_flows.scoring.results import correctness_of


def records_of(engine: Engine, run_id: str) -> list[JudgmentRecord]:
    return db.judgment_records(db.run_judgments(engine, run_id))


def _verdicts_by_pair(records: list[JudgmentRecord]) -> dict[str, str]:
    """Each pair's verdicts in order, mapped back to the pair ("?" for none), e.g. "A>B B>A"."""
    verdicts: dict[str, list[str]] = {}
    for r in sorted(records, key=lambda r: r.order):
        verdicts.setdefault(r.pair_id, []).append(r.decision_for_pair or "?")
    return {pair_id: " ".join(v) for pair_id, v in verdicts.items()}


ALPHA = 0.05  # a difference is called when its (Holm-adjusted) exact McNemar p-value is below this


def verdict_in_words(delta: float | None, p_value: float | None, alpha: float = ALPHA) -> str:
    """ "B better", "A better" or "within noise" (or "no pairs"): what a slice's test says, for people."""
    if delta is None or p_value is None:
        return "no pairs"
    if p_value >= alpha or delta == 0:
        return "within noise"
    return "B better" if delta > 0 else "A better"


def paired_slices(
    a: dict[str, float],
    b: dict[str, float],
    scores: dict[str, metrics.PairScore],
    common: list[str],
    *,
    seed: int,
    categories: tuple[str, ...] = CATEGORIES,
) -> list[SliceComparison]:
    """Overall and per-category accuracy of A and B on their common pairs, the difference with its paired
    bootstrap 95% interval and exact McNemar p-value, and the verdict in words. The four category tests
    are Holm-adjusted together (`p_adjusted`): four tests at 5% each would call a noise difference
    "better" one time in six; overall is one test and stays as it is."""
    slices = []
    for name in ["overall", *categories]:
        ids = [p for p in common if name == "overall" or scores[p].category == name]
        row = SliceComparison(name=name, n=len(ids))
        if ids:
            part_a, part_b = {p: a[p] for p in ids}, {p: b[p] for p in ids}
            delta = stats.paired_bootstrap_delta(part_a, part_b, seed=seed)
            row.a, row.b, row.delta = delta.baseline_accuracy, delta.candidate_accuracy, delta.delta
            row.ci_low, row.ci_high = delta.ci_low, delta.ci_high
            row.p_value = row.p_adjusted = stats.mcnemar_exact(part_a, part_b).p_value
        slices.append(row)
    tested = [(row, row.p_value) for row in slices[1:] if row.p_value is not None]
    for (row, _), adjusted in zip(tested, stats.holm_adjusted([p for _, p in tested]), strict=True):
        row.p_adjusted = adjusted
    for row in slices:
        row.verdict = verdict_in_words(row.delta, row.p_adjusted)
    return slices


def _run(engine: Engine, run_id: str) -> db.RunRow:
    run = db.get_run(engine, run_id)
    if run is None:
        raise UserError(f"no run '{run_id}' in the database (see `judgebench history`)")
    return run


class RunProtocol(BaseModel):
    """How a run judged, beyond judge, model and data (from its stored configuration): two runs that
    differ here are compared with a warning."""

    single_game: bool | None = None
    shuffle_responses: bool | None = None
    max_samples: int | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    judge_template: str | None = None
    templates_dir: str | None = None
    seed: int | None = None  # only where it decides which pairs are judged, and which are swapped


def _protocol(run: db.RunRow) -> RunProtocol:
    try:
        config = RunProtocol.model_validate_json(run.config_json or "{}")
    except ValidationError:
        return RunProtocol()
    return config if config.max_samples or config.shuffle_responses else config.model_copy(update={"seed": None})


def comparison_warnings(a: db.RunRow, b: db.RunRow) -> list[str]:
    """Why the two runs may not be comparable: one did not finish, or they differ in judge, model, data
    or protocol. A comparison is still shown (that may be the point), but never silently."""
    warnings = [
        f"run {run.run_id[:8]} is {run.status}, not finished: its numbers cover only the judgments it recorded"
        for run in (a, b)
        if run.status not in FINISHED
    ]
    aspects = {
        "judge": (a.judge_type, b.judge_type),
        "model": (a.model, b.model),
        "data": ((a.repo_url, a.data_file, a.commit), (b.repo_url, b.data_file, b.commit)),
        "protocol": (_protocol(a), _protocol(b)),
    }
    different = [name for name, (left, right) in aspects.items() if left != right]
    if different:
        source = "it" if len(different) == 1 else "any of them"
        warnings.append(f"the runs differ in {', '.join(different)}: a difference in accuracy may come from {source}")
    return warnings


def compare_runs(db_url: str, run_a: str, run_b: str, seed: int = 42) -> Comparison:
    engine = db.open_existing(db_url)  # reading creates nothing
    if engine is None:
        raise UserError(f"no runs in {db.safe_url(db_url)} (see `judgebench history`)")
    a, b = _run(engine, run_a), _run(engine, run_b)
    records_a, records_b = records_of(engine, a.run_id), records_of(engine, b.run_id)
    for run, records in ((a, records_a), (b, records_b)):
        if not records and run.n_pairs and run.status in FINISHED:
            raise UserError(
                f"run {run.run_id[:8]}: its judgments are no longer kept (`judgebench retention` deletes judgment "
                "rows older than its --keep-days); its accuracy stays in `judgebench history` and `judgebench report`"
            )
    # each run scored by its benchmark's rule (two runs of different benchmarks share no pairs)
    rule_a, rule_b = (benchmarks.of_stored_config(run.config_json).rule for run in (a, b))
    scores_a, scores_b = metrics.pair_scores(records_a, rule_a), metrics.pair_scores(records_b, rule_b)
    common = sorted(set(scores_a) & set(scores_b))
    categories = benchmarks.of_stored_config(b.config_json).categories
    slices = paired_slices(
        correctness_of(scores_a), correctness_of(scores_b), scores_a, common, seed=seed, categories=categories
    )
    verdicts_a, verdicts_b = _verdicts_by_pair(records_a), _verdicts_by_pair(records_b)
    labels = {r.pair_id: r.label for r in records_a}
    flipped = [
        FlippedPair(
            pair_id=p,
            source=scores_a[p].source,
            label=labels[p],
            a=verdicts_a[p],
            b=verdicts_b[p],
            now_correct=bool(scores_b[p].correct),
        )
        for p in common
        if scores_a[p].correct != scores_b[p].correct
    ]
    bootstrap = mcnemar = None
    if common:
        result = stats.paired_bootstrap_delta(correctness_of(scores_a), correctness_of(scores_b), seed=seed)
        # One verdict: a regression is a drop the exact test calls too (slices[0].verdict), never a drop
        # beside "within noise" (an interval from a few discordant pairs can lie below zero alone).
        bootstrap = result.model_copy(update={"regressed": result.regressed and slices[0].verdict == "A better"})
        mcnemar = stats.mcnemar_exact(correctness_of(scores_a), correctness_of(scores_b))
    both_valid = [p for p in common if scores_a[p].valid and scores_b[p].valid]
    valid_mcnemar = (
        stats.mcnemar_exact(
            correctness_of({p: scores_a[p] for p in both_valid}), correctness_of({p: scores_b[p] for p in both_valid})
        )
        if both_valid
        else None
    )
    return Comparison(
        invalid_a_only=sum(1 for p in common if not scores_a[p].valid and scores_b[p].valid),
        invalid_b_only=sum(1 for p in common if scores_a[p].valid and not scores_b[p].valid),
        valid_pairs=len(both_valid),
        valid_mcnemar=valid_mcnemar,
        run_a=a.run_id,
        run_b=b.run_id,
        slices=slices,
        flipped=flipped,
        bootstrap=bootstrap,
        mcnemar=mcnemar,
        alpha=ALPHA,
        warnings=comparison_warnings(a, b),
        cost=RunCosts(a=run_cost_text(a.cost_usd, a.priced_as), b=run_cost_text(b.cost_usd, b.priced_as)),
        noise_a=stored_noise_sd(a.results_json),
        noise_b=stored_noise_sd(b.results_json),
        **provenance_changes(a, b),
    )


def provenance_changes(a: db.RunRow, b: db.RunRow) -> dict[str, list[FieldChange]]:
    """What the endpoint said differently in B than in A, and which fields sent differ (runs from
    before provenance was recorded: none)."""
    before, after = provenance_in(a.results_json), provenance_in(b.results_json)
    if before is None or after is None:
        return {}
    return {
        "served_changes": served_changes(before.served, after.served),
        "sent_changes": sent_changes(before.sent, after.sent),
    }

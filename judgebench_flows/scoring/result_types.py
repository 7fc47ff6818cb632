"""What a run measured, as typed models: the sections of results.json and what the views read of them.

results.json is a documented contract (README, docs/operations-runs.md) that users' scripts, the report,
the leaderboard and the regression check read, including files written by earlier versions. So every
section here:
- keeps keys it does not know (a newer or older version's) and writes them back after the known ones;
- reads a key an older file lacks as its default (a slice's counts as 0, a rate as None);
- writes the keys in the order results.json has always had them; a key that appears only in some runs
  (listed in the model's `_optional`) is left out while None, never written as null.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_serializer

from judgebench_flows.scoring.stats import DeltaResult, McNemarResult


class Section(BaseModel):
    """A part of results.json: unknown keys kept; `_optional` keys left out while None (or, with
    `_given_only`, every field left out that was never given: a document whose rows differ in keys)."""

    model_config = ConfigDict(extra="allow")
    _optional: ClassVar[frozenset[str]] = frozenset()
    _given_only: ClassVar[bool] = False

    @model_serializer(mode="wrap")
    def _without_unset_optionals(self, handler: Any) -> dict[str, Any]:
        written = handler(self).items()
        if self._given_only:
            given = self.model_fields_set | set(self.model_extra or {})
            return {k: v for k, v in written if k in given}
        return {k: v for k, v in written if not (k in self._optional and v is None)}

    def given(self, name: str) -> bool:
        """Whether the file (or the code that made this) gave `name`: a default is not a measurement."""
        return name in self.model_fields_set or name in (self.model_extra or {})


class SliceAccuracy(Section):
    """One slice's accuracy (correct_count / total_samples, JudgeBench's denominator; None for a slice
    with no pairs) with its seeded 95% bootstrap interval (None without resamples)."""

    _optional = frozenset({"epochs"})

    accuracy: float | None = None
    correct_count: int = 0
    valid_samples: int = 0
    total_samples: int = 0
    ci_low: float | None = None
    ci_high: float | None = None
    # With --epochs K > 1: each pair counts K times (accuracy = correct_count / (total_samples * K)).
    epochs: int | None = None


class Consistency(Section):
    """Position bias: pairs whose two verdicts agree, and the share of sided verdicts for the response
    shown first (see `metrics.consistency`)."""

    consistency: float | None = None
    consistent_pairs: int = 0
    pairs_with_both_verdicts: int = 0
    first_position_rate: float | None = None
    first_position_verdicts: int = 0
    sided_verdicts: int = 0


class Invalid(Section):
    """Judgments without a usable verdict, and why (reason -> count, most frequent first)."""

    invalid_judgments: int = 0
    failed_judgments: int = 0
    pairs_with_invalid: int = 0
    skipped_rows: int = 0
    reasons: dict[str, int] = {}


class Prices(Section):
    """The price entry a run's cost was computed with."""

    model: str | None = None
    batch: bool = False
    read_on: str | None = None


class Usage(Section):
    """Calls and tokens from the judgments' records. The run adds what its clients sent (`attempts`,
    `errors`), its cost (`cost_usd`: None when unpriced; absent in runs from before costs) and `prices`:
    in the order it adds them, so they are read as the section's further keys."""

    judgments: int = 0
    calls: int = 0
    cached_calls: int = 0
    paid_calls: int | None = None
    failed_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0

    def extra(self, name: str) -> object:
        """A key the run added (None when absent)."""
        return (self.model_extra or {}).get(name)

    @property
    def priced(self) -> bool:
        """Whether the run recorded a cost at all (None for an unpriced model is a record)."""
        return self.given("cost_usd")

    @property
    def dollars(self) -> float | None:
        """`cost_usd` as a number (None: unpriced or not recorded)."""
        value = self.extra("cost_usd")
        return float(value) if isinstance(value, (int, float)) else None

    @property
    def price(self) -> Prices:
        return Prices.model_validate(self.extra("prices") or {})


class RateChange(Section):
    baseline: float | None = None
    candidate: float | None = None


class ConsistencyTest(Section):
    p_value: float
    became_inconsistent: int
    became_consistent: int


class FirstPositionTest(Section):
    p_value: float
    more_first: int
    fewer_first: int


class PositionBiasChange(Section):
    """Whether the judge's position bias changed against the baseline run beyond noise
    (`regression.position_bias_change`)."""

    changed: bool
    baseline_run_id: str
    n_pairs: int
    order_consistency: RateChange
    first_position_rate: RateChange
    consistency_test: ConsistencyTest
    first_position_test: FirstPositionTest
    alpha: float
    message: str


class SequentialChange(Section):
    """The sequential test of the configuration's nights against its frozen reference (`scoring.sequential`,
    docs/alerts.md): flagged or not, and when flagged since which run, by how much (95% interval, the
    judge's noise and the reference's error in it) and on which categories. A flag stays until the
    reference is reset (`judgebench alerts reset`, a drift in the served build, a new judge)."""

    _optional = frozenset({"since_run_id", "flagged_run_id", "delta", "ci_low", "ci_high", "nights_to_detect"})

    flagged: bool = False
    new: bool = False  # flagged by this run
    statistic: float = 0.0
    threshold: float | None = None
    alpha: float = 0.0  # its expected alarms per night of an unchanged judge
    nights: int = 0  # nights read since the reference's boundary, this one included
    since_run_id: str | None = None
    flagged_run_id: str | None = None
    delta: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    categories: dict[str, float] = {}  # each category's change over the suspected nights
    worse_categories: list[str] = []  # those whose 95% interval is below 0, worst first
    detect_points: float = 5.0
    nights_to_detect: int | None = None  # nights a persistent drop of detect_points takes to be caught 90%
    message: str = ""


class Regression(Section):
    """This run against its configuration's recent finished runs (`scoring.alerts`): the change, its 95%
    interval and one-sided p-value (`p_drop`) with the judge's noise in them, the baselines, the verdict in
    words, what the test could see (`detectable_drop`: detected 80% of the time at `alpha`, which is the
    night's `false_alarm_rate` split over its `cells`) and, when checked, the position bias."""

    _optional = frozenset(
        {
            "accuracy_regressed",
            "position_bias",
            "baseline_run_ids",
            "alpha",
            "se",
            "detectable_drop",
            "false_alarm_rate",
            "cells",
            "sequential",
        }
    )

    delta: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    n_pairs: int = 0
    p_drop: float | None = None
    regressed: bool = False
    baseline_accuracy: float | None = None
    candidate_accuracy: float | None = None
    confidence: float | None = None
    min_drop: float | None = None
    baseline_run_id: str | None = None
    message: str = ""
    accuracy_regressed: bool | None = None
    position_bias: PositionBiasChange | None = None
    baseline_run_ids: list[str] | None = None
    alpha: float | None = None
    se: float | None = None
    detectable_drop: float | None = None
    false_alarm_rate: float | None = None
    cells: int | None = None
    sequential: SequentialChange | None = None

    @classmethod
    def of(cls, result: DeltaResult, *, baseline_run_id: str, message: str) -> Regression:
        return cls(**result.model_dump(), baseline_run_id=baseline_run_id, message=message)


class Served(Section):
    """What the endpoint said about the model that answered the run's paid calls (a cached answer says
    nothing): each value with the answers that named it, and its `/models` entry (vLLM: `root`, the
    checkpoint served, `max_model_len`, `created`). Only where the run's own process sent the calls."""

    _optional = frozenset({"model_entry"})

    answers: int = 0
    models: dict[str, int] = {}
    system_fingerprints: dict[str, int] = {}
    model_entry: dict[str, JsonValue] | None = None


class Sent(Section):
    """What the run sent: this package's version, the judge prompt's template hash, the sampling
    parameters as the model's request rule shaped them, the provider and the endpoint (no credentials)."""

    package_version: str = ""
    provider: str = ""
    endpoint: str = ""
    model: str = ""
    template_hash: str = ""
    sampling: dict[str, JsonValue] = {}


class Provenance(Section):
    """results.json's `provenance`: what was sent and what the endpoint said it answered with."""

    _optional = frozenset({"served"})

    sent: Sent = Field(default_factory=Sent)
    served: Served | None = None


class FieldChange(BaseModel):
    """One field of `provenance` that differs between two runs, as text."""

    field: str
    before: str
    after: str

    def text(self) -> str:
        return f"{self.field} {self.before} -> {self.after}"


class Drift(Section):
    """This run's `provenance` against its baseline run's (`scoring.provenance.drift_between`): what the
    endpoint said differently (`served`: the model changed behind the name) and what was sent differently."""

    baseline_run_id: str | None = None
    changed: bool = False
    served: list[FieldChange] = []
    sent: list[FieldChange] = []
    message: str = ""


class JudgeNoise(Section):
    """results.json's `noise`: the judge's own noise, measured over `epochs` samples of each pair."""

    source: Literal["epochs", "runs"] = "epochs"
    epochs: int = 1
    pairs: int = 0
    self_agreement: float | None = None
    varying_pairs: float | None = None
    within_variance: float = 0.0
    between_variance: float = 0.0
    noise_share: float | None = None
    clustered_se: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    run_to_run_sd: float = 0.0
    message: str = ""


class Measured(BaseModel):
    """The metric over a run's (or a file's) verdicts: what results.json and the leaderboard share."""

    overall_accuracy: SliceAccuracy
    category_accuracy: dict[str, SliceAccuracy]
    source_accuracy: dict[str, SliceAccuracy]
    consistency: Consistency
    invalid: Invalid
    usage: Usage
    epochs: int = 1
    # With several epochs: each epoch's official accuracy (their mean is `overall_accuracy`).
    epoch_accuracy: list[float] | None = None
    noise: JudgeNoise | None = None


class Scored(BaseModel):
    """A file's or a stored run's verdicts scored as results.json scores a run (`published.score_verdicts`)."""

    pairs: int
    overall_accuracy: SliceAccuracy
    category_accuracy: dict[str, SliceAccuracy]
    consistency: Consistency
    invalid_judgments: int
    failed_judgments: int


class SliceComparison(BaseModel):
    """One slice of two runs on their common pairs: accuracies, the paired bootstrap's difference and
    interval, the exact McNemar p-value (Holm-adjusted over the categories) and the verdict in words."""

    name: str
    a: float | None = None
    b: float | None = None
    delta: float | None = None
    n: int
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None
    p_adjusted: float | None = None
    verdict: str = ""


class FlippedPair(BaseModel):
    """A pair one run judged correctly and the other did not, with each run's verdicts."""

    pair_id: str
    source: str
    label: str
    a: str
    b: str
    now_correct: bool


class RunCosts(BaseModel):
    a: str
    b: str


class Comparison(BaseModel):
    """`judgebench compare`: two runs, slice by slice, and the pairs whose verdict changed."""

    run_a: str
    run_b: str
    slices: list[SliceComparison]
    flipped: list[FlippedPair]
    bootstrap: DeltaResult | None
    mcnemar: McNemarResult | None
    alpha: float
    warnings: list[str]
    cost: RunCosts
    # What the endpoint said differently in B than in A, and which sent fields differ (`provenance`).
    served_changes: list[FieldChange] = []
    sent_changes: list[FieldChange] = []
    # Pairs whose verdicts were all invalid (or failed) in one run only: counted as wrong in the figures
    # above, and tested apart: `valid_mcnemar` is the exact test on the pairs both runs judged validly.
    invalid_a_only: int = 0
    invalid_b_only: int = 0
    valid_pairs: int = 0
    valid_mcnemar: McNemarResult | None = None
    # Each run's judge noise, run to run (`noise.run_to_run_sd`; None: not measured): a difference within
    # a couple of these is what the same judge would show twice.
    noise_a: float | None = None
    noise_b: float | None = None


__all__ = [
    "Scored",
    "Comparison",
    "FlippedPair",
    "SliceComparison",
    "Consistency",
    "Drift",
    "FieldChange",
    "Invalid",
    "JudgeNoise",
    "Measured",
    "PositionBiasChange",
    "Prices",
    "Provenance",
    "Regression",
    "SequentialChange",
    "Section",
    "Sent",
    "Served",
    "SliceAccuracy",
    "Usage",
]

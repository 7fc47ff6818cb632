"""results.json as a typed model: what a finished run reports, in the documented JSON shape.

The shape is a contract (README, the CLI's exit codes, the nightly summary and users' scripts read it), so
`as_json()` gives exactly the keys results.json always had, in the same order: keys that appear only in
some runs (`run.requests` with an endpoint, `run.status`/`run.failure` for a run that measured too little,
`run.timings.publish_s` and `outputs` once published) are left out while unset, never written as null.
The accuracy sections stay as `build_results` makes them (accuracy figures with their intervals).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, model_serializer

from judgebench_flows.scoring import metrics
from judgebench_flows.scoring.results import build_results

_OPTIONAL = frozenset({"requests", "status", "failure", "publish_s", "outputs"})


class _Shaped(BaseModel):
    @model_serializer(mode="wrap")
    def _without_unset_optionals(self, handler: Any) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if not (k in _OPTIONAL and v is None)}


class SkippedRow(BaseModel):
    line: int
    reason: str


class DatasetInfo(BaseModel):
    repo_url: str | None
    commit: str | None
    data_file: str
    n_pairs: int
    skipped_rows: int
    skipped: list[SkippedRow]


class Timings(_Shaped):
    fetch_s: float
    load_s: float
    judge_s: float
    judge_cpu_ms_per_judgment: float
    publish_s: float | None = None


class RunInfo(_Shaped):
    run_id: str
    config_key: str
    started: str
    finished: str
    duration_s: float
    flow_run_id: str
    mode: Literal["single-game", "both-orders"]
    shuffle_responses: bool
    seed: int
    requests: dict[str, Any] | None = None  # the request rule applied and what it adjusted (endpoint runs)
    status: Literal["failed"] | None = None  # only when the run measured too little
    failure: str | None = None
    timings: Timings


class RunHeader(BaseModel):
    """What was judged: known before the first call, so the run is recorded under it from its start."""

    model: str
    judge_type: str
    dataset: DatasetInfo


class RunResults(RunHeader, _Shaped):
    overall_accuracy: dict[str, Any]
    category_accuracy: dict[str, dict[str, Any]]
    source_accuracy: dict[str, dict[str, Any]]
    consistency: dict[str, Any]
    invalid: dict[str, Any]
    usage: dict[str, Any]
    regression: dict[str, Any] | None = None
    run: RunInfo
    outputs: dict[str, str] | None = None

    @classmethod
    def aggregate(
        cls,
        tally: metrics.Tally,
        header: RunHeader,
        run: RunInfo,
        *,
        seed: int,
        bootstrap_resamples: int,
        regression: dict[str, Any] | None,
        usage: dict[str, Any],
    ) -> RunResults:
        """The metric over the run's tally (overall, per category and source, with intervals), then the
        regression check and the run's own record."""
        sections = build_results(
            tally,
            header=header.model_dump(),
            seed=seed,
            bootstrap_resamples=bootstrap_resamples,
            skipped_rows=header.dataset.skipped_rows,
        )
        sections["usage"].update(usage)
        return cls.model_validate({**sections, "regression": regression, "run": run})

    @property
    def regressed(self) -> bool:
        return bool(self.regression and self.regression.get("regressed"))

    def as_json(self) -> dict[str, Any]:
        """results.json's content (plain JSON types)."""
        return self.model_dump(mode="json")

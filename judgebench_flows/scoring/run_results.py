"""results.json as a typed model: what a finished run reports, in the documented JSON shape.

The shape is a contract (README, the CLI's exit codes, the nightly summary and users' scripts read it), so
`as_json()` gives exactly the keys results.json always had, in the same order: keys that appear only in
some runs (`run.requests` with an endpoint, `run.status`/`run.failure` for a run that measured too little,
`run.timings.publish_s` and `outputs` once published) are left out while unset, never written as null.
`read` takes a results.json written by any version: keys it lacks get their defaults, keys this version
does not know are kept (the sections are `result_types.Section`s).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError
from typing_extensions import TypedDict

from judgebench_flows.core import benchmarks
from judgebench_flows.core.errors import UserError
from judgebench_flows.data.outputs import published_files, read_results
from judgebench_flows.scoring import metrics
from judgebench_flows.scoring.official import official_statistics
from judgebench_flows.scoring.result_types import (
    Consistency,
    Drift,
    Invalid,
    JudgeNoise,
    Provenance,
    Regression,
    Section,
    SliceAccuracy,
    Usage,
)
from judgebench_flows.scoring.results import build_results


class SkippedRow(BaseModel):
    line: int
    reason: str


class DatasetInfo(Section):
    repo_url: str | None = None
    commit: str | None = None
    data_file: str | None = None
    n_pairs: int | None = None
    skipped_rows: int = 0
    skipped: list[SkippedRow] = []


class Timings(Section):
    _optional = frozenset({"publish_s"})

    fetch_s: float | None = None
    load_s: float | None = None
    judge_s: float | None = None
    judge_cpu_ms_per_judgment: float | None = None
    publish_s: float | None = None


class RequestAdjustment(Section):
    """A request parameter the endpoint refused and how the run adjusted it (`calls.request_rules`)."""

    param: str = ""
    action: str = ""
    endpoint_said: str = ""


class RequestReport(Section):
    """The request rule a run applied (`RequestRule.describe()`'s keys), then `adjustments`: what it
    adjusted (endpoint runs). Kept as the run gave them, in that order."""

    def adjustments(self) -> list[RequestAdjustment]:
        given = (self.model_extra or {}).get("adjustments") or []
        return [RequestAdjustment.model_validate(change) for change in given]


class CacheSource(Section):
    """The run that paid answers this run read from the call cache ("" when no run is recorded), when it
    started, and whether it is this run's own flow run (a retry or reschedule of it)."""

    run_id: str = ""
    started: str | None = None
    answers: int = 0
    same_flow_run: bool = False


class CacheUse(Section):
    """Where a run's answers came from: how many the call cache gave, from which runs and when, and what
    the run was allowed to reuse (`reuse`: "this flow run" for a night or deployment run, else "any run";
    `max_age` as given). `sources`: on Dask as the workers' shards brought them back."""

    _optional = frozenset({"flow_run_id", "max_age"})

    reuse: str = "any run"
    flow_run_id: str | None = None
    max_age: str | None = None
    answers: int = 0
    calls: int = 0
    sources: list[CacheSource] = []

    def line(self) -> str:
        """The run's answers in one line: how many from a cache, from which run and date."""
        limit = f"reuse: {self.reuse}" + (f", at most {self.max_age} old" if self.max_age else "")
        if not self.answers:
            return f"answers: all {self.calls} paid now, none from the call cache ({limit})"
        named = ", ".join(
            f"{s.answers} from {'this flow run, run' if s.same_flow_run else 'run'} {s.run_id[:8] or '(unrecorded)'}"
            + (f" of {s.started[:10]}" if s.started else "")
            for s in self.sources
        )
        if self.answers >= self.calls and self.sources and not any(s.same_flow_run for s in self.sources):
            return f"answers: all {self.calls} from the call cache, none measured now: {named} ({limit})"
        return f"answers: {self.answers} of {self.calls} from the call cache: {named or 'sources not known'} ({limit})"


class RunInfo(Section):
    _optional = frozenset({"requests", "status", "failure", "cache"})

    run_id: str | None = None
    config_key: str | None = None
    started: str | None = None
    finished: str | None = None
    duration_s: float | None = None
    flow_run_id: str | None = None
    mode: Literal["single-game", "both-orders"] | None = None
    shuffle_responses: bool = False
    seed: int | None = None
    requests: RequestReport | None = None
    cache: CacheUse | None = None
    status: Literal["failed"] | None = None  # only when the run measured too little
    failure: str | None = None
    timings: Timings = Field(default_factory=Timings)


class RunHeader(Section):
    """What was judged: known before the first call, so the run is recorded under it from its start."""

    model: str = ""
    judge_type: str = ""
    dataset: DatasetInfo = Field(default_factory=DatasetInfo)


class RunResults(RunHeader):
    """A run's results: results.json as a typed model, what the command prints, the report shows and
    `evaluate` returns (as its subclass `Evaluation`). Built once from the run's tally (`aggregate`); fields
    written only when they apply (`_optional`) are left out of the file when empty.

    Attributes:
        benchmark: The benchmark judged, when not JudgeBench (`llmbar`); scoring: its rule in a sentence.
        official: That benchmark's own statistics as its code writes them (LLMBar's statistics.json).
        overall_accuracy: Accuracy over every pair (the benchmark's official rule) with its 95% interval.
        category_accuracy: Per category; source_accuracy: per source of the pairs.
        consistency: How often the two orders of a pair agreed (position bias).
        invalid: Judgments whose answer did not parse (never counted as a verdict).
        usage: Calls, cached calls, paid calls, tokens and cost.
        regression: Against the baseline run, when there is one.

    Examples:
        >>> from pathlib import Path
        >>> results = RunResults.model_validate_json(Path("results/latest/results.json").read_text())  # doctest: +SKIP
        >>> results.overall_accuracy.accuracy, results.usage.paid_calls  # doctest: +SKIP
        (0.65, 40)
    """

    _optional = frozenset(
        {"outputs", "provenance", "drift", "epochs", "epoch_accuracy", "noise", "benchmark", "scoring", "official"}
    )

    # Another benchmark than JudgeBench (whose runs have none of these three): its name, how it scores a
    # run, and its own statistics as its code writes them (LLMBar's statistics.json: `scoring.official`).
    benchmark: str | None = None
    scoring: str | None = None
    official: dict[str, str | float] | None = None
    overall_accuracy: SliceAccuracy = Field(default_factory=SliceAccuracy)
    category_accuracy: dict[str, SliceAccuracy] = {}
    source_accuracy: dict[str, SliceAccuracy] = {}
    consistency: Consistency | None = None
    # --epochs: how many times each pair was judged in each order, written when more than one (a file
    # without it is one epoch: `epoch_count`); with several, each epoch's accuracy.
    epochs: int | None = None
    epoch_accuracy: list[float] | None = None
    # The judge's own noise (`scoring.noise`): over its epochs, or across its recent runs with one epoch.
    noise: JudgeNoise | None = None
    invalid: Invalid = Field(default_factory=Invalid)
    usage: Usage | None = None
    regression: Regression | None = None
    run: RunInfo = Field(default_factory=RunInfo)
    # What was sent and what the endpoint said it answered with, and what of it changed against the
    # baseline run (runs from before them have neither).
    provenance: Provenance | None = None
    drift: Drift | None = None
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
        regression: Regression | None,
        usage: Usage,
        noise: JudgeNoise | None = None,
    ) -> RunResults:
        """The metric over the run's tally (overall, per category and source, with intervals), then the
        regression check and the run's own record."""
        measured = build_results(
            tally, seed=seed, bootstrap_resamples=bootstrap_resamples, skipped_rows=header.dataset.skipped_rows
        )
        totals = measured.usage.model_dump() | usage.model_dump(exclude_unset=True)
        if measured.noise is None:  # one epoch: what its recent runs tell, when the caller measured it
            measured.noise = noise
        return cls(
            **header.model_dump(),
            **measured.model_dump(exclude={"usage", "epochs"}),
            epochs=measured.epochs if measured.epochs > 1 else None,
            usage=Usage.model_validate(totals),
            **official_of(tally),
            regression=regression,
            run=run,
        )

    @classmethod
    def read(cls, text: str | bytes) -> RunResults:
        """A results.json's text, as written by this version or an earlier one; text that is not one is
        bad input (one line: where and what)."""
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"]) or "the document"
            raise UserError(f"not a readable results.json: {where}: {error['msg']}") from None

    @classmethod
    def checked(cls, document: object) -> RunResults | None:
        """results.json's content as read or handed on (a file's JSON, a subflow's return value, what
        `RunFailed` carries), validated; None when it is not one (the caller treats it as no results)."""
        if document is None or isinstance(document, RunResults):
            return document
        try:
            return cls.model_validate(document)
        except ValidationError:
            return None

    @property
    def epoch_count(self) -> int:
        """How many times each pair was judged in each order (1 for a file without `epochs`)."""
        return self.epochs or 1

    @property
    def regressed(self) -> bool:
        return bool(self.regression and self.regression.regressed)

    def as_json(self) -> dict[str, Any]:
        """results.json's content (plain JSON types)."""
        return self.model_dump(mode="json")


def published_results(result_path: str) -> Iterator[RunResults]:
    """The results the runs of a per-run layout published, finished or failed, newest first
    (`outputs.published_files`), each checked once, here: a file that is missing, not JSON or not a
    results.json (a `run` that is not an object, say) is skipped, as if that folder had published nothing.
    Which run wrote one is its `run.flow_run_id`."""
    for path in published_files(result_path):
        found = RunResults.checked(read_results(path))
        if found is not None:
            yield found


def results_of_flow_run(result_path: str, flow_run_id: str | None) -> RunResults | None:
    """The results.json the flow run `flow_run_id` published (in its own folder, finished or failed)."""
    if not flow_run_id:
        return None
    return next((r for r in published_results(result_path) if r.run.flow_run_id == flow_run_id), None)


def official_of(tally: metrics.Tally) -> OfficialFields:
    """results.json's `benchmark`, `scoring` and `official` for a run of another benchmark than JudgeBench
    (none for JudgeBench, whose results.json is what it always was)."""
    chosen = next((b for b in benchmarks.BENCHMARKS.values() if b.rule == tally.rule), None)
    if chosen is None or chosen.name == benchmarks.DEFAULT:
        return {}
    return {
        "benchmark": chosen.name,
        "scoring": chosen.scoring,
        "official": official_statistics(tally.rule, tally.scores),
    }


class OfficialFields(TypedDict, total=False):
    benchmark: str
    scoring: str
    official: dict[str, str | float] | None

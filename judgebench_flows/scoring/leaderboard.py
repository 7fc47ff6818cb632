"""The leaderboard: JudgeBench's published judges and this project's runs, scored alike, in one table.

Published entries come from the checkout's `outputs/` files (see `published`); ours are the latest
finished run of each configuration in the results database. Both are scored by the same metric and the
same seeded bootstrap from their recorded verdicts, so a row's position reflects the judge, not how its
number was computed. Nothing here needs an API key, an endpoint or Prefect: it is the first command a
new user can run and see real numbers.

The database is only read. A SQLite file that does not exist means "no runs yet", and it is not created;
an existing one is opened read-only, so the leaderboard never upgrades or locks a database that a
nightly run may be writing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, PrivateAttr, field_validator, model_validator

from judgebench_flows.core import benchmarks
from judgebench_flows.core.benchmarks import Benchmark
from judgebench_flows.core.config import DEFAULT_DB_URL
from judgebench_flows.core.config_defaults import DEFAULT_REF, DEFAULT_REPO_URL
from judgebench_flows.core.errors import UserError
from judgebench_flows.core.pricing import format_usd, retirement_of
from judgebench_flows.core.records import CATEGORIES
from judgebench_flows.scoring import metrics
from judgebench_flows.scoring.leaderboard_llmbar import JudgeAverages
from judgebench_flows.scoring.published import (
    FileVerdict,
    data_file_parts,
    missing_from_checkout,
    outputs_files,
    read_outputs_file,
    score_verdicts,
    unread_note,
    why_unreadable,
)
from judgebench_flows.scoring.result_types import Consistency, Section, SliceAccuracy
from judgebench_flows.scoring.run_results import RunResults
from judgebench_flows.scoring.stats import McNemarResult, mcnemar_exact, paired_sign_test

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

HTML_NAME = "leaderboard.html"


class Identity(BaseModel):
    """Which row another was tested against."""

    judge_name: str
    judge_model: str
    origin: str
    run_id: str | None


class TierTest(BaseModel):
    """The paired test that placed a row in its tier (`assign_tiers`)."""

    against: Identity
    p_value: float
    p_adjusted: float
    discordant_against_only: int
    discordant_row_only: int


class Retirement(BaseModel):
    """The judge model's provider shutdown, when past or within 30 days (`core.pricing.retirement_of`)."""

    shutdown_date: str
    days_left: int
    retired: bool


class Entry(Section):
    """One leaderboard row: a published outputs file or one of our runs, scored alike (`Scored`'s
    fields), then where ranking placed it. A published row has `file` and `duplicate_lines`, ours
    `status`, `date`, `data_file` and `cost`; only the fields given are written, in this order."""

    response_model: str = ""  # JudgeBench's rows: the model that wrote the pair's responses
    dataset: str
    subset: str | None = None  # another benchmark's rows: the subset judged (LLMBar's `Adversarial/Neighbor`)
    evaluator: str | None = None  # LLMBar's published rows: its evaluator folder (`GPT-4`, `ChatGPT`)
    judge_name: str
    judge_model: str
    origin: Literal["published", "run"]
    run_id: str | None = None
    file: str | None = None
    status: str | None = None
    date: str | None = None
    mode: str | None = None
    data_file: str | None = None
    cost: str | None = None
    duplicate_lines: int = 0
    pairs: int = 0
    overall_accuracy: SliceAccuracy = Field(default_factory=SliceAccuracy)
    category_accuracy: dict[str, SliceAccuracy] = {}
    consistency: Consistency = Field(default_factory=Consistency)
    invalid_judgments: int = 0
    failed_judgments: int = 0
    benchmark_pairs: int | None = None
    missing_pairs: int | None = None
    rank: int | None = None
    group: str | None = None
    tier: int | None = None
    tier_test: TierTest | None = None
    retirement: Retirement | None = None
    # Ours: what the endpoint said about the model that answered the run (`provenance.served_text`), and
    # what of it changed against the configuration's previous run (results.json's `drift.served`).
    served: str | None = None
    drift: str | None = None
    # Ours: the judge's run-to-run SD as the run measured it (results.json's `noise`; docs/alerts.md).
    noise_sd: float | None = None
    # pair id -> 1.0/0.0 while ranking: the paired test's input, never in the JSON
    _correct: dict[str, float] = PrivateAttr(default_factory=dict)
    _given_only = True

    @classmethod
    def scored(
        cls,
        verdicts: Sequence[metrics.Verdict],
        *,
        seed: int,
        resamples: int,
        benchmark: Benchmark = benchmarks.JUDGEBENCH,
        **identity: Any,
    ) -> Entry:
        """The entry of these verdicts, scored by the benchmark's rule (`score_verdicts`; `known`: a run's
        stored slices)."""
        known = identity.pop("known", None)
        scores = metrics.pair_scores(verdicts, benchmark.rule)
        scored = score_verdicts(
            verdicts,
            seed=seed,
            resamples=resamples,
            known=known,
            scores=scores,
            rule=benchmark.rule,
            categories=benchmark.categories,
        )
        entry = cls(**identity, **dict(scored))
        entry._correct = distinct_correctness(scores, benchmark.rule)
        return entry


class BoardDataset(BaseModel):
    repo_url: str
    commit: str


class Tiers(BaseModel):
    alpha: float
    method: str


class Leaderboard(Section):
    """The leaderboard JSON document (`build_leaderboard`); `outputs` once written. Another benchmark's
    board names it (`benchmark`, `scoring`) and holds each judge's paper averages (`averages`)."""

    _optional = frozenset({"outputs", "unread", "benchmark", "scoring", "averages"})

    generated: str
    dataset: BoardDataset
    db_url: str
    notes: list[str]
    seed: int
    bootstrap_resamples: int
    categories: list[str]
    benchmark_pairs: dict[str, int]
    tiers: Tiers
    entries: list[Entry]
    outputs: dict[str, str] | None = None
    # Published files that could not be scored, each with its reason (the notes name the first few).
    unread: list[dict[str, str]] | None = None
    benchmark: str | None = None
    scoring: str | None = None
    averages: list[JudgeAverages] | None = None


def read_runs(
    db_url: str, *, seed: int, resamples: int, benchmark: Benchmark = benchmarks.JUDGEBENCH
) -> tuple[list[Entry], str | None]:
    """Our latest finished run of each configuration on `benchmark`, scored by its rule; and a note when
    there are none to read.

    Read-only, through the results database's one reader (`db.open_read_only`): nothing is created, and
    missing tables mean no runs, not an error.
    """
    from sqlalchemy.exc import SQLAlchemyError

    from judgebench_flows.data import db

    engine, note = db.open_read_only(db_url)
    if engine is None:
        return [], note
    try:
        return _latest_runs(engine, seed=seed, resamples=resamples, benchmark=benchmark), None
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise UserError(f"--db-url {db.safe_url(db_url)}: cannot read the database: {reason}") from None
    finally:
        engine.dispose()


def _utc(value: Any) -> str | None:
    """A stored time as UTC ISO text: PostgreSQL returns it in the session's zone, SQLite as naive UTC
    (or text, read without the ORM's column types)."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return value
    if not isinstance(value, datetime):
        return None
    return (
        value.replace(tzinfo=timezone.utc) if value.utcoffset() is None else value.astimezone(timezone.utc)
    ).isoformat()


def _stored_results(text: str | None) -> RunResults:
    """A stored run's results.json, as far as it can be read (an unreadable one reads as empty)."""
    try:
        return RunResults.read(text) if text else RunResults()
    except UserError:
        return RunResults()


def _cost(results: RunResults) -> str:
    """A results.json's cost for tables: dollars, "unpriced", or blank when it predates costs."""
    return format_usd(results.usage.dollars) if results.usage and results.usage.priced else ""


def stored_slices(row: Any, results: RunResults, *, seed: int, resamples: int) -> dict[tuple[str, str], SliceAccuracy]:
    """The slices a run's results.json holds, by (scope, name), when the run drew its intervals as the
    leaderboard would (the same seed and resamples, from its stored configuration); else none (they are
    drawn again)."""
    try:
        config = json.loads(row.config_json or "{}")
    except ValueError:
        return {}
    if not isinstance(config, dict) or (config.get("seed"), config.get("bootstrap_resamples")) != (seed, resamples):
        return {}
    known = {("overall", "overall"): results.overall_accuracy}
    known.update({("category", name): accuracy for name, accuracy in results.category_accuracy.items()})
    return known


def endpoint_said(results: RunResults) -> dict[str, str]:
    """A run's `served` (what the endpoint said it answered with) and `drift` (what of that changed against
    the configuration's previous run: another model or fingerprint behind the same name), when known."""
    from judgebench_flows.scoring.provenance import served_text

    said = {}
    served = served_text(results.provenance.served) if results.provenance else None
    if served:
        said["served"] = served
    if results.drift and results.drift.changed and results.drift.served:
        said["drift"] = "; ".join(change.text() for change in results.drift.served)
    return said


def benchmark_of_run(row: Any) -> str:
    """The benchmark a stored run judged: its configuration names it when not JudgeBench (a JudgeBench
    run's stored configuration has no `benchmark` key, as before benchmarks were a unit)."""
    try:
        config = json.loads(row.config_json or "{}")
    except ValueError:
        return benchmarks.DEFAULT
    name = config.get("benchmark") if isinstance(config, dict) else None
    return name if isinstance(name, str) and name else benchmarks.DEFAULT


def _run_group(benchmark: Benchmark, row: Any, verdicts: Sequence[FileVerdict]) -> dict[str, str]:
    """How a run's row is named and grouped: JudgeBench's by the response model of its data file,
    another benchmark's by the subset its pairs come from."""
    if benchmark.name == benchmarks.DEFAULT:
        dataset, response_model = data_file_parts(row.data_file)
        return {"response_model": response_model or row.data_file or "unknown", "dataset": dataset}
    return {"dataset": benchmark.name, "subset": verdicts[0].source or row.data_file or "unknown"}


def _latest_runs(engine: Engine, *, seed: int, resamples: int, benchmark: Benchmark) -> list[Entry]:
    from judgebench_flows.data import db

    latest = [row for row in db.latest_finished_runs(engine) if benchmark_of_run(row) == benchmark.name]
    verdicts_of = db.runs_verdicts(engine, [row.run_id for row in latest])
    entries = []
    for row in latest:
        verdicts = [  # the columns in FileVerdict's order (`db.runs_verdicts`)
            FileVerdict(pair_id, order, source, category, label, status, decision or "", epoch)
            for pair_id, order, source, category, label, status, decision, epoch in verdicts_of.get(row.run_id, ())
        ]
        if not verdicts:
            continue  # e.g. a CLEAR-style external run: no JudgeBench pairs to place in this table
        results = _stored_results(row.results_json)
        when = row.finished or row.started
        known = stored_slices(row, results, seed=seed, resamples=resamples)
        entry = Entry.scored(
            verdicts,
            seed=seed,
            resamples=resamples,
            benchmark=benchmark,
            known=known,
            **_run_group(benchmark, row, verdicts),
            judge_name=row.judge_type,
            judge_model=row.model,
            origin="run",
            run_id=row.run_id,
            status=row.status,
            date=_utc(when),
            mode=results.run.mode or ("single-game" if max(v.order for v in verdicts) == 0 else "both-orders"),
            data_file=row.data_file,
            cost=_cost(results),
            **endpoint_said(results),
            **({"noise_sd": results.noise.run_to_run_sd} if results.noise else {}),
        )
        entries.append(entry)
    return entries


def published_entries(
    checkout_path: Path,
    *,
    seed: int,
    resamples: int,
    required: bool = True,
    unread: list[tuple[str, str]] | None = None,
) -> list[Entry]:
    """One scored entry per outputs/ file of the checkout; `required=False` makes a missing outputs/ empty.
    A file that cannot be scored (a Git LFS pointer, bad JSON, a blob missing from the checkout) is left
    out and added to `unread` as (file name, reason); when no file can be scored, the first problem is
    the error."""
    try:
        files = outputs_files(checkout_path)
    except UserError:
        if required:
            raise
        return []
    entries = []
    problems: list[tuple[str, str]] = [
        (name, "missing from the checkout") for name in missing_from_checkout(checkout_path)
    ]
    first_error: UserError | None = None
    for path in files:
        try:
            scored = read_outputs_file(path)
        except UserError as exc:
            first_error = first_error or exc
            problems.append((path.name, why_unreadable(path, exc)))
            continue
        entry = Entry.scored(
            scored.verdicts,
            seed=seed,
            resamples=resamples,
            response_model=scored.response_model,
            dataset=scored.dataset,
            judge_name=scored.judge_name,
            judge_model=scored.judge_model,
            origin="published",
            run_id=None,
            file=path.name,
            mode=scored.mode,
            duplicate_lines=scored.duplicate_lines,
        )
        entries.append(entry)
    if not entries and first_error is not None:
        raise first_error
    if unread is not None:
        unread.extend(problems)
    return entries


TIER_ALPHA = 0.05
TIER_METHOD = (
    "exact McNemar test (two-sided) of each row against the best row of the current tier, on the same pairs; "
    "a row starts the next tier when p < alpha / m, m = the tiered rows of its table minus one (Bonferroni)"
)


LLMBAR_TIER_METHOD = (
    "exact sign test (two-sided) of each row against the best row of the current tier, on the same pairs, "
    "over each pair's share of orders judged right (LLMBar's rule); a row starts the next tier when "
    "p < alpha / m, m = the tiered rows of its table minus one (Bonferroni)"
)


def tier_method(rule: str) -> str:
    return LLMBAR_TIER_METHOD if rule == "llmbar" else TIER_METHOD


def distinct_correctness(scores: Mapping[str, metrics.PairScore], rule: str = "judgebench") -> dict[str, float]:
    """pair id -> 1.0 when judged correctly (of `metrics.pair_scores`): once per pair (a published file's
    repeated line, scored under `id#n`, is not another pair), what two rows are compared on. Under
    LLMBar's rule a pair's share of orders judged right (0, 0.5 or 1): what its accuracy averages."""
    return {
        pair_id: score.correctness if rule == "llmbar" else 1.0 if score.correct else 0.0
        for pair_id, score in scores.items()
        if not ("#" in pair_id and pair_id.rsplit("#", 1)[0] in scores)
    }


def _identity(entry: Entry) -> Identity:
    return Identity(
        judge_name=entry.judge_name, judge_model=entry.judge_model, origin=entry.origin, run_id=entry.run_id
    )


def assign_tiers(members: list[Entry], alpha: float = TIER_ALPHA, rule: str = "judgebench") -> None:
    """Significance tiers of one ranked table (`members` best first): tier 1 is the best row and every row
    not significantly worse than it; the first row that is significantly worse starts tier 2 and is the
    row the next ones are tested against, and so on.

    Only rows that judged exactly the same pairs are compared (a paired test needs them): the pairs of the
    best row that covers the whole data file. Any other row (missing lines, other pairs) gets tier None.
    Each tiered row but the first is tested once, so there are m = tiered rows - 1 tests, and a row is
    significantly worse when its exact McNemar p-value is below alpha / m (Bonferroni): the chance that
    noise alone splits a table of equally good judges stays under alpha. Under LLMBar's rule a pair's
    figure is its share of orders judged right, and the test the exact sign test over them."""
    paired_test: Callable[[Mapping[str, float], Mapping[str, float]], McNemarResult] = (
        paired_sign_test if rule == "llmbar" else mcnemar_exact
    )
    for entry in members:
        entry.tier = None
    measured = [e for e in members if e._correct and _accuracy(e) >= 0]
    complete = [e for e in measured if not e.missing_pairs]
    if not complete:
        return
    reference = set(complete[0]._correct)
    tiered = [e for e in measured if set(e._correct) == reference]
    tests = max(1, len(tiered) - 1)
    tier, leader = 1, tiered[0]
    leader.tier = 1
    for entry in tiered[1:]:
        test = paired_test(leader._correct, entry._correct)
        against = _identity(leader)
        if test.p_value < alpha / tests and _accuracy(entry) < _accuracy(leader):
            tier, leader = tier + 1, entry
        entry.tier = tier
        entry.tier_test = TierTest(
            against=against,
            p_value=test.p_value,
            p_adjusted=min(1.0, test.p_value * tests),
            discordant_against_only=test.discordant_a_only,
            discordant_row_only=test.discordant_b_only,
        )


def _accuracy(entry: Entry) -> float:
    value = entry.overall_accuracy.accuracy
    return value if isinstance(value, (int, float)) and not math.isnan(value) else -1.0


def group_key(entry: Entry) -> str:
    """Entries are ranked among judges of the same response pairs: JudgeBench's GPT-4o and Claude sets
    differ; another benchmark's rows by their subset."""
    if entry.subset is not None:
        return entry.subset
    return _group_of(entry.dataset, entry.response_model)


def _group_of(dataset: str | None, response_model: str) -> str:
    return response_model if dataset in (None, "judgebench") else f"{dataset}/{response_model}"


def benchmark_sizes(checkout_path: Path) -> dict[str, int]:
    """Pairs in each of the checkout's data files, by leaderboard group: what a full-benchmark result covers."""
    sizes = {}
    for path in sorted((checkout_path / "data").glob("*.jsonl")):
        dataset, response_model = data_file_parts(path.name)
        if response_model is not None:
            with path.open("rb") as lines:
                sizes[_group_of(dataset, response_model)] = sum(1 for line in lines if line.strip())
    return sizes


def _mark_coverage(entry: Entry, full: int | None) -> bool:
    """Note how much of the benchmark an entry covers; True when it is a run on a subset, which is shown
    apart and never ranked (a 20-pair run's accuracy is not comparable with a 350-pair result)."""
    entry.benchmark_pairs = full
    covered = distinct_pairs(entry)
    if full is None or covered >= full:
        return False
    if entry.origin == "published":
        entry.missing_pairs = full - covered  # ranked, but flagged: the file lacks lines
        return False
    return True


def distinct_pairs(entry: Entry) -> int:
    """Pairs an entry judged: a published file's repeated lines count in its metric, not here."""
    return entry.pairs - entry.duplicate_lines


SUBSET_GROUP = "{group}: runs on a subset, not ranked"


def rank(
    entries: Iterable[Entry],
    benchmark_pairs: Mapping[str, int] | None = None,
    *,
    order: Sequence[str] = (),
    rule: str = "judgebench",
) -> list[Entry]:
    """Entries grouped by response-model dataset (largest group first; `order`: groups in this order
    first, a benchmark's subsets), best overall accuracy first, with their rank in the group (ties share a
    rank). With the benchmark's sizes, runs on fewer pairs than their data file holds (`--max-samples`, a
    slice) go to a group of their own after the ranked ones, rank None. Ranked rows get their
    significance `tier` (`assign_tiers`, by the benchmark's `rule`)."""
    groups: dict[str, list[Entry]] = {}
    subsets: set[str] = set()
    for entry in entries:
        key = group_key(entry)
        if _mark_coverage(entry, (benchmark_pairs or {}).get(key)):
            key = SUBSET_GROUP.format(group=key)
            subsets.add(key)
        groups.setdefault(key, []).append(entry)
    ordered: list[Entry] = []

    def place(key: str) -> int:
        base = key.split(":", 1)[0] if key in subsets else key
        return order.index(base) if base in order else len(order)

    for key in sorted(groups, key=lambda k: (k in subsets, place(k), -len(groups[k]), k)):
        members = sorted(
            groups[key], key=lambda e: (-_accuracy(e), e.origin != "published", e.judge_name, e.judge_model)
        )
        previous, position = None, 0
        for index, entry in enumerate(members, 1):
            if _accuracy(entry) != previous:
                position, previous = index, _accuracy(entry)
            entry.rank = None if key in subsets else position
            entry.group = key
        if key in subsets:
            for entry in members:
                entry.tier = None
        else:
            assign_tiers(members, rule=rule)
        ordered.extend(members)
    return ordered


class LeaderboardSettings(BaseModel):
    """What a leaderboard is built from; no secrets (the repo URL is stored without credentials). Each
    field is a `judgebench leaderboard` option (cli/options.py), its description the help text."""

    benchmark: str = Field(
        default=benchmarks.DEFAULT,
        description="whose leaderboard: judgebench or llmbar; its repository and pinned commit are the defaults",
    )
    repo_url: str = Field(
        default=DEFAULT_REPO_URL,
        description="git URL, file:// URL or local path of the benchmark's repository (default: the benchmark's)",
    )
    ref: str | None = Field(
        default=DEFAULT_REF, description="commit, tag or branch (default: the benchmark's pinned commit)"
    )
    cache_dir: str | None = Field(default=None, description="where cloned repositories are kept")
    db_url: str = Field(default=DEFAULT_DB_URL, description="results database to read our runs from (read only)")
    seed: int = Field(default=42, ge=0, description="bootstrap seed")
    bootstrap_resamples: int = Field(default=2000, ge=0, description="bootstrap resamples of the confidence intervals")
    require_published: bool = Field(
        default=True, description="fail when the checkout has no published outputs/ and there is no run to list"
    )
    prices: str | None = Field(
        default=None,
        description="YAML or JSON price file over the bundled table: its shutdown_date entries add or correct "
        "the retirement dates the leaderboard marks",
    )

    @field_validator("benchmark")
    @classmethod
    def _known_benchmark(cls, value: str) -> str:
        return benchmarks.check_name(value.strip().lower())

    @model_validator(mode="after")
    def _benchmark_defaults(self) -> LeaderboardSettings:
        """Another benchmark's repository and pinned commit where none is given (as `RunConfig` does)."""
        chosen = benchmarks.get(self.benchmark)
        if chosen.name != benchmarks.DEFAULT:
            if "repo_url" not in self.model_fields_set:
                self.repo_url = chosen.repo_url
            if "ref" not in self.model_fields_set:
                self.ref = chosen.ref
        return self


def no_published_outputs(repo_url: str, ref: str | None) -> str:
    """The error of a checkout without outputs/, naming the user's --repo-url and --ref, not the clone in the
    cache: a copy of JudgeBench's data/ alone (a shared folder) is what a newcomer often has."""
    return (
        f"--repo-url {repo_url} at --ref {ref or 'its default branch'} has no outputs/ folder: the leaderboard "
        f"scores the judges JudgeBench publishes there (a clone of {DEFAULT_REPO_URL} has it, a copy of data/ "
        "alone does not); `judgebench history` lists your own runs"
    )


def published_missing_note(repo_url: str, ref: str | None) -> str:
    """The one line above a leaderboard of our runs alone: why the published judges are absent, and the fix."""
    from judgebench_flows.data.dataset import public_url

    return (
        f"published judges not shown: --repo-url {public_url(repo_url)} at --ref {ref or 'its default branch'} has no "
        f"outputs/ folder (a copy of data/ alone); a clone of {DEFAULT_REPO_URL} has them"
    )


def build_leaderboard(settings: LeaderboardSettings) -> Leaderboard:
    """Fetch the checkout, score its published judges and our runs on its benchmark; the leaderboard JSON
    document."""
    from judgebench_flows.data.dataset import fetch_repository

    benchmark = benchmarks.get(settings.benchmark)
    if benchmark.layout == "llmbar":
        return _llmbar_board(settings, benchmark)
    checkout = fetch_repository(settings.repo_url, settings.ref, settings.cache_dir)
    published = (checkout.path / "outputs").is_dir()
    unread: list[tuple[str, str]] = []
    entries = published_entries(
        checkout.path, seed=settings.seed, resamples=settings.bootstrap_resamples, required=published, unread=unread
    )
    ours, note = read_runs(settings.db_url, seed=settings.seed, resamples=settings.bootstrap_resamples)
    if not published and not ours and settings.require_published:  # nothing at all to rank
        raise UserError(no_published_outputs(settings.repo_url, settings.ref))
    missing = [] if published else [published_missing_note(settings.repo_url, settings.ref)]
    notes = missing + ([unread_note(len(entries), unread)] if unread else []) + ([note] if note else [])
    sizes = benchmark_sizes(checkout.path)
    return _board(settings, checkout, notes, sizes, unread, rank([*entries, *ours], sizes))


def _board(
    settings: LeaderboardSettings,
    checkout: Any,
    notes: list[str],
    sizes: dict[str, int],
    unread: list[tuple[str, str]],
    ranked: list[Entry],
    benchmark: Benchmark | None = None,
    **more: Any,
) -> Leaderboard:
    from sqlalchemy.engine import make_url

    other = benchmark is not None and benchmark.name != benchmarks.DEFAULT
    return Leaderboard(
        generated=datetime.now(timezone.utc).isoformat(),
        dataset=BoardDataset(repo_url=checkout.repo_url, commit=checkout.commit),
        db_url=make_url(settings.db_url).render_as_string(hide_password=True),
        notes=notes,
        seed=settings.seed,
        bootstrap_resamples=settings.bootstrap_resamples,
        categories=list(benchmark.categories if benchmark else CATEGORIES),
        benchmark_pairs=sizes,
        tiers=Tiers(alpha=TIER_ALPHA, method=tier_method(benchmark.rule if benchmark else "judgebench")),
        unread=[{"file": name, "reason": reason} for name, reason in unread] or None,
        entries=mark_retirements(ranked, settings.prices),
        benchmark=benchmark.name if benchmark and other else None,
        scoring=benchmark.scoring if benchmark and other else None,
        **more,
    )


def _llmbar_board(settings: LeaderboardSettings, benchmark: Benchmark) -> Leaderboard:
    """LLMBar's board: its published result.json files and our LLMBar runs, by subset, by LLMBar's rule,
    with each judge's Natural and Adversarial averages."""
    from judgebench_flows.data.dataset import fetch_repository, public_url
    from judgebench_flows.scoring import leaderboard_llmbar as llmbar

    checkout = fetch_repository(settings.repo_url, settings.ref, settings.cache_dir)
    unread: list[tuple[str, str]] = []
    seed, resamples = settings.seed, settings.bootstrap_resamples
    entries = [
        Entry.scored(
            result.verdicts,
            seed=seed,
            resamples=resamples,
            benchmark=benchmark,
            dataset=benchmark.name,
            subset=result.subset,
            evaluator=result.evaluator,
            judge_name=result.judge_name,
            judge_model=result.judge_model,
            origin="published",
            run_id=None,
            file=result.file,
            mode="both-orders",
        )
        for result in llmbar.published_results(checkout.path, unread)
    ]
    ours, note = read_runs(settings.db_url, seed=seed, resamples=resamples, benchmark=benchmark)
    missing = (
        []
        if entries
        else [
            f"published judges not shown: --repo-url {public_url(settings.repo_url)} at --ref "
            f"{settings.ref or 'its default branch'} has no readable result.json under "
            "Dataset/LLMBar/<subset>/evaluators/ (a clone of LLMBar has them)"
        ]
    )
    if missing and not ours and settings.require_published:
        raise UserError(missing[0].replace("published judges not shown: ", "no judges to list: "))
    statistics = llmbar.statistics_note(checkout.path)
    notes = (
        missing
        + ([unread_note(len(entries), unread)] if unread else [])
        + ([statistics] if statistics else [])
        + ([note] if note else [])
    )
    sizes = llmbar.subset_sizes(checkout.path)
    ranked = rank([*entries, *ours], sizes, order=benchmark.data_files, rule=benchmark.rule)
    return _board(settings, checkout, notes, sizes, unread, ranked, benchmark, averages=llmbar.paper_averages(ranked))


def mark_retirements(entries: list[Entry], prices_file: str | None) -> list[Entry]:
    """Each entry whose judge model is past its provider's shutdown date, or within 30 days of it, gets
    `retirement` ({"shutdown_date", "days_left", "retired"}): its number cannot be reproduced for long."""
    for entry in entries:
        retirement = retirement_of(entry.judge_model, prices_file)
        if retirement:
            entry.retirement = Retirement.model_validate(retirement)
    return entries


__all__ = [
    "Entry",
    "Leaderboard",
    "LeaderboardSettings",
    "build_leaderboard",
    "published_entries",
    "rank",
    "read_runs",
]

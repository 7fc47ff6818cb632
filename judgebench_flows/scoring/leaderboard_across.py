"""One view across benchmarks: each judge's place on every benchmark it has rows on, and how far the
benchmarks' rankings agree (Kendall's tau-b over the judges they share, with a seeded bootstrap interval).

A judge is a judge type and model (`arena_hard` / `gpt-4o-mini`, `llmbar:Vanilla` / `gpt-4-0613`). Its
score on a benchmark is that benchmark's headline, from the rows of its leaderboard:
- JudgeBench: the accuracy on its default data file (the GPT-4o pairs), JudgeBench's rule;
- LLMBar: the mean of its paper's two figures, Natural and Adversarial (the mean of the four adversarial
  subsets), LLMBar's rule; a judge needs all five subsets to have one.
Only ranked rows count (a run on part of a data file is not placed); when a judge has our run and a
published row on the same pairs, our run counts (its verdicts came through this project's code, as on
the other benchmark). Judges are placed by that score on each benchmark (ties share a place).

The interval resamples pairs within each of a benchmark's groups (stratified: every subset keeps its
size), the same draw for every judge, recomputes the headline and tau-b per resample (`rank_agreement`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from itertools import combinations

import numpy as np
from pydantic import BaseModel

from judgebench_flows.core import benchmarks
from judgebench_flows.core.benchmarks.llmbar import ADVERSARIAL, NATURAL
from judgebench_flows.scoring.leaderboard import Entry, Leaderboard, LeaderboardSettings, build_leaderboard
from judgebench_flows.scoring.published import data_file_parts
from judgebench_flows.scoring.rank_agreement import resampled_means, tau_interval, tau_point

MIN_SHARED = 3  # fewer shared judges than this: no tau (two judges agree or disagree, nothing more)


def headline_weights(name: str) -> dict[str, float]:
    """The groups of a benchmark's board whose accuracies make its headline score, with their weights."""
    if name == benchmarks.LLMBAR.name:
        return {NATURAL: 0.5, **{subset: 0.5 / len(ADVERSARIAL) for subset in ADVERSARIAL}}
    benchmark = benchmarks.get(name)
    dataset, response_model = data_file_parts(benchmark.default_data_file)
    return {response_model or dataset: 1.0}


HEADLINES = {
    "judgebench": "accuracy on the GPT-4o pairs (JudgeBench's rule)",
    "llmbar": "mean of Natural and Adversarial (the mean of the four adversarial subsets), LLMBar's rule",
}


class Place(BaseModel):
    """A judge's standing on one benchmark."""

    place: int
    of: int
    score: float
    origin: str
    run_ids: list[str] = []


class AcrossJudge(BaseModel):
    judge_name: str
    judge_model: str
    places: dict[str, Place]


class Agreement(BaseModel):
    """Kendall's tau-b between two benchmarks' rankings of the judges they share, with its 95% bootstrap
    interval; `tau` None (and `note` why) with fewer than three shared judges."""

    benchmarks: list[str]
    shared_judges: int
    judges: list[str]
    tau: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    note: str | None = None


class BoardSource(BaseModel):
    repo_url: str
    commit: str
    headline: str
    judges: int


class Across(BaseModel):
    """The view across benchmarks (`build_across`)."""

    generated: str
    seed: int
    bootstrap_resamples: int
    boards: dict[str, BoardSource]
    judges: list[AcrossJudge]
    agreements: list[Agreement]
    notes: list[str]


Judge = tuple[str, str]


def chosen_rows(board: Leaderboard, weights: Mapping[str, float]) -> dict[Judge, dict[str, Entry]]:
    """Per judge, its row in each headline group: ranked rows only, our latest run over a published row."""
    chosen: dict[Judge, dict[str, Entry]] = {}
    for entry in board.entries:
        group = entry.group or ""
        if entry.rank is None or group not in weights or not entry._correct:
            continue
        rows = chosen.setdefault((entry.judge_name, entry.judge_model), {})
        held = rows.get(group)
        if held is None or _preferred(entry, held):
            rows[group] = entry
    return {judge: rows for judge, rows in chosen.items() if set(rows) == set(weights)}


def _preferred(entry: Entry, held: Entry) -> bool:
    return (entry.origin == "run", entry.date or "") > (held.origin == "run", held.date or "")


class Scores:
    """One benchmark's headline scores of its judges, and the same over bootstrap resamples of its pairs."""

    def __init__(self, rows: dict[Judge, dict[str, Entry]], weights: Mapping[str, float]):
        self.rows, self.weights = rows, weights
        self.judges = sorted(rows)

    def point(self) -> dict[Judge, float]:
        return {
            judge: round(
                sum(w * (self.rows[judge][g].overall_accuracy.accuracy or 0.0) for g, w in self.weights.items()), 6
            )
            for judge in self.judges
        }

    def resampled(self, judges: Sequence[Judge], rng: np.random.Generator, resamples: int) -> np.ndarray:
        """(resamples, judges): the headline of each judge over stratified resamples of the groups' pairs."""
        total = np.zeros((resamples, len(judges)))
        for group, weight in self.weights.items():
            pairs = sorted({pid for judge in judges for pid in self.rows[judge][group]._correct})
            matrix = np.array(
                [[self.rows[judge][group]._correct.get(pid, np.nan) for pid in pairs] for judge in judges]
            )
            total += weight * resampled_means(matrix, rng, resamples)
        return total


def places(scores: Mapping[Judge, float]) -> dict[Judge, int]:
    """1 for the best score; ties share a place."""
    ordered = sorted(scores.items(), key=lambda item: -item[1])
    result, previous, position = {}, None, 0
    for index, (judge, score) in enumerate(ordered, 1):
        if score != previous:
            position, previous = index, score
        result[judge] = position
    return result


def agreement(names: tuple[str, str], scored: Mapping[str, Scores], *, seed: int, resamples: int) -> Agreement:
    a, b = scored[names[0]], scored[names[1]]
    shared = sorted(set(a.judges) & set(b.judges))
    result = Agreement(benchmarks=list(names), shared_judges=len(shared), judges=[f"{j} / {m}" for j, m in shared])
    if len(shared) < MIN_SHARED:
        result.note = f"{len(shared)} shared judges: too few for a rank correlation ({MIN_SHARED} needed)"
        return result
    point_a, point_b = a.point(), b.point()
    result.tau = tau_point([point_a[j] for j in shared], [point_b[j] for j in shared])
    if resamples:
        rng = np.random.default_rng(seed)
        samples_a = a.resampled(shared, rng, resamples)
        samples_b = b.resampled(shared, rng, resamples)
        result.ci_low, result.ci_high = tau_interval(samples_a, samples_b)
    if result.tau is None:
        result.note = "every shared judge scored the same on one benchmark: no ranking to compare"
    return result


def across(boards: Mapping[str, Leaderboard], *, seed: int, resamples: int) -> Across:
    """The view of these benchmarks' boards (name -> board)."""
    scored = {
        name: Scores(chosen_rows(board, headline_weights(name)), headline_weights(name))
        for name, board in boards.items()
    }
    judges: dict[Judge, dict[str, Place]] = {}
    for name, scores in scored.items():
        points = scores.point()
        for judge, place in places(points).items():
            rows = scores.rows[judge].values()
            origin = "run" if any(r.origin == "run" for r in rows) else "published"
            judges.setdefault(judge, {})[name] = Place(
                place=place,
                of=len(points),
                score=points[judge],
                origin=origin,
                run_ids=sorted({r.run_id for r in rows if r.run_id}),
            )
    ordered = sorted(judges.items(), key=lambda item: (-len(item[1]), min(p.place for p in item[1].values()), item[0]))
    return Across(
        generated=datetime.now(timezone.utc).isoformat(),
        seed=seed,
        bootstrap_resamples=resamples,
        boards={
            name: BoardSource(
                repo_url=board.dataset.repo_url,
                commit=board.dataset.commit,
                headline=HEADLINES.get(name, "accuracy on its default data file"),
                judges=len(scored[name].judges),
            )
            for name, board in boards.items()
        },
        judges=[AcrossJudge(judge_name=j, judge_model=m, places=p) for (j, m), p in ordered],
        agreements=[agreement(pair, scored, seed=seed, resamples=resamples) for pair in combinations(boards, 2)],
        notes=[f"{name}: {note}" for name, board in boards.items() for note in board.notes],
    )


def build_across(settings: Mapping[str, LeaderboardSettings], *, seed: int, resamples: int) -> Across:
    """Every named benchmark's board (its settings), then the view across them."""
    boards = {name: build_leaderboard(given) for name, given in settings.items()}
    return across(boards, seed=seed, resamples=resamples)


__all__ = ["Across", "Agreement", "across", "build_across", "headline_weights", "places"]

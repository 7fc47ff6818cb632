"""How often the nightly regression checks cry wolf, and how soon they catch a real change (issues 50, 60).

Simulates a configuration's nights through the decision code the runs use, both tests together:
`scoring.alerts` (the per-night test against the previous `baseline_runs` nights; `night_alerted` is
`decide` for many nights at once) and `scoring.sequential` (the CUSUM against the frozen reference, `step`),
at the shares of the plan a night gives each cell (`AlertPlan(rate, cells)`). Every row: 1,000 seeded
histories (`--histories`), numpy arrays with a history axis.

- false alarms: a 24-cell matrix (`--cells`) of unchanged judges from their first night; nights 6-35
  (`--nights`, once the per-night test has its 5 baselines) are counted: the alerting nights per 30 on
  which any cell alerts (the per-night test, or the CUSUM newly flagging a cell). A flagged cell is reset
  at once, as a person who looked would (its reference starts afresh).
- detection: one cell with `--history` unchanged nights (the reference full), then its judge gets worse
  and stays so: a persistent 5-point drop (caught that night, within 2, 3 and 7 nights; and "today": the
  per-night test alone at today's share, within 2), and a slow decline of 0.5 points a night (caught
  before it reaches 6 points: by night 11).

The judge of each pair: easy (both orders right when not re-drawn, 60%), leaning to the first shown (15%:
inconsistent, scored 0) or hard (both wrong, 25%). Its noise, two models:
- `uniform`: every call re-draws its verdict at random with probability q (the stand-in's `--noise q`);
- `mixed`: most pairs never flip; a share 1.25 q of them re-draw with probability 0.8 (the mean is q).
A drop of d points turns easy pairs wrong, in a random order, until their expected loss (1 - the pair's
re-draw probability each) reaches d: the expected accuracy falls by d.

    python benchmarks/bench_alerts.py                                  # every row (long: see docs/alerts.md)
    python benchmarks/bench_alerts.py --pairs 350 --noise 0.2 --epochs 1 --histories 200   # a quick look
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass

import numpy as np

from judgebench_flows.scoring.alerts import AlertPlan, PairSums, Samples, SampleSums, night_alerted
from judgebench_flows.scoring.sequential import REFERENCE_NIGHTS, Watch, step

EASY, LEANING = 0.60, 0.15
OFTEN = 0.8  # the mixed model's re-draw probability of a pair that flips


@dataclass
class Judges:
    """A batch of judges (one per history), pairs on the last axis."""

    label_a: np.ndarray
    base: np.ndarray  # (B, n, 2): chooses A in each order when not re-drawn
    redraw: np.ndarray  # (B, n): each call's probability of a verdict drawn at random
    rank: np.ndarray  # (B, n): the order easy pairs turn wrong in (others: n)
    loss: np.ndarray  # (B, n): the cumulative expected loss of turning the first pairs, in that order

    @classmethod
    def make(cls, batch: int, pairs: int, noise: float, model: str, rng: np.random.Generator) -> Judges:
        label_a = rng.random((batch, pairs)) < 0.5
        kind = rng.random((batch, pairs))
        easy = kind < EASY
        leaning = (kind >= EASY) & (kind < EASY + LEANING)
        right = np.stack([label_a, label_a], axis=-1)
        first = np.stack([np.ones_like(label_a), np.zeros_like(label_a)], axis=-1)  # order 1 shows B first
        base = np.where(easy[..., None], right, np.where(leaning[..., None], first, ~right))
        if model == "uniform":
            redraw = np.full((batch, pairs), noise)
        else:
            redraw = np.where(rng.random((batch, pairs)) < min(1.0, noise / OFTEN), OFTEN, 0.0)
        order = np.argsort(np.where(easy, rng.random((batch, pairs)), 2.0), axis=-1)
        rank = np.empty_like(order)
        np.put_along_axis(rank, order, np.arange(pairs)[None, :].repeat(batch, 0), axis=-1)
        rank = np.where(easy, rank, pairs)
        per_pair = np.take_along_axis(np.where(easy, 1 - redraw, 0.0), order, axis=-1) / pairs
        return cls(label_a, base, redraw, rank, np.cumsum(per_pair, axis=-1))

    def turned(self, drop: float) -> np.ndarray:
        """Which pairs the judge now gets wrong for a drop of `drop` (a fraction)."""
        if drop <= 0:
            return np.zeros(self.rank.shape, dtype=bool)
        count = np.sum(self.loss < drop - 1e-12, axis=-1) + 1
        return self.rank < count[:, None]

    def night(self, epochs: int, turned: np.ndarray | None, rng: np.random.Generator) -> Samples:
        """One run of `epochs` epochs of every history's judge: per pair and epoch, correct, consistent
        and its lean to the first shown."""
        wrong = ~np.stack([self.label_a] * 2, axis=-1)
        base = self.base if turned is None else np.where(turned[..., None], wrong, self.base)
        shape = (*self.label_a.shape, epochs, 2)
        drawn = rng.random(shape) < self.redraw[..., None, None]
        chooses_a = np.where(drawn, rng.random(shape) < 0.5, base[..., None, :])
        right = chooses_a == self.label_a[..., None, None]
        first = np.stack([chooses_a[..., 0], ~chooses_a[..., 1]], axis=-1)
        return Samples(
            correct=right.all(axis=-1).astype(float),
            consistent=(chooses_a[..., 0] == chooses_a[..., 1]).astype(float),
            lean=(2 * first.sum(axis=-1) - 2).astype(float),
        )


def minus(sums: SampleSums, night: SampleSums) -> SampleSums:
    """`sums` without one night's (the running baseline dropping its oldest night)."""

    def less(a: PairSums, b: PairSums) -> PairSums:
        return PairSums(*(x - y for x, y in zip(a.fields(), b.fields(), strict=True)))

    return SampleSums(
        less(sums.correct, night.correct), less(sums.consistent, night.consistent), less(sums.lean, night.lean)
    )


class Cell:
    """One cell's nights over a batch of histories: the per-night test against its previous nights and
    the CUSUM, both through the runs' decision code."""

    def __init__(self, judges: Judges, epochs: int, plan: AlertPlan, baseline_runs: int) -> None:
        self.judges, self.epochs, self.plan, self.baseline_runs = judges, epochs, plan, baseline_runs
        self.history: list[SampleSums] = []
        self.baseline: SampleSums | None = None
        self.watch = Watch.start(judges.label_a.shape[:1], judges.label_a.shape[1])

    def night(self, turned: np.ndarray | None, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Tonight: (per-night test alerted, the CUSUM newly flagged), per history."""
        tonight = self.judges.night(self.epochs, turned, rng)
        sums = SampleSums.of(tonight)
        alerted = np.zeros(self.judges.label_a.shape[0], dtype=bool)
        if self.history:
            alerted = night_alerted(sums, self.baseline, self.plan)
        # the last `baseline_runs` nights' sums, kept as a running sum (the sums are whole numbers: exact)
        self.baseline = sums if self.baseline is None else self.baseline + sums
        self.history.append(sums)
        if len(self.history) > self.baseline_runs:
            self.baseline = minus(self.baseline, self.history.pop(0))
        if not self.plan.sequential:
            return alerted, np.zeros_like(alerted)
        before = self.watch.flagged
        self.watch, _ = step(self.watch, tonight.correct, self.plan.sequential_alpha)
        return alerted, self.watch.flagged & ~before


def false_alarms(args: argparse.Namespace, pairs: int, noise: float, epochs: int, model: str, seed: int) -> dict:
    """Alerting nights per 30 of an unchanged matrix, both tests together and each alone."""
    rng = np.random.default_rng(seed)
    plan = AlertPlan(args.rate, args.cells, True)
    counted = args.nights
    night_any = np.zeros((args.histories, counted), dtype=bool)
    seq_any = np.zeros((args.histories, counted), dtype=bool)
    for _ in range(args.cells):
        cell = Cell(Judges.make(args.histories, pairs, noise, model, rng), epochs, plan, args.baseline_runs)
        for night in range(args.baseline_runs + counted):
            alerted, flagged = cell.night(None, rng)
            if flagged.any():
                cell.watch = cell.watch.restarted(flagged)  # a person looked and reset it
            if night >= args.baseline_runs:
                night_any[:, night - args.baseline_runs] |= alerted
                seq_any[:, night - args.baseline_runs] |= flagged
    per_30 = 30 / counted
    return {
        "both": float((night_any | seq_any).sum(axis=1).mean() * per_30),
        "per_night": float(night_any.sum(axis=1).mean() * per_30),
        "sequential": float(seq_any.sum(axis=1).mean() * per_30),
    }


def first_caught(
    args: argparse.Namespace, judges: Judges, epochs: int, plan: AlertPlan, drops: list[float], rng: np.random.Generator
) -> np.ndarray:
    """Per history, the night (1-based, after the change) either test first alerted; 0: not within."""
    cell = Cell(judges, epochs, plan, args.baseline_runs)
    for _ in range(args.history):
        cell.night(None, rng)
    caught = np.zeros(judges.label_a.shape[0], dtype=int)
    for night, drop in enumerate(drops, start=1):
        alerted, flagged = cell.night(judges.turned(drop), rng)
        caught = np.where((caught == 0) & (alerted | flagged), night, caught)
    return caught


def detection(args: argparse.Namespace, pairs: int, noise: float, epochs: int, model: str, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    plan = AlertPlan(args.rate, args.cells, True)
    judges = Judges.make(args.histories, pairs, noise, model, rng)
    drop = first_caught(args, judges, epochs, plan, [args.drop / 100] * 7, rng)
    today = first_caught(
        args, judges, epochs, AlertPlan(args.rate, args.cells, True, sequential=False), [args.drop / 100] * 2, rng
    )
    decline = first_caught(args, judges, epochs, plan, [args.decline / 100 * t for t in range(1, 12)], rng)

    def within(caught: np.ndarray, nights: int) -> float:
        return float(np.mean((caught > 0) & (caught <= nights)))

    return {
        "drop_1": within(drop, 1),
        "drop_2": within(drop, 2),
        "drop_3": within(drop, 3),
        "drop_7": within(drop, 7),
        "today_2": within(today, 2),
        "decline_before_6": within(decline, 11),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--histories", type=int, default=1000, help="seeded histories per row")
    parser.add_argument("--nights", type=int, default=30, help="counted nights of each unchanged history")
    parser.add_argument("--history", type=int, default=REFERENCE_NIGHTS, help="unchanged nights before a change")
    parser.add_argument("--cells", type=int, default=24)
    parser.add_argument("--rate", type=float, default=0.02, help="the night's false-alarm rate (the default's)")
    parser.add_argument("--baseline-runs", type=int, default=5)
    parser.add_argument("--noise", type=float, nargs="+", default=[0.1, 0.2, 0.3])
    parser.add_argument("--pairs", type=int, nargs="+", default=[350, 100])
    parser.add_argument("--epochs", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--models", nargs="+", choices=["uniform", "mixed"], default=["uniform", "mixed"])
    parser.add_argument("--drop", type=float, default=5.0, help="the persistent drop, points")
    parser.add_argument("--decline", type=float, default=0.5, help="the slow decline, points a night")
    parser.add_argument("--no-false-alarms", action="store_true", help="only the detection columns")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    started = time.perf_counter()
    rows = []
    print(
        f"{args.cells} cells, false-alarm rate {args.rate:g} a night, per-night baseline {args.baseline_runs} runs, "
        f"{args.histories} histories a row"
    )
    print("model    pairs  q    K  alarms/30 (night+cusum)  5pt: 1st/2nd/3rd/7th today-2nd  decline<6pt  s")
    for model in args.models:
        for pairs in args.pairs:
            for noise in args.noise:
                for epochs in args.epochs:
                    row_started = time.perf_counter()
                    seed = args.seed + pairs * 1000 + round(noise * 100) * 10 + epochs + (model == "mixed") * 7
                    alarms = (
                        {"both": np.nan, "per_night": np.nan, "sequential": np.nan}
                        if args.no_false_alarms
                        else false_alarms(args, pairs, noise, epochs, model, seed)
                    )
                    caught = detection(args, pairs, noise, epochs, model, seed + 1)
                    rows.append({"model": model, "pairs": pairs, "noise": noise, "epochs": epochs, **alarms, **caught})
                    print(
                        f"{model:7s} {pairs:5d}  {noise:.1f}  {epochs}  {alarms['both']:5.2f} "
                        f"({alarms['per_night']:.2f}+{alarms['sequential']:.2f})       "
                        f"{caught['drop_1']:4.0%}/{caught['drop_2']:4.0%}/{caught['drop_3']:4.0%}/"
                        f"{caught['drop_7']:4.0%}  {caught['today_2']:4.0%}       {caught['decline_before_6']:4.0%}"
                        f"  {time.perf_counter() - row_started:.0f}",
                        flush=True,
                    )
    print(f"{time.perf_counter() - started:.0f} s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(rows, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

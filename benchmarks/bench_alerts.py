"""How often the nightly regression check cries wolf, and how often it catches a real drop (issue 50).

Simulates nights of a matrix of cells through the decision code the runs use (`scoring.alerts.decide`,
with the plan a night gives each cell: `AlertPlan(rate, cells, position_bias=True)`) and counts:

- false alarms: nights on which any cell alerts while every judge is unchanged (per 30 nights);
- detection: how often a cell whose judge truly dropped by 3, 5 or 10 points alerts the night of the drop,
  and within two nights (the second night's baseline holds the first dropped night, as a real one does).

The judge: each pair is easy (both orders right, 60%), leans to the first shown response (both orders
choose the first: inconsistent and scored 0, 15%) or hard (both orders wrong, 25%); each call re-draws
its verdict at random with probability q, as the bundled stand-in's `--noise q` does. A drop of d points
turns round(d n / (1 - q)) easy pairs wrong, which lowers the expected accuracy by d. Every night each cell
is compared with its previous `baseline_runs` nights, K epochs each.

    python benchmarks/bench_alerts.py                  # the table in docs/alerts.md (a few minutes)
    python benchmarks/bench_alerts.py --nights 200     # quicker, coarser
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from judgebench_flows.scoring.alerts import AlertPlan, Samples, decide, epochs_to_detect

EASY, LEANING = 0.60, 0.15


class Judge:
    """One cell's judge: each pair's label and what the judge chooses for it in each order, when its
    verdict is not re-drawn (True: the pair's A)."""

    def __init__(self, pairs: int, rng: np.random.Generator) -> None:
        self.label_a = rng.random(pairs) < 0.5  # the pair's label is A>B
        kind = rng.random(pairs)
        self.easy = kind < EASY
        leaning = (kind >= EASY) & (kind < EASY + LEANING)
        right = np.stack([self.label_a, self.label_a], axis=1)
        first = np.stack([np.ones(pairs, bool), np.zeros(pairs, bool)], axis=1)  # order 1 shows B first
        self.base = np.where(self.easy[:, None], right, np.where(leaning[:, None], first, ~right))

    def dropped(self, points: float, noise: float, rng: np.random.Generator) -> Judge:
        """The same judge with round(points n / (1 - noise)) of its easy pairs now judged wrong."""
        worse = Judge.__new__(Judge)
        worse.label_a, worse.easy, worse.base = self.label_a, self.easy, self.base.copy()
        easy = np.flatnonzero(self.easy)
        turned = rng.choice(
            easy, size=min(len(easy), round(points / 100 * len(self.easy) / (1 - noise))), replace=False
        )
        worse.base[turned] = ~np.stack([self.label_a[turned]] * 2, axis=1)
        return worse

    def night(self, epochs: int, noise: float, rng: np.random.Generator) -> Samples:
        """One run of `epochs` epochs: per pair and epoch, correct, consistent and its lean to the first."""
        shape = (len(self.easy), epochs, 2)
        drawn = rng.random(shape) < noise
        chooses_a = np.where(drawn, rng.random(shape) < 0.5, self.base[:, None, :])
        right = chooses_a == self.label_a[:, None, None]
        first = np.stack([chooses_a[..., 0], ~chooses_a[..., 1]], axis=-1)
        return Samples(
            correct=right.all(axis=2).astype(float),
            consistent=(chooses_a[..., 0] == chooses_a[..., 1]).astype(float),
            lean=(2 * first.sum(axis=2) - 2).astype(float),
        )


def joined(runs: list[Samples]) -> Samples:
    """Several runs as one baseline: their epochs side by side."""
    return Samples(*(np.concatenate([getattr(r, f) for r in runs], axis=1) for f in ("correct", "consistent", "lean")))


def false_alarms(args: argparse.Namespace, pairs: int, noise: float, epochs: int, seed: int) -> float:
    """Alerting nights per 30 with every judge unchanged."""
    rng = np.random.default_rng(seed)
    plan = AlertPlan(args.rate, args.cells, True)
    judges = [Judge(pairs, rng) for _ in range(args.cells)]
    history = [[j.night(epochs, noise, rng) for _ in range(args.baseline_runs)] for j in judges]
    alerting = 0
    for _ in range(args.nights):
        any_cell = False
        for cell, judge in enumerate(judges):
            tonight = judge.night(epochs, noise, rng)
            any_cell |= decide(tonight, joined(history[cell]), plan).alerted
            history[cell] = [*history[cell][1:], tonight]
        alerting += any_cell
    return 30 * alerting / args.nights


def detection(
    args: argparse.Namespace, pairs: int, noise: float, epochs: int, drop: float, seed: int
) -> tuple[float, float]:
    """The share of drops caught the night they happen, and within two nights."""
    rng = np.random.default_rng(seed)
    plan = AlertPlan(args.rate, args.cells, True)
    first = within_two = 0
    for _ in range(args.trials):
        judge = Judge(pairs, rng)
        history = [judge.night(epochs, noise, rng) for _ in range(args.baseline_runs)]
        worse = judge.dropped(drop, noise, rng)
        night1 = worse.night(epochs, noise, rng)
        caught = decide(night1, joined(history), plan).alerted
        first += caught
        if not caught:
            night2 = worse.night(epochs, noise, rng)
            caught = decide(night2, joined([*history[1:], night1]), plan).alerted
        within_two += caught
    return first / args.trials, within_two / args.trials


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=1000, help="nights simulated per setting (false alarms)")
    parser.add_argument("--trials", type=int, default=1000, help="drops simulated per setting")
    parser.add_argument("--cells", type=int, default=24)
    parser.add_argument("--rate", type=float, default=0.02, help="the night's false-alarm rate (the default's)")
    parser.add_argument("--baseline-runs", type=int, default=5)
    parser.add_argument("--noise", type=float, nargs="+", default=[0.1, 0.2, 0.3])
    parser.add_argument("--pairs", type=int, nargs="+", default=[350, 100])
    parser.add_argument("--epochs", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--drops", type=float, nargs="+", default=[3, 5, 10])
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    started = time.perf_counter()
    rows = []
    header = "pairs  q    K  alarms/30  " + "  ".join(f"{d:g}pt 1st/2nd" for d in args.drops)
    print(f"{args.cells} cells, false-alarm rate {args.rate:g} a night, baseline {args.baseline_runs} runs")
    print(header)
    for pairs in args.pairs:
        for noise in args.noise:
            for epochs in args.epochs:
                seed = args.seed + pairs * 1000 + round(noise * 100) * 10 + epochs
                alarms = false_alarms(args, pairs, noise, epochs, seed)
                caught = {d: detection(args, pairs, noise, epochs, d, seed + 1) for d in args.drops}
                rows.append(
                    {"pairs": pairs, "noise": noise, "epochs": epochs, "alarms_per_30": alarms, "caught": caught}
                )
                cells = "  ".join(f"{caught[d][0]:5.0%}/{caught[d][1]:4.0%}" for d in args.drops)
                print(f"{pairs:5d}  {noise:.1f}  {epochs}  {alarms:9.2f}  {cells}", flush=True)
    plan = AlertPlan(args.rate, args.cells, True)
    for pairs in args.pairs:
        for noise in args.noise:
            within = measured_within(pairs, noise, args.seed)
            needed = epochs_to_detect(0.05, within, pairs, args.baseline_runs, plan.accuracy_alpha)
            print(
                f"estimate --detect 5 on {pairs} pairs at q {noise:.1f} (within-pair variance {within:.3f}): --epochs {needed}"
            )
    print(f"{time.perf_counter() - started:.0f} s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(rows, handle, indent=1, default=str)
    return 0


def measured_within(pairs: int, noise: float, seed: int) -> float:
    """The within-pair variance a run of 8 epochs measures for this judge (what `estimate` reads)."""
    rng = np.random.default_rng(seed)
    c = Judge(pairs, rng).night(8, noise, rng).correct
    m = c.mean(axis=1)
    return float(np.mean(8 / 7 * m * (1 - m)))


if __name__ == "__main__":
    sys.exit(main())

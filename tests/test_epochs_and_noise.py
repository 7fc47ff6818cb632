"""Epochs, the judge's own noise and alerts that know it (issue 50).

The unit tests score hand-made verdicts; the runs judge a small synthetic data file (no benchmark data
needed) against the bundled stand-in, a real HTTP server, with its verdicts re-drawn per call (`noise`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from judgebench_flows.core.identity import batch_line_id, epoch_of, request_key
from judgebench_flows.scoring.alerts import (
    AlertPlan,
    Samples,
    decide,
    detectable_drop,
    epochs_to_detect,
    shift_test,
)
from judgebench_flows.scoring.metrics import Tally, accuracy_of, epoch_accuracies, pair_scores
from judgebench_flows.scoring.noise import as_epochs, measure_noise
from judgebench_flows.scoring.results import jsonl_rows


@dataclass
class V:
    pair_id: str
    order: int
    label: str
    decision_for_pair: str
    epoch: int = 0
    source: str = "mmlu-pro-law"
    category: str = "mmlu-pro"
    status: str = "ok"


def judged(pattern: list[list[str]]) -> list[V]:
    """One pair per row; each row's epochs as two-letter strings of order 0's and order 1's verdicts for
    the pair ("A" for A>B, "B" for B>A); every label is A>B."""
    out = []
    for i, epochs in enumerate(pattern):
        for e, verdicts in enumerate(epochs):
            for order, letter in enumerate(verdicts):
                out.append(V(f"p{i}", order, "A>B", "A>B" if letter == "A" else "B>A", e))
    return out


def test_one_epoch_scores_as_it_always_did_and_epochs_average() -> None:
    one = pair_scores(judged([["AA"], ["AB"], ["BB"]]))
    assert accuracy_of(list(one.values())).model_dump(exclude_none=True) == {
        "accuracy": round(1 / 3, 6),
        "correct_count": 1,
        "valid_samples": 3,
        "total_samples": 3,
        "epochs": 1,
    }
    # three epochs: p0 right in 3, p1 in 1, p2 in 0 -> (3 + 1 + 0) / 9; per epoch 2/3, 1/3, 1/3
    three = list(pair_scores(judged([["AA", "AA", "AA"], ["AB", "AA", "BB"], ["BB", "AB", "BA"]])).values())
    assert accuracy_of(three).accuracy == round(4 / 9, 6) and accuracy_of(three).epochs == 3
    assert epoch_accuracies(three) == [round(1 / 3, 6), round(2 / 3, 6), round(1 / 3, 6)]
    assert math.isclose(np.mean(epoch_accuracies(three)), accuracy_of(three).accuracy, abs_tol=1e-6)


def test_noise_figures_by_hand() -> None:
    # p0 always right (m=1), p1 right in 2 of 4 (m=.5), p2 right in 1 of 4 (m=.25), p3 never (m=0)
    scores = list(
        pair_scores(judged([["AA"] * 4, ["AA", "AA", "AB", "BB"], ["AA", "BB", "BB", "BA"], ["BB"] * 4])).values()
    )
    noise = measure_noise(scores)
    assert noise is not None
    m = np.array([1, 0.5, 0.25, 0])
    within = np.mean(4 / 3 * m * (1 - m))
    assert noise.within_variance == round(within, 6)
    assert noise.between_variance == round(max(0.0, np.var(m, ddof=1) - within / 4), 6)
    assert noise.clustered_se == round(math.sqrt(np.var(m, ddof=1) / 4), 6)
    assert noise.varying_pairs == 0.5
    assert noise.run_to_run_sd == round(math.sqrt(within / 16), 6)
    # p1's order 0 said A,A,A,B: 3 of 6 sample pairs agree; order 1 A,A,B,B: 2 of 6; p0, p3 agree always
    assert noise.self_agreement is not None and 0 < noise.self_agreement < 1
    assert measure_noise(list(pair_scores(judged([["AA"], ["AB"]])).values())) is None  # one epoch: nothing


def test_runs_as_epochs_measure_noise_across_runs() -> None:
    runs = [pair_scores(judged([["AA"], [v]])) for v in ("AA", "BB", "AA")]
    merged = as_epochs(runs)
    noise = measure_noise(merged, source="runs", run_epochs=1)
    assert noise is not None and noise.epochs == 3 and noise.varying_pairs == 0.5
    # one run of one epoch lands sqrt(within / n) from another, not sqrt(within / (n x runs))
    within = np.mean(3 / 2 * np.array([0, 2 / 3]) * (1 - np.array([0, 2 / 3])))
    assert noise.run_to_run_sd == round(math.sqrt(within / 2), 6)
    assert "assumes the judge did not change" in noise.message


def test_epoch_zero_keeps_every_stored_key_and_later_epochs_are_other_calls() -> None:
    messages = [{"role": "user", "content": "judge this"}]
    before = request_key("http://x/v1", "m", messages, {"temperature": 0})
    with epoch_of(0):
        assert request_key("http://x/v1", "m", messages, {"temperature": 0}) == before
    with epoch_of(1):
        first = request_key("http://x/v1", "m", messages, {"temperature": 0})
        line = batch_line_id({"model": "m", "messages": messages})
    with epoch_of(2):
        second = request_key("http://x/v1", "m", messages, {"temperature": 0})
    assert len({before, first, second}) == 3
    assert line != batch_line_id({"model": "m", "messages": messages})


def test_jsonl_has_a_line_per_epoch_that_judgebench_scores_to_our_mean() -> None:
    from judgebench_flows.core.records import JudgmentRecord, Pair

    pairs = [
        Pair(pair_id=f"p{i}", source="mmlu-pro-x", question="q", response_A="a", response_B="b", label="A>B")
        for i in range(2)
    ]
    verdicts = judged([["AA", "AB"], ["BB", "AA"]])
    records = [
        JudgmentRecord(
            pair_id=v.pair_id,
            order=v.order,  # type: ignore[arg-type]
            epoch=v.epoch,
            source=v.source,
            category=v.category,
            label="A>B",
            status="ok",
            decision=v.decision_for_pair if v.order == 0 else ("B>A" if v.decision_for_pair == "A>B" else "A>B"),  # type: ignore[arg-type]
            decision_for_pair=v.decision_for_pair,  # type: ignore[arg-type]
            judge_model="m",
        )
        for v in verdicts
    ]
    rows = list(jsonl_rows(pairs, records, "arena_hard"))
    assert [(r["pair_id"], r["epoch"]) for r in rows] == [("p0", 0), ("p0", 1), ("p1", 0), ("p1", 1)]

    def judgebench_correct(row: dict) -> bool:  # JudgeBench's rule on one line, second verdict flipped back
        first, second = (j["decision"] for j in row["judgments"])
        flipped = {"A>B": "B>A", "B>A": "A>B"}.get(second, second)
        score = sum((d == row["label"]) - (d == "B>A") for d in (first, flipped))
        return score > 0

    per_line = np.mean([judgebench_correct(r) for r in rows])
    assert per_line == Tally.of(records).scores["p0"].correctness / 2 + Tally.of(records).scores["p1"].correctness / 2
    assert "epoch" not in next(iter(jsonl_rows(pairs, [r for r in records if r.epoch == 0], "arena_hard")))


def _samples(rng: np.random.Generator, p: np.ndarray, epochs: int) -> Samples:
    correct = (rng.random((len(p), epochs)) < p[:, None]).astype(float)
    zeros = np.zeros_like(correct)
    return Samples(correct, np.ones_like(correct), zeros)


def test_a_deterministic_rerun_never_alerts_and_a_drop_does() -> None:
    plan = AlertPlan(0.02, 1, True)
    same = Samples(np.ones((50, 1)), np.ones((50, 1)), np.zeros((50, 1)))
    assert decide(same, Samples(np.ones((50, 3)), np.ones((50, 3)), np.zeros((50, 3))), plan).alerted is False
    dropped = same.correct.copy()
    dropped[:8] = 0
    result = decide(
        Samples(dropped, same.consistent, same.lean),
        Samples(np.ones((50, 3)), np.ones((50, 3)), np.zeros((50, 3))),
        plan,
    )
    assert result.accuracy.alerted and result.accuracy.delta == pytest.approx(-8 / 50)


def test_an_unchanged_noisy_judge_alerts_at_the_planned_rate_and_a_real_drop_is_caught() -> None:
    """1,000 runs of one noisy judge (each pair right with its own probability) against its five
    previous runs, at a 5% rate for the accuracy test alone: the share alerting stays near 5%, while
    the judge 10 points worse is caught nearly always."""
    rng = np.random.default_rng(7)
    p = rng.choice([0.05, 0.5, 0.8, 0.95], size=300)
    plan = AlertPlan(0.05, 1, False, sequential=False)
    alerts = 0
    for _ in range(1000):
        base = _samples(rng, p, 5)
        alerts += decide(_samples(rng, p, 1), base, plan).accuracy.alerted
    assert 25 <= alerts <= 80  # 5% of 1,000 is 50; binomial sd ~7
    caught = sum(decide(_samples(rng, p - 0.1, 1), _samples(rng, p, 5), plan).accuracy.alerted for _ in range(100))
    assert caught >= 90


def test_a_position_bias_that_improves_never_alerts() -> None:
    plan = AlertPlan(0.02, 1, True)
    n = 200
    ones = np.ones((n, 1))
    leaning = Samples(ones, np.zeros((n, 1)), np.full((n, 1), 2.0))  # every pair: both verdicts for the first
    fair = Samples(ones, ones, np.zeros((n, 1)))
    assert (
        decide(
            fair, Samples(*(np.repeat(a, 3, axis=1) for a in (leaning.correct, leaning.consistent, leaning.lean))), plan
        ).alerted
        is False
    )
    worse = decide(
        leaning, Samples(*(np.repeat(a, 3, axis=1) for a in (fair.correct, fair.consistent, fair.lean))), plan
    )
    assert worse.position_alerted and not worse.accuracy.alerted


def test_shift_test_leaves_out_pairs_without_samples() -> None:
    nan = math.nan
    test = shift_test(np.array([[1.0], [nan]]), np.array([[1.0, 0.0], [1.0, 1.0]]), alpha=0.05)
    assert test.n_pairs == 1


def test_planning_more_epochs_see_smaller_drops() -> None:
    alpha = AlertPlan(0.02, 24, True).accuracy_alpha
    drops = [detectable_drop(0.1, 350, k, 5, alpha) for k in (1, 2, 4, 8)]
    assert drops == sorted(drops, reverse=True) and drops[0] > 0.05
    needed = epochs_to_detect(0.05, 0.1, 350, 5, alpha)
    assert needed is not None and detectable_drop(0.1, 350, needed, 5, alpha) <= 0.05
    assert needed == 1 or detectable_drop(0.1, 350, needed - 1, 5, alpha) > 0.05


def test_a_night_splits_its_false_alarm_rate_over_its_cells() -> None:
    from judgebench_flows.judging.matrix import parse_matrix

    matrix = parse_matrix(
        {
            "judge_types": ["arena_hard", "vanilla"],
            "models": ["m1", "m2", "m3"],
            "data_files": ["dataset=judgebench,response_model=gpt-4o-2024-05-13.jsonl"],
            "base_url": "http://127.0.0.1:9/v1",
            "options": {"epochs": 2},
        }
    )
    entries = matrix.entries()
    assert {e.config.alert_cells for e in entries} == {6}
    assert {e.config.epochs for e in entries} == {2}


# --- whole runs against the stand-in ------------------------------------------------------------


def _data_file(path: Path, n: int = 12) -> Path:
    rows = [
        {
            "pair_id": f"pair-{i}",
            "original_id": i,
            "source": ["mmlu-pro-law", "livebench-math", "livebench-reasoning", "livecodebench"][i % 4],
            "question": f"Question {i}?",
            "response_A": f"Answer A to {i}",
            "response_B": f"Answer B to {i}",
            "label": "A>B" if i % 3 else "B>A",
        }
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.slow
def test_epochs_pay_per_epoch_cache_per_epoch_and_measure_noise(run_cli, tmp_path) -> None:
    from judgebench_flows.testing.fake_openai import FakeOpenAIServer
    from judgebench_flows.testing.oracle import VERDICTS, oracle_responder

    data = _data_file(tmp_path / "pairs.jsonl")
    pairs = [json.loads(line) for line in data.read_text().splitlines()]
    db = f"sqlite:///{tmp_path}/r.db"

    def run(server: FakeOpenAIServer, *extra: str) -> dict:
        proc = run_cli(
            "run", "--data-path", str(data), "--model", "judge", "--base-url", server.base_url,
            "--db-url", db, "--no-progress", "--no-report", *extra,
        )  # fmt: skip
        assert proc.returncode in (0, 1), proc.stderr
        return json.loads((tmp_path / "results" / "latest" / "results.json").read_text())

    noisy = oracle_responder(pairs, VERDICTS["arena_hard"], accuracy=0.75, noise=0.4, noise_seed=3)
    with FakeOpenAIServer(noisy) as server:
        three = run(server, "--epochs", "3")
        assert server.answered == 12 * 2 * 3
        assert three["epochs"] == 3 and len(three["epoch_accuracy"]) == 3
        assert three["overall_accuracy"]["accuracy"] == pytest.approx(np.mean(three["epoch_accuracy"]), abs=1e-6)
        assert three["noise"]["source"] == "epochs" and three["noise"]["epochs"] == 3
        four = run(server, "--epochs", "4")  # pays only the fourth epoch
        assert server.answered == 12 * 2 * 4
        assert four["usage"]["cached_calls"] == 12 * 2 * 3
        assert "judge's noise" in four["regression"]["message"]
        lines = [
            json.loads(line)
            for line in next((tmp_path / "results" / "latest").glob("*.jsonl")).read_text().splitlines()
        ]
        assert sorted({line["epoch"] for line in lines}) == [0, 1, 2, 3] and len(lines) == 12 * 4

    steady = oracle_responder(pairs, VERDICTS["arena_hard"], accuracy=0.75)
    with FakeOpenAIServer(steady) as server:
        one = run(server, "--epochs", "1", "--seed", "1")
        again = run(server, "--epochs", "3", "--seed", "1")
        # a deterministic judge: the official numbers with any K are the one-epoch numbers
        assert again["overall_accuracy"]["accuracy"] == one["overall_accuracy"]["accuracy"]
        assert again["noise"]["within_variance"] == 0.0


def test_estimate_says_what_the_check_can_detect_and_the_epochs_a_drop_needs(tmp_path) -> None:
    import os
    import subprocess
    import sys

    data = _data_file(tmp_path / "pairs.jsonl", n=40)
    base = [
        sys.executable, "-m", "judgebench_flows.cli.main", "estimate", "--data-path", str(data), "--model", "judge",
        "--base-url", "http://127.0.0.1:9/v1", "--db-url", f"sqlite:///{tmp_path}/r.db",
    ]  # fmt: skip
    env = {**os.environ, "OPENAI_API_KEY": "sk-test", "COLUMNS": "200"}
    proc = subprocess.run(
        [*base, "--epochs", "2", "--detect", "20"], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "detectable: with 2 epochs on 40 pairs" in proc.stdout and "assumed judge noise" in proc.stdout
    needed = int(proc.stdout.split("to detect 20 points: --epochs ")[1].split()[0])
    alpha = AlertPlan().accuracy_alpha
    assert needed == epochs_to_detect(0.2, 0.1, 40, 5, alpha)
    from judgebench_flows.scoring.sequential import nights_to_detect

    nights = nights_to_detect(0.2, 0.1, 40, 2, AlertPlan().sequential_alpha)
    assert nights is not None
    said = "a persistent drop of 20 points at 2 epochs a night is caught 90% of the time within "
    assert f"{said}{nights} night" in " ".join(proc.stdout.split()), proc.stdout
    bad = subprocess.run([*base, "--detect", "0"], capture_output=True, text=True, env=env, timeout=120)
    assert (
        bad.returncode == 2
        and bad.stderr.strip().startswith("error: --detect")
        and len(bad.stderr.strip().splitlines()) == 1
    )


def test_the_python_frames_show_epochs_and_noise() -> None:
    from judgebench_flows.api.evaluation import Evaluation
    from judgebench_flows.core.records import JudgmentRecord
    from judgebench_flows.scoring.run_results import RunResults

    scores = list(pair_scores(judged([["AA", "AB"], ["BB", "AA"]])).values())
    noise = measure_noise(scores)
    record = JudgmentRecord(
        pair_id="p0", order=1, epoch=1, source="s", category="c", label="A>B", status="ok", judge_model="m"
    )
    evaluation = Evaluation.of(RunResults(epochs=2, epoch_accuracy=[0.5, 0.5], noise=noise), [record])
    assert list(evaluation.by_epoch()["accuracy"]) == [0.5, 0.5]
    assert evaluation.judgments()["epoch"].tolist() == [1]
    assert evaluation.noise is not None and evaluation.noise.epochs == 2


def test_the_report_counts_pair_epochs_with_epochs() -> None:
    from judgebench_flows.scoring.report import build_context
    from judgebench_flows.scoring.result_types import SliceAccuracy
    from judgebench_flows.scoring.run_results import RunResults

    four = RunResults(overall_accuracy=SliceAccuracy(accuracy=0.575, correct_count=92, total_samples=40, epochs=4))
    overall = build_context(four, [])["overall"]
    assert (overall.correct, overall.total) == ("92", "160") and "40 pairs x 4 epochs" in overall.unit
    one = RunResults(overall_accuracy=SliceAccuracy(accuracy=0.5, correct_count=20, total_samples=40))
    assert (build_context(one, [])["overall"].total, build_context(one, [])["overall"].unit) == ("40", "pairs")

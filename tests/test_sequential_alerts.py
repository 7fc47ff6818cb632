"""The sequential test (scoring/sequential.py): a CUSUM over a configuration's nights against a frozen
reference, its false-alarm rate planned per night, and the per-night test's batch form (issue 60)."""

from __future__ import annotations

import numpy as np
import pytest

from judgebench_flows.scoring.alerts import AlertPlan, Samples, SampleSums, decide, night_alerted
from judgebench_flows.scoring.sequential import (
    MIN_REFERENCE_NIGHTS,
    REFERENCE_NIGHTS,
    Watch,
    change,
    nights_to_detect,
    step,
    threshold,
)


def _nights(rng: np.random.Generator, p: np.ndarray, batch: int, epochs: int = 1) -> np.ndarray:
    """A batch of nights of a judge right on pair i with probability p_i: (batch, pairs, epochs)."""
    return (rng.random((batch, len(p), epochs)) < p[None, :, None]).astype(float)


def test_the_batch_form_of_the_per_night_test_decides_as_decide_does() -> None:
    rng = np.random.default_rng(3)
    plan = AlertPlan(0.3, 1, True)  # a generous rate: both outcomes occur
    outcomes = set()
    for _ in range(30):
        p = rng.uniform(0.2, 1.0, size=40)
        shift = rng.choice([0.0, 0.3])
        tonight = Samples(
            _nights(rng, p - shift, 1)[0], _nights(rng, p, 1)[0], rng.integers(-2, 3, (40, 1)).astype(float)
        )
        base = Samples(_nights(rng, p, 1, 5)[0], _nights(rng, p, 1, 5)[0], rng.integers(-2, 3, (40, 5)).astype(float))
        one = decide(tonight, base, plan).alerted
        batch = night_alerted(SampleSums.of(tonight), SampleSums.of(base), plan)
        assert bool(batch) == one
        outcomes.add(one)
    assert outcomes == {True, False}


def test_the_plan_splits_a_cells_share_between_the_tests() -> None:
    plan = AlertPlan(0.02, 4, True)
    assert plan.accuracy_alpha + plan.sequential_alpha + 2 * plan.position_alpha == pytest.approx(0.005)
    today = AlertPlan(0.02, 4, True, sequential=False)
    assert today.sequential_alpha == 0 and today.accuracy_alpha == pytest.approx(0.0025)


def test_the_threshold_grows_with_the_references_error_and_a_smaller_rate() -> None:
    assert threshold(1e-3, 0.1) < threshold(1e-3, 0.3) < threshold(1e-3, 0.5)
    assert threshold(1e-3, 0.2) < threshold(1e-4, 0.2)


def test_an_unchanged_judge_alarms_about_at_the_planned_rate() -> None:
    """2,000 histories of 40 nights of an unchanged noisy judge at 1% a night: the alarms per night
    stay at or below plan (the reference's error included in the threshold)."""
    rng = np.random.default_rng(11)
    p = rng.choice([0.05, 0.5, 0.85, 0.97], size=150)
    watch = Watch.start((2000,), 150)
    alarms = 0
    for _ in range(40):
        before = watch.flagged
        watch, _night = step(watch, _nights(rng, p, 2000), 0.01)
        fresh = watch.flagged & ~before
        alarms += int(fresh.sum())
        watch = watch.restarted(fresh)
    per_night = alarms / (2000 * (40 - MIN_REFERENCE_NIGHTS))
    assert per_night <= 0.012
    assert per_night >= 0.002  # not a test that never alarms


def test_a_persistent_drop_is_caught_named_since_its_first_night_and_sized() -> None:
    rng = np.random.default_rng(5)
    p = rng.choice([0.05, 0.8, 0.95], size=300)
    watch = Watch.start((500,), 300)
    for _ in range(REFERENCE_NIGHTS):
        watch, _night = step(watch, _nights(rng, p, 500), 1e-3)
    quiet = ~watch.flagged  # the few that alarmed while unchanged (about 1e-3 a night) are left out
    assert quiet.mean() >= 0.95 and (watch.reference_nights[quiet] >= MIN_REFERENCE_NIGHTS).all()
    for _ in range(7):
        watch, _night = step(watch, _nights(rng, np.clip(p - 0.08, 0, 1), 500), 1e-3)
    assert watch.flagged[quiet].mean() >= 0.9
    caught = watch.flagged & quiet
    # the change began on night 20 (the 21st): the suspicion's first night is at or after it
    assert (watch.since[caught] >= REFERENCE_NIGHTS - 1).mean() >= 0.9
    delta, se = change(watch)
    truth = float(np.mean(np.clip(p - 0.08, 0, 1) - p))  # pairs at 5% lose only 5 points
    inside = (delta - 1.96 * se <= truth) & (truth <= delta + 1.96 * se)
    assert inside[caught].mean() >= 0.85


def test_a_flag_stays_until_a_reset_and_a_reset_starts_afresh() -> None:
    rng = np.random.default_rng(2)
    p = np.full(200, 0.9)
    watch = Watch.start((1,), 200)
    for _ in range(10):
        watch, _night = step(watch, _nights(rng, p, 1), 1e-3)
    for _ in range(3):
        watch, _night = step(watch, _nights(rng, p - 0.4, 1), 1e-3)
    assert watch.flagged.all()
    flagged_at = int(watch.alarm[0])
    for _ in range(3):  # back to normal: still flagged, the alarm night kept
        watch, _night = step(watch, _nights(rng, p, 1), 1e-3)
    assert watch.flagged.all() and int(watch.alarm[0]) == flagged_at
    fresh = watch.restarted(np.array([True]))
    assert not fresh.flagged.any() and int(fresh.reference_nights[0]) == 0


def test_planning_nights_to_detect_fall_with_the_drop_and_the_epochs() -> None:
    slow = nights_to_detect(0.03, 0.1, 350, 1, 2e-4)
    quick = nights_to_detect(0.05, 0.1, 350, 1, 2e-4)
    quicker = nights_to_detect(0.05, 0.1, 350, 3, 2e-4)
    assert quick is not None and quicker is not None
    assert slow is None or slow > quick
    assert quicker <= quick


# --- whole runs against the stand-in ------------------------------------------------------------


def _pairs_file(path, n: int = 40):
    import json

    sources = ["mmlu-pro-law", "livebench-math", "livebench-reasoning", "livecodebench"]
    rows = [
        {
            "pair_id": f"pair-{i}",
            "original_id": i,
            "source": sources[i % 4],
            "question": f"Question {i}?",
            "response_A": f"Answer A to {i}",
            "response_B": f"Answer B to {i}",
            "label": "A>B" if i % 3 else "B>A",
        }
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path, rows


@pytest.mark.slow
def test_a_change_is_flagged_since_its_night_stays_flagged_and_a_reset_starts_afresh(run_cli, tmp_path) -> None:
    """Real runs through the bundled stand-in: three nights of a steady judge, then one that gets the
    math pairs wrong. The sequential test flags it that night (since that run, by how much, on which
    category), says so again the next night without a new alarm, and after `judgebench alerts reset`
    starts a fresh reference."""
    import json

    from judgebench_flows.testing.fake_openai import FakeOpenAIServer, auto_oracle

    data, pairs = _pairs_file(tmp_path / "pairs.jsonl", 80)
    db = f"sqlite:///{tmp_path}/r.db"
    math_pairs = [p for p in pairs if p["source"] in ("livebench-math", "livebench-reasoning")]
    steady = auto_oracle(pairs, 0.9, seed=1)
    wrong_on_math = auto_oracle(math_pairs, 0.0, seed=1)

    judge = {"worse": False}  # one endpoint (its address is part of the configuration), two judges

    def answer(body: dict) -> str:
        text = json.dumps(body)
        on_math = any(f"Question {p['original_id']}?\\n" in text for p in math_pairs)
        return wrong_on_math(body) if judge["worse"] and on_math else steady(body)

    def night(server: FakeOpenAIServer, number: int) -> tuple[int, dict]:
        proc = run_cli(
            "run", "--data-path", str(data), "--model", "judge", "--base-url", server.base_url, "--db-url", db,
            "--no-progress", "--no-report", "--no-cache",
        )  # fmt: skip
        assert proc.returncode in (0, 1), proc.stderr
        return proc.returncode, json.loads((tmp_path / "results" / "latest" / "results.json").read_text())

    server = FakeOpenAIServer(answer)
    server.start()
    try:
        _the_nights(night, server, judge, run_cli, db)
    finally:
        server.stop()


def _the_nights(night, server, judge: dict, run_cli, db: str) -> None:
    for number in range(3):
        code, results = night(server, number)
        assert code == 0
    quiet = results["regression"]["sequential"]
    assert quiet["flagged"] is False and quiet["nights"] == 3 and quiet["nights_to_detect"] is not None
    judge["worse"] = True
    code, flagged = night(server, 3)
    check = flagged["regression"]["sequential"]
    assert code == 1 and check["flagged"] and check["new"], check
    assert check["since_run_id"] == flagged["run"]["run_id"] == check["flagged_run_id"]
    assert check["ci_low"] <= check["delta"] <= check["ci_high"] < 0
    assert sorted(check["worse_categories"]) == ["livebench-math", "livebench-reasoning"]
    assert "sequential test: accuracy changed by" in flagged["regression"]["message"]
    code, later = night(server, 4)
    still = later["regression"]["sequential"]
    assert still["flagged"] and not still["new"] and still["flagged_run_id"] == flagged["run"]["run_id"]
    assert "still flagged until `judgebench alerts reset" in still["message"]
    config_key = flagged["run"]["config_key"]
    bad = run_cli("alerts", "reset", "no-such-config", "--db-url", db)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    reset = run_cli("alerts", "reset", config_key[:10], "--db-url", db)
    assert reset.returncode == 0 and "its flag cleared" in reset.stdout, reset.stderr
    code, fresh = night(server, 5)
    after = fresh["regression"]["sequential"]
    assert after["flagged"] is False and after["nights"] == 1 and after["threshold"] is None


@pytest.mark.slow
def test_a_drift_in_the_served_build_starts_a_new_reference_and_clears_the_flag(run_cli, tmp_path) -> None:
    """Drift marks a boundary (issue 60): three steady nights, a night that gets the math pairs wrong
    (flagged), then the endpoint serves a new build (a new system_fingerprint behind the same name). The
    drifted night is still tested against the old reference (its drift is known once it has run) and
    says the flag; from the next night the drifted run starts the new reference: the flag raised before
    it is gone and the reference fills afresh."""
    import json

    from judgebench_flows.testing.fake_openai import FakeOpenAIServer, auto_oracle

    data, pairs = _pairs_file(tmp_path / "pairs.jsonl", 80)
    db = f"sqlite:///{tmp_path}/r.db"
    math_pairs = [p for p in pairs if p["source"] in ("livebench-math", "livebench-reasoning")]
    steady, wrong_on_math = auto_oracle(pairs, 0.9, seed=1), auto_oracle(math_pairs, 0.0, seed=1)
    judge = {"worse": False}

    def answer(body: dict) -> str:
        on_math = any(f"Question {p['original_id']}?\\n" in json.dumps(body) for p in math_pairs)
        return wrong_on_math(body) if judge["worse"] and on_math else steady(body)

    def night() -> dict:
        proc = run_cli(
            "run", "--data-path", str(data), "--model", "judge", "--base-url", server.base_url, "--db-url", db,
            "--no-progress", "--no-report", "--no-cache",
        )  # fmt: skip
        assert proc.returncode in (0, 1), proc.stderr
        return json.loads((tmp_path / "results" / "latest" / "results.json").read_text())["regression"]

    with FakeOpenAIServer(answer, system_fingerprint="fp_1111") as server:
        for _ in range(3):
            night()
        judge["worse"] = True
        assert night()["sequential"]["new"]
        server.configure(system_fingerprint="fp_2222")
        drifted = night()
        assert drifted["sequential"]["flagged"] and not drifted["sequential"]["new"]
        after = night()["sequential"]
    assert not after["flagged"] and after["nights"] == 2 and after["threshold"] is None, after
    assert "a new reference since the served build drifted" in after["message"]


def test_the_nights_summary_says_each_cells_nights_to_detect_and_its_flag() -> None:
    from judgebench_flows.scoring.cell_outcome import CellOutcome
    from judgebench_flows.views.night_summary import summary_markdown

    cells = [
        CellOutcome(
            name="a",
            status="completed",
            result_path="a.json",
            detectable_drop=0.08,
            alert_rate=0.02,
            nights_to_detect=3,
        ),
        CellOutcome(
            name="b",
            status="regressed",
            result_path="b.json",
            detectable_drop=0.08,
            alert_rate=0.02,
            flagged="changed by -6.0",
        ),
    ]
    page = summary_markdown(cells)
    assert "within (nights): a 3." in page
    assert "**Flagged**" in page and "- b: changed by -6.0" in page

"""Comparisons people can trust: the exact McNemar test, Holm's correction, `compare`'s verdicts in words
and the leaderboard's significance tiers, each checked against a separate, deliberately plain computation.

JudgeBench's published judgments are not in ../shared/judgebench (no outputs/), so the recorded judgments
here are seeded synthetic files in JudgeBench's outputs/ shape over the 350 real GPT-4o pairs (and the
Claude pairs): seven judges of different skill over every pair, plus one file with missing lines.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from fractions import Fraction

import pytest

from tests.conftest import CLAUDE_FILE, GPT4O_FILE, SHARED, load_jsonl, make_repo, requires_shared
from tests.test_leaderboard import category, output_name, swap

# ---------------------------------------------------------------- plain references


def plain_mcnemar(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar: the binomial(n, 1/2) probability of a split at least as uneven, each
    tail summed from the pmf built up term by term in exact fractions."""
    n = a_only + b_only
    if n == 0:
        return 1.0
    pmf = [Fraction(1, 2**n)]
    for k in range(n):
        pmf.append(pmf[-1] * (n - k) / (k + 1))
    low = min(a_only, b_only)
    tail = sum(pmf[: low + 1]) + sum(pmf[n - low :]) if 2 * low < n else Fraction(1)
    return float(min(Fraction(1), tail))


def pair_correct(row: dict) -> bool:
    """JudgeBench's compute_final_metrics for one outputs line."""
    decisions = [None if j is None else j["decision"] for j in row["judgments"]]
    if len(decisions) == 1:
        return decisions[0] == row["label"]
    counter = 0
    for decision in (decisions[0], swap(decisions[1])):
        counter += (decision == row["label"]) - (decision == swap(row["label"]))
    return counter > 0


def plain_tiers(files: list[list[dict]], alpha: float = 0.05) -> list[int]:
    """Tiers of files (all over the same pairs), best accuracy first: each compared with its tier's best."""
    correct = [{r["pair_id"]: pair_correct(r) for r in rows} for rows in files]
    order = sorted(range(len(files)), key=lambda i: -sum(correct[i].values()))
    tests = len(files) - 1
    tiers, tier, leader = {}, 1, order[0]
    tiers[leader] = 1
    for i in order[1:]:
        a_only = sum(1 for p in correct[leader] if correct[leader][p] and not correct[i][p])
        b_only = sum(1 for p in correct[leader] if correct[i][p] and not correct[leader][p])
        if plain_mcnemar(a_only, b_only) * tests < alpha and sum(correct[i].values()) < sum(correct[leader].values()):
            tier, leader = tier + 1, i
        tiers[i] = tier
    return [tiers[i] for i in range(len(files))]


# ---------------------------------------------------------------- stats


@pytest.mark.parametrize(("a_only", "b_only"), [(0, 0), (3, 0), (10, 2), (2, 10), (7, 7), (40, 61), (150, 190)])
def test_exact_mcnemar_equals_the_binomial_tail(a_only: int, b_only: int) -> None:
    from judgebench_flows.scoring.stats import exact_binomial_two_sided, mcnemar_exact

    assert exact_binomial_two_sided(a_only, a_only + b_only) == pytest.approx(plain_mcnemar(a_only, b_only), rel=1e-12)
    a = {f"p{i}": 1.0 for i in range(a_only)} | {f"q{i}": 0.0 for i in range(b_only)} | {"both": 1.0, "neither": 0.0}
    b = {f"p{i}": 0.0 for i in range(a_only)} | {f"q{i}": 1.0 for i in range(b_only)} | {"both": 1.0, "neither": 0.0}
    result = mcnemar_exact(a, {**b, "only-in-b": 1.0})  # a pair one side lacks is not compared
    assert (result.discordant_a_only, result.discordant_b_only) == (a_only, b_only)
    assert result.p_value == pytest.approx(plain_mcnemar(a_only, b_only), rel=1e-12)


def test_known_mcnemar_values_and_holm() -> None:
    from judgebench_flows.scoring.stats import exact_binomial_two_sided, holm_adjusted

    assert exact_binomial_two_sided(3, 3) == 0.25  # 3 pairs one way, none the other: 2 / 8
    assert exact_binomial_two_sided(10, 12) == pytest.approx(2 * (1 + 12 + 66) / 4096)  # 0.0386
    assert exact_binomial_two_sided(0, 0) == 1.0
    # Holm: sorted p 0.01, 0.02, 0.03, 0.5 times 4, 3, 2, 1, made monotone
    assert holm_adjusted([0.03, 0.5, 0.01, 0.02]) == pytest.approx([0.06, 0.5, 0.04, 0.06])
    assert holm_adjusted([]) == []


# ---------------------------------------------------------------- compare


def _save_run(engine, run_id: str, pairs: list[dict], correct: set[str], started: datetime) -> None:
    """A finished run whose judge is right (both orders) on `correct` and wrong on the rest."""
    from judgebench_flows.data import db

    db.save_run(
        engine,
        run_id=run_id,
        config_key="cfg",
        judge_type="arena_hard",
        model="judge",
        data_file=GPT4O_FILE,
        status="completed",
        started=started,
        finished=started + timedelta(minutes=1),
        n_pairs=len(pairs),
        config_json="{}",
        results_json="{}",
    )
    rows = []
    for pair in pairs:
        decision = pair["label"] if pair["pair_id"] in correct else swap(pair["label"])
        for order in (0, 1):
            rows.append(
                {
                    "run_id": run_id,
                    "pair_id": pair["pair_id"],
                    "order_index": order,
                    "source": pair["source"],
                    "category": category(pair["source"]),
                    "label": pair["label"],
                    "status": "ok",
                    "decision": swap(decision) if order else decision,
                    "decision_for_pair": decision,
                }
            )
    db.save_judgments(engine, rows)


@requires_shared
def test_compare_mcnemar_and_per_category_verdicts(tmp_path) -> None:
    """B fixes 30 MMLU-Pro pairs A got wrong; elsewhere each run gets 3 pairs the other misses. The exact
    test and its counts equal the plain ones; after Holm only MMLU-Pro is "B better"."""
    from judgebench_flows.data import db
    from judgebench_flows.scoring.compare import compare_runs

    pairs = load_jsonl(SHARED / "data" / GPT4O_FILE)
    rng = random.Random(11)
    correct_a = {p["pair_id"] for p in pairs if rng.random() < 0.7}
    mmlu_wrong = [p["pair_id"] for p in pairs if category(p["source"]) == "mmlu-pro" and p["pair_id"] not in correct_a]
    correct_b = correct_a | set(mmlu_wrong[:30])
    for cat in ("livebench-reasoning", "livebench-math", "livecodebench"):
        ids = [p["pair_id"] for p in pairs if category(p["source"]) == cat]
        right, wrong = [i for i in ids if i in correct_a], [i for i in ids if i not in correct_a]
        correct_b = (correct_b - set(right[:3])) | set(wrong[:3])
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    engine = db.open_database(url)
    t0 = datetime(2026, 11, 20, tzinfo=timezone.utc)
    _save_run(engine, "a" * 32, pairs, correct_a, t0)
    _save_run(engine, "b" * 32, pairs, correct_b, t0 + timedelta(hours=1))
    engine.dispose()

    comparison = compare_runs(url, "a" * 32, "b" * 32).model_dump()
    a_only, b_only = len(correct_a - correct_b), len(correct_b - correct_a)
    assert (a_only, b_only) == (9, 39)
    assert comparison["mcnemar"]["discordant_a_only"] == a_only
    assert comparison["mcnemar"]["discordant_b_only"] == b_only
    assert comparison["mcnemar"]["p_value"] == pytest.approx(plain_mcnemar(a_only, b_only), rel=1e-12)
    slices = {s["name"]: s for s in comparison["slices"]}
    assert slices["overall"]["verdict"] == "B better"
    assert slices["mmlu-pro"]["verdict"] == "B better"
    assert slices["mmlu-pro"]["p_value"] == pytest.approx(plain_mcnemar(0, 30))
    for cat in ("livebench-reasoning", "livebench-math", "livecodebench"):
        assert slices[cat]["p_value"] == 1.0 and slices[cat]["verdict"] == "within noise", cat
        assert slices[cat]["ci_low"] < 0 < slices[cat]["ci_high"]
    raw = [slices[c]["p_value"] for c in ("mmlu-pro", "livebench-reasoning", "livebench-math", "livecodebench")]
    assert slices["mmlu-pro"]["p_adjusted"] == pytest.approx(min(1.0, 4 * min(raw)))
    assert slices["mmlu-pro"]["ci_low"] > 0

    result = subprocess.run(
        [sys.executable, "-m", "judgebench_flows.cli.main", "compare", "a" * 8, "b" * 8]
        + ["--db-url", url, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["mcnemar"] == comparison["mcnemar"] and document["slices"] == json.loads(
        json.dumps(comparison["slices"])
    )
    table = subprocess.run(
        [sys.executable, "-m", "judgebench_flows.cli.main", "compare", "a" * 8, "b" * 8, "--db-url", url],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**__import__("os").environ, "COLUMNS": "120"},
    )
    assert table.returncode == 0, table.stderr
    p_text = f"{plain_mcnemar(a_only, b_only):.3g}"
    assert f"exact McNemar: {a_only} pairs right only in A, {b_only} right only in B, p = " in table.stdout
    assert ("<0.0001" if plain_mcnemar(a_only, b_only) < 1e-4 else p_text) in table.stdout
    assert "B better" in table.stdout and "within noise" in table.stdout


# ---------------------------------------------------------------- leaderboard tiers

SKILLS = {  # judge model -> chance a pair is judged right in both orders
    "judge-top": 0.80,
    "judge-close": 0.78,
    "judge-near": 0.755,
    "judge-mid": 0.64,
    "judge-mid2": 0.62,
    "judge-low": 0.50,
    "judge-floor": 0.47,
}


def skilled_file(pairs: list[dict], model: str, skill: float, seed: int) -> list[dict]:
    """Both orders right with chance `skill`; otherwise both wrong, or one tie/null/order-flip (wrong)."""
    rng = random.Random(seed)
    rows = []
    for pair in pairs:
        right, wrong = pair["label"], swap(pair["label"])
        roll = rng.random()
        if roll < skill:
            pair_decisions = [right, right]
        else:
            pair_decisions = rng.choice([[wrong, wrong], [right, wrong], ["A=B", wrong], [None, wrong]])
        judgments = [
            None
            if d is None
            else {
                "judgment": {"judge_model": model, "prompt": "p", "response": "r"},
                "decision": swap(d) if order else d,  # as recorded: the swapped order's own labels
            }
            for order, d in enumerate(pair_decisions)
        ]
        rows.append({**pair, "judge_name": "arena_hard", "judgments": judgments})
    return rows


@pytest.fixture(scope="module")
def seven(tmp_path_factory) -> dict:
    gpt4o = load_jsonl(SHARED / "data" / GPT4O_FILE)
    claude = load_jsonl(SHARED / "data" / CLAUDE_FILE)
    files = {
        output_name(GPT4O_FILE, "arena_hard", model): skilled_file(gpt4o, model, skill, seed)
        for seed, (model, skill) in enumerate(SKILLS.items(), 100)
    }
    partial = skilled_file(gpt4o[:300], "judge-partial", 0.9, 7)  # 50 lines missing: never compared
    files[output_name(GPT4O_FILE, "arena_hard", "judge-partial")] = partial
    files[output_name(CLAUDE_FILE, "arena_hard", "judge-claude")] = skilled_file(claude, "judge-claude", 0.7, 8)
    path = tmp_path_factory.mktemp("seven") / "JudgeBench"
    sha = make_repo(path, {name: "".join(json.dumps(r) + "\n" for r in rows) for name, rows in files.items()})
    return {"url": f"file://{path}", "sha": sha, "files": files}


@requires_shared
def test_tiers_equal_a_plain_computation(seven, tmp_path) -> None:
    from judgebench_flows.data import db
    from judgebench_flows.scoring.leaderboard import LeaderboardSettings, build_leaderboard
    from judgebench_flows.scoring.leaderboard_report import render_leaderboard
    from judgebench_flows.scoring.leaderboard_text import markdown
    from tests.test_leaderboard import save_run

    # one of our runs over every pair is compared with the published rows; one on 20 pairs is not
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    engine = db.open_database(url)
    gpt4o = load_jsonl(SHARED / "data" / GPT4O_FILE)
    t0 = datetime(2026, 11, 20, tzinfo=timezone.utc)
    ours = save_run(engine, "f" * 32, "cfg-full", GPT4O_FILE, gpt4o, t0, seed=3, model="our-judge")
    for row, pair in zip(ours, gpt4o, strict=True):
        row["pair_id"] = pair["pair_id"]
    save_run(engine, "5" * 32, "cfg-20", GPT4O_FILE, gpt4o[:20], t0, seed=4, model="our-subset")
    engine.dispose()
    board = build_leaderboard(
        LeaderboardSettings(
            repo_url=seven["url"],
            ref=seven["sha"],
            cache_dir=str(tmp_path / "cache"),
            db_url=url,
            bootstrap_resamples=200,
        )
    )
    document = json.loads(board.model_dump_json())
    gpt = [e for e in document["entries"] if e["group"] == "gpt-4o-2024-05-13"]
    full = {e["judge_model"]: e for e in gpt if e["judge_model"] in [*SKILLS, "our-judge"]}
    assert len(full) == 8
    names = [*SKILLS, "our-judge"]
    expected = plain_tiers([seven["files"][output_name(GPT4O_FILE, "arena_hard", m)] for m in SKILLS] + [ours])
    assert [full[m]["tier"] for m in names] == expected
    subset = next(e for e in document["entries"] if e["judge_model"] == "our-subset")
    assert subset["rank"] is None and subset["tier"] is None
    assert len(set(expected)) >= 2 and any(expected.count(t) >= 2 for t in set(expected)), expected
    partial = next(e for e in gpt if e["judge_model"] == "judge-partial")
    assert partial["rank"] == 1 and partial["tier"] is None  # best accuracy, but on 300 of the 350 pairs
    claude = next(e for e in document["entries"] if e["judge_model"] == "judge-claude")
    assert claude["tier"] == 1  # its own table: never compared with the GPT-4o rows
    # a row's test is against the best row of the tier it was compared in, Bonferroni over 7 tests
    for entry in full.values():
        test = entry.get("tier_test")
        if test:
            assert test["p_adjusted"] == pytest.approx(min(1.0, 7 * test["p_value"]))
            assert full[test["against"]["judge_model"]]["tier"] in (entry["tier"], entry["tier"] - 1)
    assert "_correct" not in board.model_dump_json()
    assert document["tiers"]["alpha"] == 0.05
    assert "| tier |" in markdown(board)
    html = render_leaderboard(board)
    assert ">tier</th>" in html


def _row(name: str, accuracy: float, correct: dict[str, float]):
    from judgebench_flows.scoring.leaderboard import Entry

    entry = Entry.model_validate(
        {"overall_accuracy": {"accuracy": accuracy}, "judge_name": name, "origin": "run"}
        | {"response_model": "m", "dataset": "judgebench", "judge_model": "j"}
    )
    entry._correct = dict(correct)
    return entry


def test_ties_never_split_and_one_row_is_tier_one() -> None:
    from judgebench_flows.scoring.leaderboard import assign_tiers

    same = {f"p{i}": float(i % 2) for i in range(200)}
    rows = [_row(n, 0.5, same) for n in "abc"]
    assign_tiers(rows)
    assert [r.tier for r in rows] == [1, 1, 1]
    only = [_row("x", 0.9, same)]
    assign_tiers(only)
    assert only[0].tier == 1


@requires_shared
def test_compare_never_says_regression_beside_within_noise_and_shows_invalid_verdicts(tmp_path) -> None:
    """A run whose every verdict is invalid, against one right on all 4 pairs: -100 points, but 4
    discordant pairs are too few for the exact test (p = 0.125): one verdict, "within noise", no
    "(regression)"; the invalid verdicts are named beside the test on the pairs both judged validly."""
    from judgebench_flows.data import db
    from judgebench_flows.scoring.compare import compare_runs

    pairs = load_jsonl(SHARED / "data" / GPT4O_FILE)[:4]
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    engine = db.open_database(url)
    t0 = datetime(2026, 11, 20, tzinfo=timezone.utc)
    _save_run(engine, "a" * 32, pairs, {p["pair_id"] for p in pairs}, t0)
    _save_run(engine, "b" * 32, pairs, set(), t0 + timedelta(hours=1))
    with engine.begin() as connection:  # B's verdicts: unreadable answers, not wrong ones
        connection.exec_driver_sql(
            "UPDATE judgments SET status = 'invalid', decision = '', decision_for_pair = '' WHERE run_id = ?",
            ("b" * 32,),
        )
    engine.dispose()

    comparison = compare_runs(url, "a" * 32, "b" * 32)
    assert comparison.bootstrap is not None and comparison.bootstrap.delta == -1.0
    assert comparison.slices[0].verdict == "within noise" and not comparison.bootstrap.regressed
    assert (comparison.invalid_a_only, comparison.invalid_b_only, comparison.valid_pairs) == (0, 4, 0)
    table = subprocess.run(
        [sys.executable, "-m", "judgebench_flows.cli.main", "compare", "a" * 8, "b" * 8, "--db-url", url],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**__import__("os").environ, "COLUMNS": "80"},
    )
    assert table.returncode == 0, table.stderr
    said = " ".join(table.stdout.split())
    assert "(regression)" not in said and "within noise" in said
    assert "verdicts invalid in one run only: 0 pairs in A, 4 in B (counted as wrong above)" in said, said
    assert "no pair was judged validly by both" in said
    assert max(len(line) for line in table.stdout.splitlines()) <= 80, table.stdout

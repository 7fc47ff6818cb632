"""`judgebench leaderboard --benchmark llmbar` and `--across` on the real LLMBar data.

LLMBar's published result.json files (GPT-4 and ChatGPT, every strategy, all five subsets) are the
published rows: scored by LLMBar's rule, each row's accuracy must be the correct_average of the
statistics.json beside it. Our runs in the results database are listed on their own benchmark's board
only. The view across benchmarks is checked against a plainly written Kendall's tau-b.
"""

from __future__ import annotations

import csv
import io
import json
import random
import shutil
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import GPT4O_FILE, git, requires_shared
from tests.test_benchmarks import LLMBAR, SUBSET_SIZES, requires_llmbar
from tests.test_leaderboard import published, save_run  # noqa: F401 - `published`: a fixture

pytestmark = requires_llmbar
STRATEGIES = 27  # GPT-4's 15 and ChatGPT's 12 evaluators publish a result.json for every subset
ADVERSARIAL = ("Adversarial/Neighbor", "Adversarial/GPTInst", "Adversarial/GPTOut", "Adversarial/Manual")


@pytest.fixture(scope="module")
def llmbar_published(tmp_path_factory) -> dict:
    """A git repository of LLMBar's Dataset/ with its published result.json and statistics.json files."""
    path = tmp_path_factory.mktemp("llmbar") / "LLMBar"
    shutil.copytree(LLMBAR / "Dataset", path / "Dataset")
    git("init", "-q", "-b", "main", cwd=path)
    git("add", "-A", cwd=path)
    git("commit", "-q", "-m", "data", cwd=path)
    sha = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=path, capture_output=True, text=True, check=True
    ).stdout.strip()
    return {"url": str(path), "sha": sha}


def settings(repo: dict, tmp_path: Path, db_url: str | None = None, **more):
    from judgebench_flows.scoring.leaderboard import LeaderboardSettings

    return LeaderboardSettings(
        benchmark="llmbar",
        repo_url=repo["url"],
        ref=repo["sha"],
        cache_dir=str(tmp_path / "cache"),
        db_url=db_url or f"sqlite:///{tmp_path / 'none.db'}",
        **more,
    )


def statistics(subset: str, evaluator: str, strategy: str) -> dict:
    path = LLMBAR / "Dataset" / "LLMBar" / subset / "evaluators" / evaluator / strategy / "statistics.json"
    return json.loads(path.read_text())


def percent(text: str) -> float:
    """LLMBar's "95.5%" (or "29.347826086956523%") as a fraction."""
    return float(text.rstrip("%")) / 100


def test_every_published_row_equals_llmbars_correct_average(llmbar_published, tmp_path) -> None:
    from judgebench_flows.scoring.leaderboard import build_leaderboard
    from judgebench_flows.scoring.leaderboard_text import markdown

    board = build_leaderboard(settings(llmbar_published, tmp_path, bootstrap_resamples=100))
    assert board.benchmark == "llmbar" and board.categories == ["Natural", "Adversarial"]
    assert board.benchmark_pairs == SUBSET_SIZES
    assert len(board.entries) == 5 * STRATEGIES and not board.unread
    checked = 0
    for entry in board.entries:
        assert entry.origin == "published" and entry.file and entry.evaluator in ("GPT-4", "ChatGPT")
        strategy = entry.judge_name.removeprefix("llmbar:")
        official = statistics(entry.subset, entry.evaluator, strategy)
        assert entry.overall_accuracy.accuracy == pytest.approx(percent(official["correct_average"]), abs=1e-6), (
            entry.file
        )
        assert entry.pairs == SUBSET_SIZES[entry.subset] == int(official["correct_False"].split(" / ")[1].split()[0])
        # both orders' right verdicts, as LLMBar counts them
        right = int(official["correct_False"].split(" / ")[0]) + int(official["correct_True"].split(" / ")[0])
        assert entry.overall_accuracy.correct_count == right
        low, high = entry.overall_accuracy.ci_low, entry.overall_accuracy.ci_high
        assert low <= entry.overall_accuracy.accuracy <= high
        checked += 1
    assert checked == 135
    # grouped by subset in LLMBar's order, ranked within each, best first
    groups = list(dict.fromkeys(e.group for e in board.entries))
    assert groups == list(SUBSET_SIZES)
    for group in groups:
        members = [e for e in board.entries if e.group == group]
        accuracies = [e.overall_accuracy.accuracy for e in members]
        assert accuracies == sorted(accuracies, reverse=True) and members[0].rank == members[0].tier == 1
    assert any("statistics.json" in note and "Falcon" in note for note in board.notes)
    # each judge's averages as LLMBar's paper reports them: Adversarial, the mean of the four subsets
    averages = {(a.judge_name, a.judge_model): a for a in board.averages or []}
    assert len(averages) == STRATEGIES
    vanilla = averages[("llmbar:Vanilla", "gpt-3.5-turbo-0613")]
    assert vanilla.averages["Natural"] == pytest.approx(
        percent(statistics("Natural", "ChatGPT", "Vanilla")["correct_average"]), abs=1e-6
    )
    adversarial = np.mean([percent(statistics(s, "ChatGPT", "Vanilla")["correct_average"]) for s in ADVERSARIAL])
    assert vanilla.averages["Adversarial"] == pytest.approx(adversarial, abs=1e-6)
    best = board.averages[0]
    assert best.judge_model == "gpt-4-0613"  # GPT-4's strategies lead on the adversarial sets, as in the paper
    text = markdown(board)  # the flow's artifact
    assert text.startswith("LLMBar ") and "### Subset Adversarial/GPTInst" in text and "mmlu-pro" not in text
    assert (
        "### Averages as LLMBar's paper reports them" in text and text.count("| llmbar:") == 5 * STRATEGIES + STRATEGIES
    )


def llmbar_run(engine, run_id: str, subset: str, model: str, skill: float, started: datetime, seed: int) -> float:
    """An LLMBar run of ours on a whole subset, stored as the flow stores it; its accuracy by LLMBar's rule
    (each order's verdict scored apart), computed plainly."""
    from judgebench_flows.data import db

    instances = json.loads((LLMBAR / "Dataset" / "LLMBar" / subset / "dataset.json").read_text())
    db.save_run(
        engine,
        run_id=run_id,
        config_key=f"llmbar-{model}-{subset}",
        judge_type="arena_hard",
        model=model,
        data_file=subset,
        status="completed",
        started=started,
        finished=started + timedelta(minutes=3),
        n_pairs=len(instances),
        results_json=json.dumps({"run": {"mode": "both-orders"}}),
        config_json=json.dumps({"benchmark": "llmbar", "model": model, "data_file": subset}),
    )
    rng = random.Random(seed)
    judgments, right = [], 0
    for index, instance in enumerate(instances):
        label = "A>B" if instance["label"] == 1 else "B>A"
        for order in (0, 1):
            roll = rng.random()
            decision = label if roll < skill else None if roll > 0.97 else {"A>B": "B>A", "B>A": "A>B"}[label]
            right += decision == label
            judgments.append(
                {
                    "run_id": run_id,
                    "pair_id": f"{subset}/{index}",
                    "order_index": order,
                    "source": subset,
                    "category": "Natural" if subset == "Natural" else "Adversarial",
                    "label": label,
                    "status": "ok" if decision else "invalid",
                    "decision": ""
                    if not decision
                    else decision
                    if not order
                    else {"A>B": "B>A", "B>A": "A>B"}[decision],
                    "decision_for_pair": decision or "",
                }
            )
    db.save_judgments(engine, judgments)
    return right / (2 * len(instances))


@requires_shared
def test_each_board_lists_only_its_own_benchmarks_runs(llmbar_published, published, tmp_path) -> None:  # noqa: F811
    from judgebench_flows.data import db
    from judgebench_flows.scoring.leaderboard import LeaderboardSettings, build_leaderboard

    url = f"sqlite:///{tmp_path / 'results.db'}"
    engine = db.open_database(url)
    t0 = datetime(2026, 11, 20, 2, 0, tzinfo=timezone.utc)
    save_run(engine, "jb00000000", "cfg-jb", GPT4O_FILE, published["gpt4o"], t0, seed=1)
    expected = llmbar_run(engine, "lb00000000", "Adversarial/GPTOut", "my-judge", 0.6, t0, seed=2)
    engine.dispose()
    judgebench = build_leaderboard(
        LeaderboardSettings(repo_url=published["url"], ref=published["sha"], cache_dir=str(tmp_path / "c"), db_url=url)
    )
    assert [e.run_id for e in judgebench.entries if e.origin == "run"] == ["jb00000000"]
    assert judgebench.benchmark is None and "averages" not in judgebench.model_dump()
    board = build_leaderboard(settings(llmbar_published, tmp_path, url, bootstrap_resamples=100))
    ours = [e for e in board.entries if e.origin == "run"]
    assert [e.run_id for e in ours] == ["lb00000000"]
    assert ours[0].group == "Adversarial/GPTOut" and ours[0].rank is not None
    assert ours[0].overall_accuracy.accuracy == pytest.approx(expected, abs=1e-6)  # LLMBar's rule, not JudgeBench's
    mine = [a for a in board.averages or [] if a.origin == "run"]
    assert len(mine) == 1 and mine[0].subsets["Adversarial/GPTOut"] == ours[0].overall_accuracy.accuracy
    assert mine[0].averages == {"Natural": None, "Adversarial": None}  # one subset of five: no averages


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "judgebench_flows.cli.main", *args], capture_output=True, text=True, timeout=600, cwd=cwd
    )


def test_cli_writes_the_llmbar_board_as_json_csv_and_a_page(llmbar_published, tmp_path) -> None:
    common = (
        "leaderboard",
        "--benchmark",
        "llmbar",
        "--repo-url",
        llmbar_published["url"],
        "--ref",
        llmbar_published["sha"],
        "--cache-dir",
        str(tmp_path / "cache"),
        "--db-url",
        f"sqlite:///{tmp_path / 'no.db'}",
        "--bootstrap-resamples",
        "50",
        "--output-dir",
        str(tmp_path / "html"),
        "--result-path",
        str(tmp_path / "lb.json"),
    )
    result = run_cli(*common, "--format", "csv", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert len(rows) == 135 and {"Natural", "Adversarial"} <= rows[0].keys() and "mmlu-pro" not in rows[0]
    assert rows[0]["group"] == "Natural" and rows[0]["rank"] == "1"
    board = json.loads((tmp_path / "lb.json").read_text())
    assert board["benchmark"] == "llmbar" and board["scoring"].startswith("LLMBar's rule")
    assert {"subset", "evaluator", "dataset"} <= board["entries"][0].keys() and "response_model" not in board[
        "entries"
    ][0]
    assert len(board["averages"]) == STRATEGIES
    html = (tmp_path / "html" / "leaderboard.html").read_text()
    assert "<title>LLMBar leaderboard</title>" in html and "JudgeBench's metric" not in html
    assert html.count('<section id="g') == 5 and "Subset Adversarial/Manual" in html and 'id="averages"' in html
    table = run_cli(*common, cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert "subset Adversarial/Neighbor (134 pairs)" in table.stdout and "averages as LLMBar's paper" in table.stdout


def tau_b_plain(x: list[float], y: list[float]) -> float:
    """Kendall's tau-b by its definition, pair by pair."""
    concordant = discordant = ties_x = ties_y = 0
    n = len(x)
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0:
                ties_x += 1
            if dy == 0:
                ties_y += 1
            if dx * dy > 0:
                concordant += 1
            elif dx * dy < 0:
                discordant += 1
    pairs = n * (n - 1) / 2
    return (concordant - discordant) / ((pairs - ties_x) * (pairs - ties_y)) ** 0.5


def test_kendall_tau_b_equals_its_definition_with_ties() -> None:
    from judgebench_flows.scoring.rank_agreement import kendall_tau_b

    rng = random.Random(7)
    for _ in range(50):
        n = rng.randint(3, 9)
        x = [rng.choice([0.1, 0.2, 0.3, 0.4]) for _ in range(n)]
        y = [rng.choice([0.5, 0.6, 0.7]) for _ in range(n)]
        if len(set(x)) == 1 or len(set(y)) == 1:
            continue
        assert float(kendall_tau_b(np.array(x), np.array(y))) == pytest.approx(tau_b_plain(x, y), abs=1e-12)
    assert float(kendall_tau_b(np.array([1, 2, 3, 4]), np.array([1, 3, 2, 4]))) == pytest.approx(4 / 6)
    assert np.isnan(kendall_tau_b(np.array([1, 1, 1]), np.array([1, 2, 3])))


@requires_shared
def test_the_view_across_benchmarks_places_judges_and_their_agreement(llmbar_published, published, tmp_path) -> None:  # noqa: F811
    from judgebench_flows.data import db
    from judgebench_flows.scoring.leaderboard import LeaderboardSettings
    from judgebench_flows.scoring.leaderboard_across import build_across

    url = f"sqlite:///{tmp_path / 'results.db'}"
    engine = db.open_database(url)
    t0 = datetime(2026, 11, 20, 2, 0, tzinfo=timezone.utc)
    skills = {"judge-a": 0.96, "judge-b": 0.75, "judge-c": 0.6, "judge-d": 0.45}
    llmbar_scores = {}
    for number, (model, skill) in enumerate(skills.items()):
        save_run(
            engine, f"jb{number}", f"cfg-jb-{model}", GPT4O_FILE, published["gpt4o"], t0, seed=10 + number, model=model
        )
        by_subset = {
            subset: llmbar_run(engine, f"lb{number}{i}", subset, model, skill, t0, seed=100 * number + i)
            for i, subset in enumerate(SUBSET_SIZES)
        }
        llmbar_scores[model] = round(0.5 * by_subset["Natural"] + 0.5 * np.mean([by_subset[s] for s in ADVERSARIAL]), 6)
    llmbar_run(engine, "lbpartial", "Natural", "judge-e", 0.9, t0, seed=999)  # one subset only: not placed
    engine.dispose()
    common = {"cache_dir": str(tmp_path / "cache"), "db_url": url, "bootstrap_resamples": 300}
    view = build_across(
        {
            "judgebench": LeaderboardSettings(repo_url=published["url"], ref=published["sha"], **common),
            "llmbar": settings(llmbar_published, tmp_path, url, bootstrap_resamples=300),
        },
        seed=42,
        resamples=300,
    )
    places = {(j.judge_name, j.judge_model): j.places for j in view.judges}
    ours = [key for key in places if key[1] in skills]
    assert len(ours) == 4 and all(set(places[key]) == {"judgebench", "llmbar"} for key in ours)
    assert ("arena_hard", "judge-e") not in places
    for model, score in llmbar_scores.items():
        assert places[("arena_hard", model)]["llmbar"].score == pytest.approx(score, abs=2e-6)
    assert places[("arena_hard", "judge-a")]["llmbar"].place == 1  # the best of LLMBar's 27 published rows too
    assert places[("llmbar:Vanilla", "gpt-4-0613")].keys() == {"llmbar"}
    (agreement,) = view.agreements
    assert agreement.benchmarks == ["judgebench", "llmbar"] and agreement.shared_judges == 4
    judgebench_scores = [places[("arena_hard", m)]["judgebench"].score for m in skills]
    expected = tau_b_plain(judgebench_scores, [llmbar_scores[m] for m in skills])
    assert agreement.tau == pytest.approx(expected, abs=1e-6)
    assert -1 <= agreement.ci_low <= agreement.ci_high <= 1
    again = build_across(
        {
            "judgebench": LeaderboardSettings(repo_url=published["url"], ref=published["sha"], **common),
            "llmbar": settings(llmbar_published, tmp_path, url, bootstrap_resamples=300),
        },
        seed=42,
        resamples=300,
    )
    assert again.agreements == view.agreements  # seeded


def test_fewer_than_three_shared_judges_say_so_instead_of_a_tau(llmbar_published, tmp_path) -> None:
    from judgebench_flows.scoring.leaderboard import build_leaderboard
    from judgebench_flows.scoring.leaderboard_across import across

    board = build_leaderboard(settings(llmbar_published, tmp_path, bootstrap_resamples=0))
    empty = board.model_copy(update={"entries": []})  # a JudgeBench board without a judge
    view = across({"judgebench": empty, "llmbar": board}, seed=1, resamples=10)
    assert {name: source.judges for name, source in view.boards.items()} == {"judgebench": 0, "llmbar": STRATEGIES}
    (agreement,) = view.agreements
    assert agreement.shared_judges == 0 and agreement.tau is None
    assert agreement.note == "0 shared judges: too few for a rank correlation (3 needed)"


@requires_shared
def test_cli_across_writes_json_and_csv_and_refuses_one_boards_options(llmbar_published, published, tmp_path) -> None:  # noqa: F811
    repos = (
        "--judgebench-repo-url",
        published["url"],
        "--judgebench-ref",
        published["sha"],
        "--llmbar-repo-url",
        llmbar_published["url"],
        "--llmbar-ref",
        llmbar_published["sha"],
    )
    common = ("--cache-dir", str(tmp_path / "cache"), "--db-url", f"sqlite:///{tmp_path / 'no.db'}")
    result = run_cli(
        "leaderboard", "--across", *repos, *common, "--bootstrap-resamples", "20", "--format", "csv", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert {row["benchmark"] for row in rows} == {"judgebench", "llmbar"}
    assert len([row for row in rows if row["benchmark"] == "llmbar"]) == STRATEGIES
    view = json.loads((tmp_path / "results" / "leaderboard_across.json").read_text())
    assert view["agreements"][0]["shared_judges"] == 0 and view["agreements"][0]["tau"] is None
    assert view["boards"]["llmbar"]["commit"] == llmbar_published["sha"]
    for bad, named in (
        (("--across", "--repo-url", published["url"]), "--repo-url"),
        (("--llmbar-repo-url", llmbar_published["url"]), "--llmbar-repo-url"),
    ):
        refused = run_cli("leaderboard", *bad, *common, cwd=tmp_path)
        assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert named in refused.stderr

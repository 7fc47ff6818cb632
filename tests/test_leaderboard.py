"""`judgebench leaderboard`: published outputs files and our runs, scored exactly as JudgeBench scores them.

The checkout is a real git repository made from ../shared/judgebench plus synthetic `outputs/` files in
JudgeBench's record shape (the shared copy has none, and JudgeBench's own files are not ours to ship):
seeded judgments over real pairs, with ties, nulls, stray labels, a single-game file with a duplicate
line and a reward-model file with tied scores. Every number is checked against a separate, deliberately
plain implementation of JudgeBench's `compute_final_metrics` written here.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import random
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.conftest import CLAUDE_FILE, GPT4O_FILE, SHARED, load_jsonl, make_repo, requires_shared
from tests.test_db import postgresql_url  # noqa: F401 - fixture: a fresh PostgreSQL database, skipped when none is reachable

pytestmark = requires_shared
CATS = ("mmlu-pro", "livebench-reasoning", "livebench-math", "livecodebench")


# ---------------------------------------------------------------- JudgeBench's metric, written plainly


def category(source: str) -> str:
    return "mmlu-pro" if source.startswith("mmlu-pro") else source


def swap(decision):
    return {"A>B": "B>A", "B>A": "A>B"}.get(decision, decision)


def official_accuracy(rows: list[dict], cat: str | None = None) -> float | None:
    """compute_final_metrics: single game when a line has one judgment, else the two-order counter."""
    rows = [r for r in rows if cat is None or category(r["source"]) == cat]
    if not rows:
        return None
    correct = 0
    for row in rows:
        judgments = row["judgments"]
        decisions = [None if j is None else j["decision"] for j in judgments]
        if len(judgments) == 1:
            correct += decisions[0] == row["label"]
            continue
        first, second = decisions[0], swap(decisions[1])
        counter = 0
        for decision in (first, second):
            if decision == row["label"]:
                counter += 1
            elif decision == swap(row["label"]):
                counter -= 1
        correct += counter > 0
    return correct / len(rows)


# ---------------------------------------------------------------- synthetic outputs files


def _sample(pairs: list[dict], n: int, seed: int) -> list[dict]:
    return random.Random(seed).sample(pairs, n)


def _arena_text(decision) -> str:
    if decision is None:
        return "\nI cannot decide.\nStill no verdict."
    return f"\nAfter comparing both answers.\nMy final verdict is [[{decision}]]"


def llm_file(pairs: list[dict], judge_name: str, judge_model: str, seed: int, orders: int = 2) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for pair in pairs:
        judgments = []
        for order in range(orders):
            right = pair["label"] if order == 0 else swap(pair["label"])
            roll = rng.random()
            if orders == 1 and roll < 0.08:
                judgments.append(None)  # a failed call, as run_judge.py records it
                continue
            decision = (
                right
                if roll < 0.62
                else swap(right)
                if roll < 0.82
                else "A=B"
                if roll < 0.9
                else None
                if roll < 0.96
                else "A<B"
            )
            judgments.append(
                {
                    "judgment": {"judge_model": judge_model, "prompt": "p", "response": _arena_text(decision)},
                    "decision": decision,
                }
            )
        rows.append({**pair, "judge_name": judge_name, "judgments": judgments})
    return rows


def reward_file(pairs: list[dict], judge_model: str, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for pair in pairs:
        a, b = round(rng.uniform(0, 30) * 4) / 4, round(rng.uniform(0, 30) * 4) / 4
        if rng.random() < 0.1:
            b = a  # tied scores: A=B
        judgments = []
        for x, y in ((a, b), (b, a)):
            decision = "A>B" if x > y else "B>A" if x < y else "A=B"
            judgments.append(
                {
                    "judgment": {"judge_model": judge_model, "prompt": "", "response": "", "scores": [x, y]},
                    "decision": decision,
                }
            )
        rows.append({**pair, "judge_name": "reward_model", "judgments": judgments})
    return rows


def output_name(data_file: str, judge_name: str, judge_model: str) -> str:
    return f"outputs/{data_file.removesuffix('.jsonl')},judge_name={judge_name},judge_model={judge_model.replace('/', '_')}.jsonl"


def jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> dict:
    gpt4o = _sample(load_jsonl(SHARED / "data" / GPT4O_FILE), 90, 1)
    claude = _sample(load_jsonl(SHARED / "data" / CLAUDE_FILE), 60, 2)
    single = llm_file(gpt4o[:50], "vanilla", "gpt-4o-mini", 5, orders=1)
    single.append(single[3])  # a pair judged twice: JudgeBench counts every line
    files = {
        output_name(GPT4O_FILE, "arena_hard", "o1-mini-2024-09-12"): llm_file(
            gpt4o, "arena_hard", "o1-mini-2024-09-12", 3
        ),
        output_name(GPT4O_FILE, "reward_model", "Skywork/Skywork-Reward-Gemma-2-27B"): reward_file(
            gpt4o, "Skywork/Skywork-Reward-Gemma-2-27B", 4
        ),
        output_name(GPT4O_FILE, "vanilla", "gpt-4o-mini"): single,
        output_name(CLAUDE_FILE, "arena_hard", "claude-3-haiku-20240307"): llm_file(
            claude, "arena_hard", "claude-3-haiku-20240307", 6
        ),
    }
    path = tmp_path_factory.mktemp("published") / "JudgeBench"
    # The data files hold the sampled pairs: a file of all of them is a full-benchmark result here.
    data = {f"data/{GPT4O_FILE}": jsonl(gpt4o), f"data/{CLAUDE_FILE}": jsonl(claude)}
    sha = make_repo(path, {**data, **{name: jsonl(rows) for name, rows in files.items()}})
    return {"url": f"file://{path}", "sha": sha, "files": files, "gpt4o": gpt4o, "claude": claude}


def save_run(
    engine,
    run_id: str,
    config_key: str,
    data_file: str,
    pairs: list[dict],
    started: datetime,
    status: str = "completed",
    seed: int = 0,
    model: str = "my-judge",
) -> list[dict]:
    """A finished run in the results database, as the flow records one; returns its verdicts as rows
    in the outputs shape, for the plain metric."""
    from judgebench_flows.data import db

    rng = random.Random(seed)
    db.save_run(
        engine,
        run_id=run_id,
        config_key=config_key,
        judge_type="arena_hard",
        model=model,
        data_file=data_file,
        status=status,
        started=started,
        finished=started + timedelta(minutes=5),
        n_pairs=len(pairs),
        results_json=json.dumps({"run": {"mode": "both-orders"}}),
    )
    rows, judgments = [], []
    for pair in pairs:
        decisions = [rng.choice([pair["label"], swap(pair["label"]), "A=B", ""]) for _ in range(2)]
        for order, decision in enumerate(decisions):
            judgments.append(
                {
                    "run_id": run_id,
                    "pair_id": pair["pair_id"],
                    "order_index": order,
                    "source": pair["source"],
                    "category": category(pair["source"]),
                    "label": pair["label"],
                    "status": "ok" if decision else "invalid",
                    "decision": decision,
                    "decision_for_pair": swap(decision) if order else decision,
                }
            )
        rows.append(
            {
                "source": pair["source"],
                "label": pair["label"],
                "judgments": [{"decision": d or None} for d in decisions],
            }
        )
    db.save_judgments(engine, judgments)
    return rows


def entry_for(board: dict, judge_name: str, judge_model: str, origin: str = "published") -> dict:
    found = [
        e
        for e in board["entries"]
        if (e["judge_name"], e["judge_model"], e["origin"]) == (judge_name, judge_model, origin)
    ]
    assert len(found) == 1, [(e["judge_name"], e["judge_model"], e["origin"]) for e in board["entries"]]
    return found[0]


def assert_matches_official(entry: dict, rows: list[dict]) -> None:
    expected = official_accuracy(rows)
    assert entry["overall_accuracy"]["accuracy"] == pytest.approx(round(expected, 6), abs=1e-9)
    assert entry["pairs"] == len(rows)
    assert entry["overall_accuracy"]["total_samples"] == len(rows)
    low, high = entry["overall_accuracy"]["ci_low"], entry["overall_accuracy"]["ci_high"]
    assert low <= entry["overall_accuracy"]["accuracy"] <= high
    for cat in CATS:
        want = official_accuracy(rows, cat)
        got = entry["category_accuracy"][cat]["accuracy"]
        assert (got is None) if want is None else got == pytest.approx(round(want, 6), abs=1e-9), cat


# ---------------------------------------------------------------- tests


def test_published_numbers_equal_judgebench_metric(published, tmp_path) -> None:
    from judgebench_flows.scoring.leaderboard import LeaderboardSettings, build_leaderboard

    board = build_leaderboard(
        LeaderboardSettings(
            repo_url=published["url"],
            ref=published["sha"],
            cache_dir=str(tmp_path / "cache"),
            db_url=f"sqlite:///{tmp_path / 'none.db'}",
        )
    )
    board = board.model_dump()
    assert board["dataset"]["commit"] == published["sha"]
    assert len(board["entries"]) == 4
    files = published["files"]
    arena = entry_for(board, "arena_hard", "o1-mini-2024-09-12")
    assert_matches_official(arena, files[output_name(GPT4O_FILE, "arena_hard", "o1-mini-2024-09-12")])
    reward = entry_for(
        board, "reward_model", "Skywork/Skywork-Reward-Gemma-2-27B"
    )  # the model id, not the file's spelling
    assert_matches_official(
        reward, files[output_name(GPT4O_FILE, "reward_model", "Skywork/Skywork-Reward-Gemma-2-27B")]
    )
    single = entry_for(board, "vanilla", "gpt-4o-mini")
    assert single["mode"] == "single-game" and single["duplicate_lines"] == 1
    assert single["missing_pairs"] == 40 and single["rank"] is not None  # 50 of 90 pairs: ranked, flagged
    assert_matches_official(single, files[output_name(GPT4O_FILE, "vanilla", "gpt-4o-mini")])
    claude = entry_for(board, "arena_hard", "claude-3-haiku-20240307")
    assert claude["response_model"] == "claude-3-5-sonnet-20240620"
    assert_matches_official(claude, files[output_name(CLAUDE_FILE, "arena_hard", "claude-3-haiku-20240307")])
    for entry in board["entries"]:
        assert entry["origin"] == "published" and entry["run_id"] is None
    # ranked within each response-model dataset, best first; the GPT-4o group (3 judges) comes first
    groups = [e["response_model"] for e in board["entries"]]
    assert groups == ["gpt-4o-2024-05-13"] * 3 + ["claude-3-5-sonnet-20240620"]
    gpt = [e["overall_accuracy"]["accuracy"] for e in board["entries"][:3]]
    assert gpt == sorted(gpt, reverse=True) and [e["rank"] for e in board["entries"][:3]][0] == 1
    assert board["notes"] and not (tmp_path / "none.db").exists()  # reading never creates a database


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def results_db(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'results.db'}"
    return request.getfixturevalue("postgresql_url")


def test_our_latest_finished_run_per_configuration_is_listed(published, tmp_path, results_db) -> None:
    from judgebench_flows.data import db
    from judgebench_flows.scoring.leaderboard import LeaderboardSettings, build_leaderboard

    db_path = tmp_path / "results.db"
    engine = db.open_database(results_db)
    t0 = datetime(2026, 11, 20, 2, 0, tzinfo=timezone.utc)
    save_run(engine, "old0000000", "cfg-a", GPT4O_FILE, published["gpt4o"], t0, seed=1)
    newer = save_run(
        engine,
        "new1111111",
        "cfg-a",
        GPT4O_FILE,
        published["gpt4o"],
        t0 + timedelta(days=1),
        status="regressed",
        seed=2,
    )
    save_run(
        engine,
        "fail222222",
        "cfg-a",
        GPT4O_FILE,
        published["gpt4o"][:10],
        t0 + timedelta(days=2),
        status="failed",
        seed=3,
    )
    claude_rows = save_run(
        engine, "cla3333333", "cfg-b", CLAUDE_FILE, published["claude"], t0, seed=4, model="other-judge"
    )
    before = db_path.read_bytes() if db_path.exists() else None
    board = build_leaderboard(
        LeaderboardSettings(
            repo_url=published["url"], ref=published["sha"], cache_dir=str(tmp_path / "cache"), db_url=results_db
        )
    )
    board = board.model_dump()
    ours = [e for e in board["entries"] if e["origin"] == "run"]
    assert sorted(e["run_id"] for e in ours) == ["cla3333333", "new1111111"]
    mine = entry_for(board, "arena_hard", "my-judge", origin="run")
    assert mine["response_model"] == "gpt-4o-2024-05-13" and mine["date"].startswith("2026-11-21")
    assert_matches_official(mine, newer)
    other = entry_for(board, "arena_hard", "other-judge", origin="run")
    assert other["response_model"] == "claude-3-5-sonnet-20240620"
    assert_matches_official(other, claude_rows)
    assert len([e for e in board["entries"] if e["response_model"] == "gpt-4o-2024-05-13"]) == 4
    assert (db_path.read_bytes() if db_path.exists() else None) == before  # read only


class _Tables(HTMLParser):
    """Rows of each <tbody class="by-..."> in document order: (body class, judge of each row)."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[tuple[str, list[str]]] = []
        self.radios: list[dict] = []
        self.forbidden: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "tbody":
            self.bodies.append((attrs.get("class", ""), []))
        if tag == "tr" and "data-model" in attrs and self.bodies:
            self.bodies[-1][1].append(attrs["data-model"])
        if tag == "input":
            self.radios.append(attrs)
        if tag in ("script", "link", "img", "iframe") or "src" in attrs or ("href" in attrs and tag != "a"):
            self.forbidden.append(tag)


def test_cli_writes_json_contract_and_sortable_html(published, tmp_path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "judgebench_flows.cli.main",
            "leaderboard",
            "--repo-url",
            published["url"],
            "--ref",
            published["sha"],
            "--cache-dir",
            str(tmp_path / "cache"),
            "--db-url",
            f"sqlite:///{tmp_path / 'no.db'}",
            "--result-path",
            str(tmp_path / "lb.json"),
            "--output-dir",
            str(tmp_path / "html"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "o1-mini-2024-09-12" in result.stdout and "responses by gpt-4o-2024-05-13" in result.stdout
    board = json.loads((tmp_path / "lb.json").read_text())
    for entry in board["entries"]:
        assert {
            "response_model",
            "judge_name",
            "judge_model",
            "origin",
            "run_id",
            "pairs",
            "overall_accuracy",
            "category_accuracy",
        } <= entry.keys()
        assert {"accuracy", "ci_low", "ci_high"} <= entry["overall_accuracy"].keys()
        assert set(CATS) <= entry["category_accuracy"].keys()
    html = (tmp_path / "html" / "leaderboard.html").read_text()
    parser = _Tables()
    parser.feed(html)
    assert parser.forbidden == []
    assert len(parser.radios) == 2 * (1 + len(CATS) + 2)  # two groups, one radio per sort key
    gpt = [e for e in board["entries"] if e["response_model"] == "gpt-4o-2024-05-13"]
    bodies = dict(parser.bodies[: 1 + len(CATS) + 2])  # the first group's bodies
    assert bodies["by-k0"] == [e["judge_model"] for e in gpt]  # overall ranking
    for index, cat in enumerate(CATS, 1):
        by_cat = sorted(gpt, key=lambda e: -(e["category_accuracy"][cat]["accuracy"] or -1))
        assert [e["category_accuracy"][cat]["accuracy"] for e in by_cat] == sorted(
            [e["category_accuracy"][cat]["accuracy"] for e in gpt], reverse=True
        )
        got = [
            next(e for e in gpt if e["judge_model"] == m)["category_accuracy"][cat]["accuracy"]
            for m in bodies[f"by-k{index}"]
        ]
        assert got == sorted(got, reverse=True), cat
    assert html.count('class="wh"') > 0 and 'class="ci"' in html  # interval whiskers


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "judgebench_flows.cli.main", *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )


@pytest.mark.slow  # five CLI processes and two repositories
def test_bad_inputs_exit_2_with_one_line(published, tmp_path) -> None:
    bare = tmp_path / "bare"
    sha = make_repo(bare)  # the shared copy: no outputs/
    bad = tmp_path / "bad"
    bad_sha = make_repo(
        bad,
        {
            "outputs/dataset=judgebench,response_model=m,judge_name=j,judge_model=x.jsonl": '{"pair_id": "p"}\nnot json\n'
        },
    )
    cases = [
        (
            ["leaderboard", "--repo-url", f"file://{bare}", "--ref", sha],
            f"file://{bare} at --ref {sha} has no outputs/",
        ),
        (["leaderboard", "--repo-url", f"file://{bad}", "--ref", bad_sha], "judge_model=x.jsonl line 1: missing field"),
        (["rescore", str(tmp_path / "missing.jsonl"), "--judge-type", "arena_hard"], "file not found"),
        (["rescore", str(tmp_path / "x.jsonl"), "--judge-type", "nonsense"], "unknown judge type 'nonsense'"),
    ]
    (tmp_path / "x.jsonl").write_text("{}\n")
    reward = tmp_path / "reward.jsonl"
    reward.write_text(
        jsonl(published["files"][output_name(GPT4O_FILE, "reward_model", "Skywork/Skywork-Reward-Gemma-2-27B")][:5])
    )
    cases.append((["rescore", str(reward), "--judge-type", "arena_hard"], "no judge answers to re-parse"))
    for args, message in cases:
        result = (
            run_cli(*args, "--cache-dir", str(tmp_path / "cache"), cwd=tmp_path)
            if args[0] == "leaderboard"
            else run_cli(*args, cwd=tmp_path)
        )
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (args, result.stderr)


# ---------------------------------------------------------------- rescore

# (answer text, JudgeBench's recorded decision, ours): JudgeBench takes the one distinct [[...]] label
# of the joined answers (A>>B -> A>B) and None otherwise; ours also maps A>>B and A>B together, ignores
# labels inside <think> blocks and rejects labels that are not verdicts.
RESCORE_CASES = [
    ("\nMy final verdict is [[A>>B]]", "A>B", "A>B"),
    ("\nno label here\nMy final verdict is [[B>A]]", "B>A", "B>A"),  # follow-up turn joined
    ("\nI think [[A>>B]]. So: [[A>B]]", None, "A>B"),  # two spellings of one verdict
    ("\n<think>maybe [[A>B]]</think>My final verdict is [[B>A]]", None, "B>A"),
    ("\nMy final verdict is [[A<B]]", "A<B", None),
    ("\nVerdict: [[A=B]]", "A=B", "A=B"),
    ("\n[[A>B]] but really [[B>A]]", None, None),
]


@pytest.mark.slow  # CLI processes over the whole GPT-4o file
def test_rescore_reports_changed_decisions_and_metric(tmp_path, gpt4o_pairs) -> None:
    from judgebench_flows.judging.rescore import rescore_file

    pairs = _sample(gpt4o_pairs, 40, 9)
    rng = random.Random(10)
    rows, expected_changes, ours_rows = [], [], []
    for pair in pairs:
        judgments, ours_judgments = [], []
        for order in range(2):
            text, recorded, ours = rng.choice(RESCORE_CASES)
            judgments.append(
                {"judgment": {"judge_model": "o1-mini", "prompt": "", "response": text}, "decision": recorded}
            )
            ours_judgments.append({"decision": ours})
            if recorded != ours:
                expected_changes.append((pair["pair_id"], order))
        rows.append({**pair, "judge_name": "arena_hard", "judgments": judgments})
        ours_rows.append({**pair, "judgments": ours_judgments})
    rows[5]["judgments"][1] = None  # a failed call stays failed
    ours_rows[5]["judgments"][1] = None
    expected_changes = [c for c in expected_changes if c != (rows[5]["pair_id"], 1)]
    path = tmp_path / output_name(GPT4O_FILE, "arena_hard", "o1-mini").split("/")[-1]
    path.write_text(jsonl(rows))

    result = rescore_file(path, "arena_hard", output=tmp_path / "rescored.jsonl").model_dump()
    assert [(c["pair_id"], c["order"]) for c in result["changes"]] == expected_changes
    assert result["changed"] == len(expected_changes) > 0
    assert result["changed_pairs"] == list(dict.fromkeys(p for p, _ in expected_changes))
    assert result["failed"] == 1 and result["reparsed"] == 79
    assert result["recorded"]["overall_accuracy"]["accuracy"] == pytest.approx(round(official_accuracy(rows), 6))
    assert result["rescored"]["overall_accuracy"]["accuracy"] == pytest.approx(round(official_accuracy(ours_rows), 6))
    for cat in CATS:
        want = official_accuracy(ours_rows, cat)
        got = result["rescored"]["category_accuracy"][cat]["accuracy"]
        assert (got is None) if want is None else got == pytest.approx(round(want, 6)), cat
    rewritten = load_jsonl(tmp_path / "rescored.jsonl")
    assert [[None if j is None else j["decision"] for j in r["judgments"]] for r in rewritten] == [
        [None if j is None else j["decision"] for j in r["judgments"]] for r in ours_rows
    ]

    cli = run_cli(
        "rescore",
        str(path),
        "--judge-type",
        "arena_hard",
        "--result-path",
        str(tmp_path / "rescore.json"),
        cwd=tmp_path,
    )
    assert cli.returncode == 0, cli.stderr
    assert re.search(rf"{len(expected_changes)} decisions differ from the recorded ones", cli.stdout)
    assert json.loads((tmp_path / "rescore.json").read_text())["changed"] == len(expected_changes)


def test_nightly_summary_section_lists_tonights_runs(published, tmp_path) -> None:
    from judgebench_flows.core.config import build_config
    from judgebench_flows.data import db
    from judgebench_flows.flows.leaderboard_flow import nightly_leaderboard_section

    db_url = f"sqlite:///{tmp_path / 'nightly.db'}"
    save_run(
        db.open_database(db_url),
        "tonight999",
        "cfg-n",
        GPT4O_FILE,
        published["gpt4o"],
        datetime.now(timezone.utc),
        seed=7,
    )
    config = build_config(
        model="my-judge",
        repo_url=published["url"],
        ref=published["sha"],
        cache_dir=str(tmp_path / "cache"),
        db_url=db_url,
        output_dir=str(tmp_path / "nightly" / "cell"),
    )
    section = asyncio.run(nightly_leaderboard_section([config], ["tonight999"]))
    assert "## Leaderboard" in section and "o1-mini-2024-09-12" in section
    assert re.search(r"\| \*\*arena_hard\*\* \| \*\*my-judge\*\* \| ours, run tonight9", section)
    assert (tmp_path / "nightly" / "leaderboard.html").is_file()
    broken = build_config(
        model="m", repo_url=str(tmp_path / "nowhere"), db_url=db_url, output_dir=str(tmp_path / "x" / "cell")
    )
    assert "not available" in asyncio.run(nightly_leaderboard_section([broken], []))


@pytest.mark.slow
def test_leaderboard_as_flow_writes_an_artifact(published, tmp_path, run_cli) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from judgebench_flows.flows.leaderboard_flow import LEADERBOARD_ARTIFACT_KEY

    result = run_cli(
        "leaderboard",
        "--flow",
        "--repo-url",
        published["url"],
        "--ref",
        published["sha"],
        "--db-url",
        f"sqlite:///{tmp_path / 'none.db'}",
        "--result-path",
        str(tmp_path / "lb.json"),
        "--output-dir",
        str(tmp_path / "html"),
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "html" / "leaderboard.html").is_file() and not (tmp_path / "none.db").exists()
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[LEADERBOARD_ARTIFACT_KEY]))
        )
    assert (
        artifacts
        and "| 1 | 1 | arena_hard | o1-mini-2024-09-12 (shut down 2025-10-27) | published | 90 |" in artifacts[-1].data
    )


def test_rescore_reads_our_own_outputs_shape(tmp_path, gpt4o_pairs) -> None:
    """Our runs' JSONL carries status per judgment: a re-parsed invalid answer becomes ok, a failed call stays failed."""
    from judgebench_flows.judging.rescore import rescore_file

    pair = gpt4o_pairs[0]
    row = {
        **pair,
        "judge_name": "skywork_critic",
        "judgments": [
            {
                "judgment": {"judge_model": "m", "prompt": "", "response": "**[[A]]**"},
                "decision": None,
                "status": "invalid",
                "error": "no verdict",
                "order": 0,
            },
            {
                "judgment": {"judge_model": "m", "prompt": "", "response": ""},
                "decision": None,
                "status": "failed",
                "error": "timeout",
                "order": 1,
            },
        ],
    }
    path = tmp_path / "ours.jsonl"
    path.write_text(jsonl([row]))
    result = rescore_file(path, "skywork_critic", output=tmp_path / "out.jsonl").model_dump()
    assert result["changes"] == [
        {
            "pair_id": pair["pair_id"],
            "order": 0,
            "source": pair["source"],
            "label": pair["label"],
            "recorded": None,
            "ours": "A>B",
        }
    ]
    assert result["failed"] == 1 and result["reparsed"] == 1
    rewritten = load_jsonl(tmp_path / "out.jsonl")[0]["judgments"]
    assert (rewritten[0]["decision"], rewritten[0]["status"]) == ("A>B", "ok") and rewritten[1]["status"] == "failed"


@pytest.mark.postgres
def test_a_password_given_in_db_url_is_used_to_connect(monkeypatch) -> None:
    """The CLI keeps a --db-url password out of what it passes on (core/credentials.stash); reading our
    runs for the leaderboard must still connect with it, as every other database reader does."""
    import socket

    import sqlalchemy as sa

    from judgebench_flows.core.credentials import stash
    from judgebench_flows.scoring.leaderboard import read_runs

    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", 5432)) != 0:
            pytest.skip("no PostgreSQL on 127.0.0.1:5432")
    public = stash("postgresql+psycopg://postgres:pw-5f3e9a@127.0.0.1:5432/postgres")
    assert "pw-5f3e9a" not in public
    connected_with = []
    real_create_engine = sa.create_engine

    def create_engine(url, *args, **kwargs):  # a spy: the real engine connects to the real server
        connected_with.append(sa.engine.make_url(url).password)
        return real_create_engine(url, *args, **kwargs)

    monkeypatch.setattr(sa, "create_engine", create_engine)
    runs, note = read_runs(public, seed=0, resamples=10)
    assert connected_with == ["pw-5f3e9a"]
    assert runs == [] and note is not None and "pw-5f3e9a" not in note


def leaderboard_cli(published: dict, tmp_path: Path, db_url: str, *extra: str, columns: int = 80):
    return subprocess.run(
        [sys.executable, "-m", "judgebench_flows.cli.main", "leaderboard", "--repo-url", published["url"]]
        + ["--ref", published["sha"], "--cache-dir", str(tmp_path / "cache"), "--db-url", db_url]
        + ["--result-path", str(tmp_path / "lb.json"), "--output-dir", str(tmp_path / "html"), *extra],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "COLUMNS": str(columns)},
    )


def test_a_subset_run_is_shown_apart_with_its_pair_count_never_ranked(published, tmp_path) -> None:
    """A --max-samples 20 run beside full-benchmark results: its own table, marked "20 of 90 pairs",
    no rank; the full run is ranked. At 80 columns no line is longer, and run ids are whole."""
    from judgebench_flows.data import db

    url = f"sqlite:///{tmp_path / 'results.db'}"
    engine = db.open_database(url)
    t0 = datetime(2026, 11, 20, 2, 0, tzinfo=timezone.utc)
    full_id, subset_id = "f" * 32, "5" * 32
    save_run(engine, full_id, "cfg-full", GPT4O_FILE, published["gpt4o"], t0, seed=7)
    save_run(engine, subset_id, "cfg-20", GPT4O_FILE, published["gpt4o"][:20], t0, seed=8, model="tiny-run")
    engine.dispose()
    result = leaderboard_cli(published, tmp_path, url)
    assert result.returncode == 0, result.stderr
    board = json.loads((tmp_path / "lb.json").read_text())
    subset = entry_for(board, "arena_hard", "tiny-run", origin="run")
    full = entry_for(board, "arena_hard", "my-judge", origin="run")
    assert subset["rank"] is None and subset["group"] == "gpt-4o-2024-05-13: runs on a subset, not ranked"
    assert full["rank"] is not None and full["group"] == "gpt-4o-2024-05-13"
    assert [e["group"] for e in board["entries"]][-1] == subset["group"]  # after every ranked table
    lines = result.stdout.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80, result.stdout
    ranked, _, apart = result.stdout.partition("runs on a subset, not ranked")
    assert "tiny-run" not in ranked and "tiny-run" in apart and "20 of 90 pairs" in apart
    assert full_id in ranked and subset_id in apart  # whole run ids, what `compare` takes
    assert "…" not in result.stdout


@pytest.mark.slow  # two CLI processes; the quick loop keeps the 80-column one
def test_listing_formats_for_scripts(published, tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'none.db'}"
    as_json = leaderboard_cli(published, tmp_path, url, "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    assert len(json.loads(as_json.stdout)["entries"]) == 4
    as_csv = leaderboard_cli(published, tmp_path, url, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert rows[0]["rank"] == "1" and len(rows) == 4
    assert {r["group"] for r in rows} == {"gpt-4o-2024-05-13", "claude-3-5-sonnet-20240620"}
    assert all(0 <= float(r["accuracy"]) <= 1 for r in rows)


@pytest.mark.slow  # a CLI process and a repository
def test_unreadable_published_files_are_named_in_one_line(published, tmp_path) -> None:
    """A Git LFS pointer and a file with a bad line are left out of the ranking, each named with why, in one
    line that also says how many files were ranked; the readable file is still ranked."""
    good = output_name(GPT4O_FILE, "arena_hard", "o1-mini-2024-09-12")
    pointer = output_name(GPT4O_FILE, "arena_hard", "gpt-4o-2024-05-13")
    broken = output_name(GPT4O_FILE, "vanilla", "gpt-4o-mini")
    repo = tmp_path / "JudgeBench"
    sha = make_repo(
        repo,
        {
            f"data/{GPT4O_FILE}": jsonl(published["gpt4o"]),
            good: jsonl(published["files"][good]),
            pointer: "version https://git-lfs.github.com/spec/v1\noid sha256:0123\nsize 4242\n",
            broken: jsonl(published["files"][broken][:3]) + "not json\n",
        },
        copy_shared=False,
    )
    done = subprocess.run(
        [sys.executable, "-m", "judgebench_flows.cli.main", "leaderboard", "--repo-url", f"file://{repo}"]
        + ["--ref", sha, "--cache-dir", str(tmp_path / "cache")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "COLUMNS": "1000"},  # the note unwrapped: one line
    )
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if "could not be read" in line]
    assert line.startswith("ranked 1 of 3 published files; 2 could not be read: "), done.stdout
    assert f"{Path(pointer).name} (a Git LFS pointer, not the file)" in line, line
    assert f"{Path(broken).name} (line 4: not JSON" in line, line
    assert "o1-mini" in done.stdout


def _store_results(engine, run_id: str, seed: int, resamples: int, **more) -> None:
    """The run's results.json and configuration as the flow stores them: its verdicts scored with `seed`
    and `resamples` (the intervals the leaderboard may read instead of drawing them again)."""
    from judgebench_flows.data import db
    from judgebench_flows.scoring.metrics import Tally
    from judgebench_flows.scoring.results import build_results

    tally = Tally()
    tally.add(db.judgment_records(db.run_judgments(engine, run_id)))
    measured = build_results(tally, seed=seed, bootstrap_resamples=resamples).model_dump(mode="json")
    results = {"run": {"mode": "both-orders"}, **measured, **more}
    config = {"model": "my-judge", "seed": seed, "bootstrap_resamples": resamples}
    db.update_run(engine, run_id, results_json=json.dumps(results), config_json=json.dumps(config))


def test_our_runs_figures_are_their_stored_intervals_equal_to_a_fresh_computation(
    tmp_path, results_db, monkeypatch
) -> None:
    """The leaderboard reads a run's intervals from its results instead of drawing 2,000 resamples per
    slice again (a year of nights took seconds); the figures are those a fresh computation gives. A run
    whose intervals were drawn otherwise (another seed) is drawn again; a changed fingerprint is marked."""
    from rich.console import Console

    from judgebench_flows.data import db
    from judgebench_flows.scoring import leaderboard, stats
    from judgebench_flows.scoring.leaderboard_report import render_leaderboard
    from judgebench_flows.scoring.published import score_verdicts
    from judgebench_flows.views import tables

    engine = db.open_database(results_db)
    pairs = _sample(load_jsonl(SHARED / "data" / GPT4O_FILE), 48, 3)
    t0 = datetime(2026, 11, 20, 2, 0, tzinfo=timezone.utc)
    save_run(engine, "stored0000", "cfg-a", GPT4O_FILE, pairs, t0, seed=1)
    served = {"answers": 96, "models": {"judge-0611": 96}, "system_fingerprints": {"fp_b": 96}}
    changed = [{"field": "system_fingerprint", "before": "fp_a", "after": "fp_b"}]
    _store_results(
        engine,
        "stored0000",
        42,
        300,
        provenance={"sent": {}, "served": served},
        drift={"baseline_run_id": "previous0", "changed": True, "served": changed, "message": "..."},
    )
    save_run(engine, "otherseed0", "cfg-b", GPT4O_FILE, pairs, t0, seed=2, model="other-judge")
    _store_results(engine, "otherseed0", 7, 300)  # drawn with another seed: not the leaderboard's intervals
    fresh = {
        run_id: score_verdicts(db.run_verdicts(engine, run_id), seed=42, resamples=300)
        for run_id in ("stored0000", "otherseed0")
    }
    drawn = []
    draw = stats.bootstrap_accuracy_ci
    monkeypatch.setattr(stats, "bootstrap_accuracy_ci", lambda *a, **k: drawn.append(1) or draw(*a, **k))

    entries, note = leaderboard.read_runs(results_db, seed=42, resamples=300)
    assert note is None
    by_id = {entry.run_id: entry for entry in entries}
    for run_id, scored in fresh.items():
        entry = by_id[run_id]
        assert entry.overall_accuracy == scored.overall_accuracy, run_id
        assert entry.category_accuracy == scored.category_accuracy, run_id
        assert (entry.pairs, entry.consistency) == (scored.pairs, scored.consistency), run_id
        assert (entry.invalid_judgments, entry.failed_judgments) == (scored.invalid_judgments, scored.failed_judgments)
    slices = 1 + sum(1 for acc in fresh["otherseed0"].category_accuracy.values() if acc.total_samples)
    assert len(drawn) == slices  # only the other seed's run was drawn again
    stored = json.loads(db.get_run(engine, "otherseed0").results_json)
    shown = by_id["otherseed0"]
    slices_stored = [
        stored["overall_accuracy"],
        *(stored["category_accuracy"][name] for name in shown.category_accuracy),
    ]
    slices_shown = [shown.overall_accuracy, *shown.category_accuracy.values()]
    assert any(
        (a["ci_low"], a["ci_high"]) != (b.ci_low, b.ci_high) for a, b in zip(slices_stored, slices_shown, strict=False)
    )

    # the configuration whose endpoint said another fingerprint than its previous run is marked
    mine, other = by_id["stored0000"], by_id["otherseed0"]
    assert (mine.served, mine.drift) == ("judge-0611 fp_b", "system_fingerprint fp_a -> fp_b")
    assert other.drift is None and "drift" not in other.model_dump()
    board = leaderboard.Leaderboard(
        generated=t0.isoformat(),
        dataset=leaderboard.BoardDataset(repo_url="file:///judgebench", commit="0" * 40),
        db_url=results_db,
        notes=[],
        seed=42,
        bootstrap_resamples=300,
        categories=list(leaderboard.CATEGORIES),
        benchmark_pairs={},
        tiers=leaderboard.Tiers(alpha=0.05, method="-"),
        entries=leaderboard.rank(entries),
    )
    console = Console(width=80, record=True, file=io.StringIO())
    tables.print_leaderboard(board, console)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "CHANGED: system_fingerprint fp_a -> fp_b" in " ".join(text.split())
    drifts = {row["run_id"]: row["drift"] for row in tables.leaderboard_rows(board)}
    assert drifts == {"stored0000": "system_fingerprint fp_a -> fp_b", "otherseed0": None}
    page = render_leaderboard(board)
    assert (
        "endpoint CHANGED: system_fingerprint fp_a -&gt; fp_b" in page and "the endpoint said judge-0611 fp_b" in page
    )


def test_the_html_shows_every_column_of_a_table_on_a_wide_screen(published, tmp_path) -> None:
    """A person at a 1920 px window sees each table whole: no column hidden behind a sideways scroll
    (the page once kept its tables within 1,400 px, so math, code and cost sat off screen at any size)."""
    import shutil
    import tempfile

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium not installed: apt-get install chromium")
    done = run_cli(
        "leaderboard", "--repo-url", published["url"], "--ref", published["sha"],
        "--cache-dir", str(tmp_path / "cache"), "--db-url", f"sqlite:///{tmp_path / 'no.db'}",
        "--result-path", str(tmp_path / "lb.json"), "--output-dir", str(tmp_path / "html"), cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # The page has no script (a test above says so): a copy gets one that writes each table's widths
    # (needed / shown) into the DOM that Chromium dumps.
    measure = "document.body.dataset.widths = [...document.querySelectorAll('.wrap')].map(w => w.scrollWidth + '/' + w.clientWidth).join(' ')"
    page = tmp_path / "measured.html"
    page.write_text(
        (tmp_path / "html" / "leaderboard.html").read_text().replace("</body>", f"<script>{measure}</script></body>")
    )
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        dom = subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={profile}",
             "--window-size=1920,1000", "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip
    assert dom.returncode == 0, dom.stderr[-2000:]
    widths = re.search(r'data-widths="([^"]*)"', dom.stdout)
    assert widths and widths.group(1), dom.stdout[:2000]
    for table in widths.group(1).split():
        needed, shown = map(int, table.split("/"))
        assert needed <= shown, widths.group(1)


def test_a_copy_of_data_alone_lists_our_runs_with_one_line_on_the_missing_judges(published, tmp_path) -> None:
    """A newcomer's copy has data/ but no outputs/: the README's run still shows up in the leaderboard,
    under one line saying the published judges are not in the checkout and where they are (exit 0)."""
    from judgebench_flows.data import db

    data_only = tmp_path / "data-only"
    sha = make_repo(data_only, {f"data/{GPT4O_FILE}": jsonl(published["gpt4o"])})
    url = f"sqlite:///{tmp_path / 'results.db'}"
    engine = db.open_database(url)
    run_id = "d" * 32
    save_run(engine, run_id, "cfg-d", GPT4O_FILE, published["gpt4o"], datetime(2026, 11, 20, tzinfo=timezone.utc))
    engine.dispose()
    copy = {"url": f"file://{data_only}", "sha": sha}
    result = leaderboard_cli(copy, tmp_path, url, columns=200)
    assert result.returncode == 0, result.stderr
    assert run_id in result.stdout and "o1-mini" not in result.stdout
    said = " ".join(result.stdout.split())  # the note as one line, however the terminal wraps it
    assert said.count("published judges not shown") == 1, result.stdout
    assert (
        f"at --ref {sha} has no outputs/ folder" in said
        and "a clone of https://github.com/ScalerLab/JudgeBench" in said
    )
    board = json.loads((tmp_path / "lb.json").read_text())
    assert [e["origin"] for e in board["entries"]] == ["run"] and board["entries"][0]["rank"] == 1

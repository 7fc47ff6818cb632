"""Benchmarks as a unit: `--benchmark llmbar` takes LLMBar's repository, pinned commit, subsets and
official rule, JudgeBench stays what it was, and a night's matrix holds both."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from judgebench_flows.core import benchmarks
from judgebench_flows.core.config import RunConfig
from judgebench_flows.core.errors import UserError
from judgebench_flows.core.records import JudgmentRecord, category_of
from judgebench_flows.data.benchmark_data import pairs_file, run_paths
from judgebench_flows.data.dataset import fetch_repository
from judgebench_flows.data.loading import load_pairs
from judgebench_flows.judging.matrix import parse_matrix
from judgebench_flows.scoring import metrics
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests.conftest import LLMBAR, SHARED, VERDICTS, git, oracle_responder, requires_llmbar, requires_shared

SUBSET_SIZES = {
    "Natural": 100,
    "Adversarial/Neighbor": 134,
    "Adversarial/GPTInst": 92,
    "Adversarial/GPTOut": 47,
    "Adversarial/Manual": 46,
}


def llmbar_repo(tmp_path: Path) -> str:
    """A git repository of the LLMBar data (as a user clones GitHub); its path."""
    path = tmp_path / "LLMBar"
    shutil.copytree(LLMBAR, path, ignore=shutil.ignore_patterns(".git", "result.json"))
    git("init", "-q", "-b", "main", cwd=path)
    git("add", "-A", cwd=path)
    git("commit", "-q", "-m", "data", cwd=path)
    return str(path)


def test_llmbar_takes_its_own_repository_commit_and_subset():
    config = RunConfig(model="m", benchmark="llmbar", base_url="http://127.0.0.1:9/v1")
    assert config.repo_url == benchmarks.LLMBAR.repo_url
    assert config.ref == "900616bff90b6c6c8e1681f7d079250637c55992"
    assert config.data_file == "Natural"
    dumped = config.model_dump()
    assert dumped["benchmark"] == "llmbar" and RunConfig.model_validate(dumped).config_key() == config.config_key()
    given = RunConfig(
        model="m", benchmark="llmbar", data_file="Adversarial/GPTOut", ref="abc1234", base_url="http://h/v1"
    )
    assert (given.data_file, given.ref) == ("Adversarial/GPTOut", "abc1234")


def test_judgebench_runs_keep_their_settings_dump_and_history_key():
    plain = RunConfig(model="m", base_url="http://127.0.0.1:9/v1")
    named = RunConfig(model="m", base_url="http://127.0.0.1:9/v1", benchmark="judgebench")
    assert "benchmark" not in plain.model_dump() and "benchmark" not in named.model_dump()
    assert plain.config_key() == named.config_key()
    other = RunConfig(model="m", base_url="http://127.0.0.1:9/v1", benchmark="llmbar", repo_url=plain.repo_url)
    assert other.config_key() != plain.config_key()  # another rule: another history


def test_an_unknown_benchmark_is_one_line_naming_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown benchmark 'llmbarr' \(known: judgebench, llmbar\)"):
        RunConfig(model="m", benchmark="llmbarr")


def _record(pair_id: str, order: int, decision_for_pair: str, label: str = "A>B", status: str = "ok"):
    return JudgmentRecord(
        pair_id=pair_id,
        order=order,
        source="Adversarial/Neighbor",
        category=category_of("Adversarial/Neighbor"),
        label=label,
        status=status,
        decision_for_pair=decision_for_pair if status == "ok" else "",
        judge_model="m",
    )


def test_llmbars_rule_scores_each_order_apart_and_judgebenchs_the_pair():
    records = [
        *(_record("right", o, "A>B") for o in (0, 1)),  # both orders right
        _record("half", 0, "A>B"),  # right shown first, wrong swapped: LLMBar 0.5, JudgeBench 0 (tie)
        _record("half", 1, "B>A"),
        _record("invalid", 0, "A>B"),  # right, then no verdict: LLMBar 0.5, JudgeBench correct (+1)
        _record("invalid", 1, "", status="invalid"),
        *(_record("wrong", o, "B>A") for o in (0, 1)),
    ]
    llmbar = metrics.Tally.for_benchmark(benchmarks.LLMBAR)
    llmbar.add(records)
    judgebench = metrics.Tally()
    judgebench.add(records)
    overall = metrics.accuracy_of(list(llmbar.scores.values()))
    assert (overall.accuracy, overall.correct_count, overall.total_samples) == (0.5, 4, 4)  # 4 of 8 verdicts
    assert llmbar.scores["half"].correctness == 0.5 and not llmbar.scores["half"].correct
    assert metrics.accuracy_of(list(judgebench.scores.values())).accuracy == 0.5  # right and invalid pairs
    assert judgebench.scores["invalid"].correct and not judgebench.scores["half"].correct
    parts = metrics.slices(llmbar.scores, llmbar.categories)
    assert list(parts["category"]) == ["Natural", "Adversarial"] and len(parts["category"]["Adversarial"]) == 4


def test_category_of_keeps_judgebench_sources_and_groups_llmbar_subsets():
    assert category_of("mmlu-pro-law") == "mmlu-pro" and category_of("livecodebench") == "livecodebench"
    assert category_of("Adversarial/GPTInst") == "Adversarial" and category_of("Natural") == "Natural"


@requires_llmbar
def test_every_llmbar_subset_becomes_pairs_and_an_unknown_one_names_the_rest(tmp_path):
    checkout = fetch_repository(llmbar_repo(tmp_path), "HEAD", tmp_path / "cache")
    for subset, size in SUBSET_SIZES.items():
        loaded = load_pairs(pairs_file(benchmarks.LLMBAR, checkout, subset))
        assert len(loaded.pairs) == size and not loaded.skipped
        raw = json.loads((LLMBAR / "Dataset/LLMBar" / subset / "dataset.json").read_text())
        first, pair = raw[0], loaded.pairs[0]
        assert (pair.question, pair.response_A, pair.response_B) == (
            first["input"],
            first["output_1"],
            first["output_2"],
        )
        assert pair.label == {1: "A>B", 2: "B>A"}[first["label"]] and pair.source == subset
        assert pair.pair_id == f"{subset}/0"
    with pytest.raises(UserError, match=r"--data-file 'Adversarial/Nope': no LLMBar subset .*available: "):
        pairs_file(benchmarks.LLMBAR, checkout, "Adversarial/Nope")


@requires_llmbar
@requires_shared
def test_a_judge_of_another_benchmark_reads_its_own_prompts(tmp_path):
    """JudgeBench's arena_hard on LLMBar's pairs: the pairs from the LLMBar checkout, the prompts from
    JudgeBench's (given here as --templates-dir; else its pinned clone)."""
    checkout = fetch_repository(llmbar_repo(tmp_path), "HEAD", tmp_path / "cache")
    templates = str(SHARED / "utils" / "templates")
    config = RunConfig(
        model="m", benchmark="llmbar", data_file="Natural", templates_dir=templates, base_url="http://h/v1"
    )
    data, prompts = run_paths(config, checkout)
    assert data.name.startswith("Natural@") and prompts == templates


def test_a_matrix_runs_every_judge_on_every_benchmarks_subsets():
    matrix = parse_matrix(
        {
            "judge_types": ["arena_hard"],
            "models": ["gpt-4o-mini"],
            "benchmarks": [
                "judgebench",
                {"name": "llmbar", "data_files": ["Natural", "Adversarial/Neighbor"], "ref": "HEAD"},
            ],
            "data_files": ["dataset=judgebench,response_model=gpt-4o-2024-05-13.jsonl"],
            "base_url": "http://127.0.0.1:9/v1",
        }
    )
    cells = {entry.name: entry.config for entry in matrix.entries()}
    assert sorted(cells) == [
        "arena_hard__gpt-4o-mini__dataset=judgebench,response_model=gpt-4o-2024-05-13",
        "arena_hard__gpt-4o-mini__llmbar-Adversarial_Neighbor",
        "arena_hard__gpt-4o-mini__llmbar-Natural",
    ]
    natural = cells["arena_hard__gpt-4o-mini__llmbar-Natural"]
    assert (natural.benchmark, natural.repo_url, natural.ref) == ("llmbar", benchmarks.LLMBAR.repo_url, "HEAD")
    judgebench = cells["arena_hard__gpt-4o-mini__dataset=judgebench,response_model=gpt-4o-2024-05-13"]
    assert judgebench.benchmark == "judgebench" and judgebench.ref == benchmarks.JUDGEBENCH.ref
    assert natural.alert_cells == 3


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"benchmarks": ["nope"]}, "benchmarks.0.name: unknown benchmark 'nope'"),
        ({"benchmarks": ["llmbar", "llmbar"]}, "benchmarks: entries must be distinct"),
        ({"data_files": []}, "give at least one data file"),
    ],
)
def test_a_bad_benchmarks_axis_is_one_line(change, message):
    data = {"judge_types": ["vanilla"], "models": ["m"], "data_files": ["x.jsonl"], **change}
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_matrix(data)


@pytest.mark.slow
@requires_llmbar
@requires_shared
def test_an_llmbar_run_is_scored_by_llmbars_rule_and_says_so(run_cli, tmp_path):
    repo = llmbar_repo(tmp_path)
    checkout = fetch_repository(repo, "HEAD", tmp_path / "probe")
    rows = [json.loads(line) for line in pairs_file(benchmarks.LLMBAR, checkout, "Adversarial/GPTOut").open()]
    # Right on both orders of a seeded 70% of the pairs, wrong on both of the rest.
    with FakeOpenAIServer(oracle_responder(rows, VERDICTS["arena_hard"], accuracy=0.7, seed=3)) as server:
        result = run_cli(
            "run",
            "--benchmark",
            "llmbar",
            "--repo-url",
            repo,
            "--ref",
            "HEAD",
            "--data-file",
            "Adversarial/GPTOut",
            "--templates-dir",
            str(SHARED / "utils" / "templates"),
            "--model",
            "judge",
            "--base-url",
            server.base_url,
            "--no-progress",
            "--no-report",
            "--db-url",
            f"sqlite:///{tmp_path}/j.db",
        )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "LLMBar: arena_hard / judge" in result.stdout and "scored by LLMBar's rule" in result.stdout
    results = json.loads(next((tmp_path / "results").glob("*/results.json")).read_text())
    assert results["benchmark"] == "llmbar" and results["scoring"].startswith("LLMBar's rule")
    official, overall = results["official"], results["overall_accuracy"]
    assert results["dataset"]["n_pairs"] == 47 and overall["total_samples"] == 47
    right = overall["correct_count"]  # right verdicts, each order scored apart
    assert overall["accuracy"] == round(right / 94, 6) and 0.5 < overall["accuracy"] < 0.9
    first, swapped = (int(official[key].split(" / ")[0]) for key in ("correct_False", "correct_True"))
    assert first + swapped == right and official["correct_False"] == f"{first} / 47 = {first / 47 * 100}%"
    assert list(results["category_accuracy"]) == ["Natural", "Adversarial"]
    assert results["source_accuracy"]["Adversarial/GPTOut"]["total_samples"] == 47


@pytest.mark.slow
@requires_llmbar
@requires_shared
def test_a_night_of_both_benchmarks_judges_them_side_by_side_each_with_its_own_history(
    prefect_server, judgebench_repo, gpt4o_pairs, tmp_path
):
    import yaml

    from judgebench_flows.data import db
    from tests._helpers import run_night
    from tests.conftest import GPT4O_FILE

    repo = llmbar_repo(tmp_path)
    checkout = fetch_repository(repo, "HEAD", tmp_path / "probe")
    rows = [json.loads(line) for line in pairs_file(benchmarks.LLMBAR, checkout, "Adversarial/GPTOut").open()]
    db_url = f"sqlite:///{tmp_path}/history.db"
    url, sha = judgebench_repo
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(
        yaml.safe_dump(
            {
                "judge_types": ["vanilla"],
                "models": ["judge"],
                "benchmarks": [
                    {"name": "judgebench", "data_files": [GPT4O_FILE], "repo_url": url, "ref": sha},
                    {"name": "llmbar", "data_files": ["Adversarial/GPTOut"], "repo_url": repo, "ref": "HEAD"},
                ],
                "db_url": db_url,
                "output_root": str(tmp_path / "nightly"),
                "max_samples": 6,
                "concurrency": 8,
                "options": {
                    "cache_dir": str(tmp_path / "cache"),
                    "bootstrap_resamples": 100,
                    "templates_dir": str(SHARED / "utils" / "templates"),  # vanilla's prompts on both
                    "cache": "off",  # the second night pays again: a measurement of its own
                },
            }
        )
    )
    judgebench_oracle = oracle_responder(gpt4o_pairs, VERDICTS["vanilla"])
    llmbar_questions = {row["question"] for row in rows}

    def respond(body: dict) -> str:
        """Right on JudgeBench's pairs; on LLMBar's always for the output shown first (half its verdicts
        right under LLMBar's rule, a tie every pair under JudgeBench's)."""
        prompt = body["messages"][-1]["content"]
        if any(question in prompt for question in llmbar_questions):
            return VERDICTS["vanilla"](True)
        return judgebench_oracle(body)

    with FakeOpenAIServer(respond, latency=0.3) as server:
        os.environ["OPENAI_BASE_URL"] = server.base_url
        try:
            first, second = run_night(matrix), run_night(matrix)
        finally:
            del os.environ["OPENAI_BASE_URL"]
    assert first.is_completed() and second.is_completed(), (first, second)
    runs = db.list_runs(db.open_database(db_url))
    by_key: dict[str, list] = {}
    for run in sorted(runs, key=lambda r: r.started):
        by_key.setdefault(run.config_key, []).append(run)
    assert sorted(len(chain) for chain in by_key.values()) == [2, 2] and all(r.status == "completed" for r in runs)
    tonight = [chain[1] for chain in by_key.values()]
    a, b = tonight
    assert a.started < b.finished and b.started < a.finished  # the two cells judged side by side
    for chain in by_key.values():
        results = json.loads(chain[1].results_json)
        regression = results["regression"]
        assert regression["baseline_run_id"] == chain[0].run_id  # its own benchmark's history
        llmbar = chain[1].data_file == "Adversarial/GPTOut"
        assert results.get("benchmark") == ("llmbar" if llmbar else None)
        # the baseline is scored by the cell's own rule: LLMBar's 50%, not JudgeBench's 0% for these verdicts
        expected = 0.5 if llmbar else 1.0
        assert (regression["baseline_accuracy"], regression["candidate_accuracy"]) == (expected, expected)
        assert not regression["regressed"]
    from judgebench_flows.scoring.compare import compare_runs

    llmbar_chain = next(chain for chain in by_key.values() if chain[0].data_file == "Adversarial/GPTOut")
    comparison = compare_runs(db_url, llmbar_chain[0].run_id, llmbar_chain[1].run_id)
    assert [s.name for s in comparison.slices] == ["overall", "Natural", "Adversarial"]
    assert (comparison.slices[0].a, comparison.slices[0].b, comparison.slices[2].n) == (0.5, 0.5, 6)


@requires_llmbar
@pytest.mark.parametrize(
    ("strategy", "calls_per_pair"),
    [("Vanilla", 2), ("Metrics_Reference", 4), ("Swap", 4)],  # + 2 auxiliaries; + a synthesis per order
)
def test_estimate_counts_every_call_an_llmbar_strategy_may_make(tmp_path, strategy, calls_per_pair):
    from judgebench_flows.judging.estimate import estimate_run

    config = RunConfig(
        model="gpt-4-0613",
        benchmark="llmbar",
        repo_url=llmbar_repo(tmp_path),
        ref="HEAD",
        data_file="Adversarial/Manual",
        judge_type=f"llmbar:{strategy}",
        base_url="http://127.0.0.1:9/v1",
        cache_dir=str(tmp_path / "cache"),
        db_url=f"sqlite:///{tmp_path}/none.db",
        epochs=2,
    )
    estimate = estimate_run(config)
    assert (estimate.pairs, estimate.judgments) == (46, 46 * 2 * 2)
    assert estimate.requests == 46 * calls_per_pair * 2  # every epoch pays its calls again
    caps = {"Vanilla": 2 * 50, "Metrics_Reference": 150 + 384 + 2 * 50, "Swap": 2 * 300 + 2 * 50}[strategy]
    assert estimate.output_tokens == 46 * caps * 2  # each answer at its config's max_tokens


@pytest.mark.slow
@requires_llmbar
@requires_shared
def test_an_llmbar_strategy_judges_judgebench_pairs_by_judgebenchs_rule(
    run_cli, judgebench_repo, gpt4o_pairs, tmp_path
):
    """LLMBar's Vanilla prompt (from LLMBar's evaluators, here its folder as --templates-dir) on JudgeBench's
    GPT-4o pairs: the requests carry LLMBar's settings, the run is JudgeBench's and scored by its rule."""
    seen: list[dict] = []
    answer = oracle_responder(gpt4o_pairs, lambda first: "Output (a)" if first else "Output (b)")

    def respond(body: dict) -> str:
        seen.append(body)
        return answer(body)

    url, sha = judgebench_repo
    with FakeOpenAIServer(respond) as server:
        result = run_cli(
            "run",
            "--judge-type",
            "llmbar:Vanilla",
            "--templates-dir",
            str(LLMBAR / "LLMEvaluator" / "evaluators"),
            "--repo-url",
            url,
            "--ref",
            sha,
            "--max-samples",
            "10",
            "--model",
            "gpt-4-0613",
            "--base-url",
            server.base_url,
            "--no-progress",
            "--no-report",
            "--db-url",
            f"sqlite:///{tmp_path}/j.db",
        )
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads(next((tmp_path / "results").glob("*/results.json")).read_text())
    assert results["judge_type"] == "llmbar:Vanilla" and "benchmark" not in results and "official" not in results
    assert results["overall_accuracy"]["accuracy"] == 1.0 and results["overall_accuracy"]["correct_count"] == 10
    assert len(seen) == 20 and all(body["max_tokens"] == 50 and body["temperature"] == 0.0 for body in seen)
    assert all(body["logit_bias"] and set(body["logit_bias"].values()) == {-100, 7} for body in seen)
    assert [m["role"] for m in seen[0]["messages"]] == ["system", "user"]


@pytest.mark.slow
@requires_llmbar
@pytest.mark.parametrize("strategy", ["Swap", "Metrics_Reference"])
def test_an_llmbar_runs_official_statistics_are_llmbars_own_file(run_cli, tmp_path, strategy):
    """`judgebench run --benchmark llmbar` against a stand-in answering each request with LLMBar's published
    completion: results.json's `official` is the subset's statistics.json, field for field."""
    from tests.test_llmbar_replay import Published, StandIn, published, statistics_match

    book = Published("GPT-4", strategy)
    book.load("Adversarial/Manual")
    stand_in = StandIn(book.requests)
    with FakeOpenAIServer(stand_in) as server:
        result = run_cli(
            "run",
            "--benchmark",
            "llmbar",
            "--repo-url",
            llmbar_repo(tmp_path),
            "--ref",
            "HEAD",
            "--data-file",
            "Adversarial/Manual",
            "--judge-type",
            f"llmbar:{strategy}",
            "--model",
            "gpt-4",
            "--base-url",
            server.base_url,
            "--no-progress",
            "--no-report",
            "--max-failed-fraction",
            "1",
            "--db-url",
            f"sqlite:///{tmp_path}/j.db",
        )
    assert result.returncode == 0, result.stderr[-3000:]
    assert not stand_in.unknown, stand_in.unknown[:1]
    results = json.loads(next((tmp_path / "results").glob("*/results.json")).read_text())
    want = published("Adversarial/Manual", "GPT-4", strategy, "statistics.json")
    assert statistics_match(results["official"], want), (results["official"], want)
    assert results["overall_accuracy"]["accuracy"] == round(float(want["correct_average"].rstrip("%")) / 100, 6)

"""Everything a user can get wrong, through the real CLI: one clear `error:` line, exit code 2, no traceback.

Malformed rows are the exception to "stop the run": a bad line costs one pair, is named and counted, and
the run goes on (exit 0). Problems that would make every number wrong stop the run. Checks that need no
Prefect (options, files, database, endpoint) fail in preflight, in about a second.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests.conftest import CANARY_KEY, NO_DATA_REASON, SHARED, make_repo, shared_data_available

VALID_TEMPLATE_NAMES = ("arena_hard", "vanilla", "auto_j", "prometheus_2", "skywork_critic", "custom")


def pair(i: int, **fields: object) -> dict:
    return {
        "pair_id": f"p{i}",
        "original_id": i,
        "source": "mmlu-pro-math",
        "question": f"What is {i}+{i}?",
        "response_A": f"It is {2 * i}.",
        "response_B": f"It is {2 * i + 1}.",
        "label": "A>B",
        **fields,
    }


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


@pytest.fixture(scope="module")
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer("My final verdict is [[A>B]]") as fake:
        yield fake


@pytest.fixture(scope="module")
def small_repo(tmp_path_factory) -> tuple[str, str]:
    """A JudgeBench-shaped repository with three pairs (no prompts: the package's own are used)."""
    rows = "".join(json.dumps(pair(i)) + "\n" for i in range(3))
    path = tmp_path_factory.mktemp("small-remote") / "JudgeBench"
    sha = make_repo(path, {"data/small.jsonl": rows}, copy_shared=False)
    return f"file://{path}", sha


@pytest.fixture()
def good_file(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "pairs.jsonl", [pair(i) for i in range(3)])


def base_args(server: FakeOpenAIServer, tmp_path: Path, *extra: str) -> list[str]:
    return [
        "run",
        "--model",
        "judge-model",
        "--base-url",
        server.base_url,
        "--db-url",
        f"sqlite:///{tmp_path}/j.db",
        "--no-progress",
        "--no-report",
        *extra,
    ]


def assert_one_error(result: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """Exit 2 and exactly one `error:` line naming the problem; no traceback, no Prefect error noise."""
    assert result.returncode == 2, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert not [line for line in lines if "| ERROR" in line], result.stderr
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    assert CANARY_KEY not in result.stderr + result.stdout
    return errors[0]


# ----- the data file ---------------------------------------------------------------------------------


def test_malformed_rows_are_skipped_named_and_counted(run_cli, server, tmp_path: Path) -> None:
    rows: list[object] = [
        pair(0),
        '{"pair_id": "broken", "source": ',  # line 2: not JSON
        "[1, 2, 3]",  # line 3: not an object
        {k: v for k, v in pair(3).items() if k != "question"},  # line 4: missing field
        pair(4, label="A=B"),  # line 5: wrong label
        pair(5),
    ]
    path = write_jsonl(tmp_path / "pairs.jsonl", rows)
    result = run_cli(*base_args(server, tmp_path, "--data-path", str(path)))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    results = json.loads((tmp_path / "results" / "latest" / "results.json").read_text())
    assert results["dataset"]["n_pairs"] == 2
    assert results["dataset"]["skipped_rows"] == 4
    assert results["invalid"]["skipped_rows"] == 4
    reasons = {s["line"]: s["reason"] for s in results["dataset"]["skipped"]}
    assert sorted(reasons) == [2, 3, 4, 5]
    assert "JSON" in reasons[2] and "object" in reasons[3]
    assert "question" in reasons[4] and "missing" in reasons[4]
    assert "label" in reasons[5]
    assert results["overall_accuracy"]["total_samples"] == 2


def test_duplicate_pair_ids_stop_the_run_naming_the_id(run_cli, server, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "pairs.jsonl", [pair(0), pair(1), pair(2, pair_id="p1")])
    assert_one_error(
        run_cli(*base_args(server, tmp_path, "--data-path", str(path))), "duplicate pair_id 'p1'", "line 3"
    )


def test_empty_file(run_cli, server, tmp_path: Path) -> None:
    path = tmp_path / "pairs.jsonl"
    path.write_text("")
    assert_one_error(run_cli(*base_args(server, tmp_path, "--data-path", str(path))), "no valid pairs")


def test_file_with_only_bad_rows_names_the_first_problem(run_cli, server, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "pairs.jsonl", [pair(0, label="tie"), "not json"])
    assert_one_error(
        run_cli(*base_args(server, tmp_path, "--data-path", str(path))), "no valid pairs", "line 1", "label"
    )


def test_missing_data_path(run_cli, server, tmp_path: Path) -> None:
    assert_one_error(
        run_cli(*base_args(server, tmp_path, "--data-path", str(tmp_path / "nope.jsonl"))), "file not found"
    )


# ----- the repository --------------------------------------------------------------------------------


def test_repository_that_does_not_exist(run_cli, server, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-repo"
    assert_one_error(run_cli(*base_args(server, tmp_path, "--repo-url", f"file://{missing}")), "no-such-repo")
    assert_one_error(run_cli(*base_args(server, tmp_path, "--repo-url", str(missing))), "no-such-repo")


def test_unknown_ref(run_cli, server, small_repo, tmp_path: Path) -> None:
    url, _ = small_repo
    assert_one_error(
        run_cli(
            *base_args(server, tmp_path, "--repo-url", url, "--ref", "no-such-branch", "--data-file", "small.jsonl")
        ),
        "ref 'no-such-branch' not found",
    )


def test_missing_data_file_in_the_checkout(run_cli, server, small_repo, tmp_path: Path) -> None:
    url, sha = small_repo
    line = assert_one_error(
        run_cli(*base_args(server, tmp_path, "--repo-url", url, "--ref", sha, "--data-file", "nope.jsonl")),
        "data file 'nope.jsonl' not found",
    )
    assert "small.jsonl" in line, "the error should list the files that are there"


# ----- database and endpoint -------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["nope://x", "postgresql://127.0.0.1:1/x"])
def test_bad_db_url(run_cli, server, good_file: Path, tmp_path: Path, url: str) -> None:
    args = base_args(server, tmp_path, "--data-path", str(good_file))
    args[args.index("--db-url") + 1] = url
    assert_one_error(run_cli(*args), "--db-url", url.split(":")[0])


def test_unreachable_endpoint(run_cli, server, good_file: Path, tmp_path: Path) -> None:
    args = base_args(server, tmp_path, "--data-path", str(good_file))
    args[args.index("--base-url") + 1] = "http://127.0.0.1:9/v1"
    assert_one_error(run_cli(*args), "cannot reach the endpoint", "127.0.0.1:9")


# ----- the judge -------------------------------------------------------------------------------------


def test_unknown_judge_type_lists_the_valid_ones(run_cli, server, good_file: Path, tmp_path: Path) -> None:
    line = assert_one_error(
        run_cli(*base_args(server, tmp_path, "--data-path", str(good_file), "--judge-type", "gpt_judge")),
        "unknown judge type 'gpt_judge'",
    )
    for name in VALID_TEMPLATE_NAMES:
        assert name in line


def test_template_with_a_syntax_error(run_cli, server, good_file: Path, tmp_path: Path) -> None:
    if not shared_data_available():
        pytest.skip(NO_DATA_REASON)
    templates = tmp_path / "templates"
    shutil.copytree(SHARED / "utils" / "templates", templates)
    (templates / "arena_hard_judge_prompt.jinja2").write_text("{{ prompt }\n{% if answer_a %}\n")
    assert_one_error(
        run_cli(*base_args(server, tmp_path, "--data-path", str(good_file), "--templates-dir", str(templates))),
        "arena_hard_judge_prompt.jinja2",
        "syntax error",
    )


CUSTOM_JUDGES = """
class WrongDecision:
    def format(self, question, answer_A, answer_B):
        return [{"role": "user", "content": f"{question}\\n[A] {answer_A}\\n[B] {answer_B}"}]

    def parse(self, text):
        return "A wins"


class RaisingParser:
    def format(self, question, answer_A, answer_B):
        return [{"role": "user", "content": f"raising {question}\\n[A] {answer_A}\\n[B] {answer_B}"}]

    def parse(self, text):
        raise ValueError("no idea what " + text[:12] + " means")
"""


def custom_judge_args(server: FakeOpenAIServer, tmp_path: Path, good_file: Path, judge_class: str) -> list[str]:
    """Run arguments judging `good_file` with `judge_class` of CUSTOM_JUDGES, written to a file in `tmp_path`."""
    (tmp_path / "judges_mine.py").write_text(CUSTOM_JUDGES)
    return base_args(
        server,
        tmp_path,
        "--data-path",
        str(good_file),
        "--judge-template",
        f"{tmp_path / 'judges_mine.py'}:{judge_class}",
    )


def test_custom_judge_returning_an_unknown_decision_stops_the_run(
    run_cli, server, good_file: Path, tmp_path: Path
) -> None:
    args = custom_judge_args(server, tmp_path, good_file, "WrongDecision")
    assert_one_error(run_cli(*args), "custom:WrongDecision.parse returned 'A wins'")


def test_custom_judge_whose_parse_raises_makes_judgments_invalid(
    run_cli, server, good_file: Path, tmp_path: Path
) -> None:
    args = custom_judge_args(server, tmp_path, good_file, "RaisingParser")
    result = run_cli(*args)
    assert result.returncode == 4, result.stderr  # every verdict invalid: the run measured nothing
    assert "run failed: 6 of 6 judgments failed or were invalid" in result.stderr
    assert "Traceback" not in result.stderr
    [folder] = [p.parent for p in (tmp_path / "results").glob("*/results.json")]  # its own folder
    assert not (tmp_path / "results" / "latest").exists(), "latest names a run that measured nothing"
    assert "6 of 6 judgments failed or were invalid" in (folder / "FAILED").read_text()
    results = json.loads((folder / "results.json").read_text())
    assert results["run"]["status"] == "failed"
    assert results["invalid"]["invalid_judgments"] == 6
    assert results["invalid"]["failed_judgments"] == 0
    assert any("ValueError" in reason and "no idea what" in reason for reason in results["invalid"]["reasons"])
    rows = [json.loads(line) for line in next(folder.glob("*.jsonl")).read_text().splitlines()]
    judgments = [j for row in rows for j in row["judgments"]]
    assert len(judgments) == 6
    assert all(
        j["decision"] is None
        and j["status"] == "invalid"
        and j["judgment"]["response"] == "My final verdict is [[A>B]]"
        for j in judgments
    )


# ----- options ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value", "fragment"),
    [
        ("--concurrency", "0", "--concurrency"),
        ("--max-samples", "0", "--max-samples"),
        ("--request-timeout", "-1", "--request-timeout"),
    ],
)
def test_bad_numbers(run_cli, server, good_file: Path, tmp_path: Path, option: str, value: str, fragment: str) -> None:
    assert_one_error(
        run_cli(*base_args(server, tmp_path, "--data-path", str(good_file), option, value)), fragment, value
    )


def test_model_is_required(run_cli, server, good_file: Path, tmp_path: Path) -> None:
    args = base_args(server, tmp_path, "--data-path", str(good_file))
    del args[1:3]
    assert_one_error(run_cli(*args), "--model is required")

"""The listing commands at 80 columns, as a newcomer's terminal shows them: no line longer, run ids whole
(what `compare` and `report` take), nothing cut with "…"; and JSON/CSV for scripts. A real results
database written by the project's own db module, the real CLI in a subprocess."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.conftest import requires_shared
from tests.test_leaderboard import published  # noqa: F401 - the published outputs fixture

ROOT = Path(__file__).resolve().parents[1]
LONG_DATA_FILE = "dataset=judgebench,response_model=claude-3-5-sonnet-20240620.jsonl"
SOURCES = ["mmlu-pro-law", "livebench-reasoning", "livebench-math", "livecodebench"]


def cli(tmp_path: Path, *args: str, columns: int = 80) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "JUDGEBENCH_DB_URL"}
    return subprocess.run(
        [sys.executable, "-m", "judgebench_flows.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**env, "COLUMNS": str(columns)},
    )


def save(engine, run_id: str, started: datetime, correct_every: int, model: str) -> None:
    from judgebench_flows.data import db

    db.save_run(
        engine,
        run_id=run_id,
        config_key="cfg",
        judge_type="arena_hard",
        model=model,
        repo_url="https://github.com/ScalerLab/JudgeBench.git",
        commit="e2c52c284e735e139b3daa61c206ee208f36c461",
        data_file=LONG_DATA_FILE,
        status="completed",
        started=started,
        finished=started + timedelta(minutes=3),
        n_pairs=40,
        overall_accuracy=0.625,
        ci_low=0.475,
        ci_high=0.775,
        results_json=json.dumps({"run": {"mode": "both-orders"}}),
    )
    rows = []
    for i in range(40):
        decision = "A>B" if i % correct_every else "B>A"
        for order in (0, 1):
            rows.append(
                {
                    "run_id": run_id,
                    "pair_id": f"{i:08d}-28d5-5a3c-b1af-fedcf5543e72",
                    "order_index": order,
                    "source": SOURCES[i % 4],
                    "category": SOURCES[i % 4].removesuffix("-law"),
                    "label": "A>B",
                    "status": "ok",
                    "decision": decision,
                    "decision_for_pair": decision,
                }
            )
    db.save_judgments(engine, rows)


@pytest.fixture()
def two_runs(tmp_path: Path) -> tuple[str, str, str]:
    from judgebench_flows.data import db

    url = f"sqlite:///{tmp_path / 'results.db'}"
    engine = db.open_database(url)
    t0 = datetime(2026, 11, 20, 2, 0, tzinfo=timezone.utc)
    first, second = "6d4a" + "0" * 28, "6d4a" + "1" * 28  # the same 8-character start: only whole ids tell
    save(engine, first, t0, 2, "Qwen/Qwen2.5-72B-Instruct-with-a-long-name")
    save(engine, second, t0 + timedelta(days=1), 3, "Qwen/Qwen2.5-72B-Instruct-with-a-long-name")
    engine.dispose()
    return url, first, second


def assert_fits(text: str, width: int = 80) -> None:
    too_long = [line for line in text.splitlines() if len(line.rstrip()) > width]
    assert not too_long, text
    assert "…" not in text, text


def test_history_fits_80_columns_with_whole_run_ids(tmp_path: Path, two_runs) -> None:
    url, first, second = two_runs
    result = cli(tmp_path, "history", "--db-url", url)
    assert result.returncode == 0, result.stderr
    assert_fits(result.stdout)
    assert first in result.stdout and second in result.stdout
    assert "Qwen/Qwen2.5-72B" in result.stdout and "claude-3-5-sonnet-20240620 pairs" in result.stdout
    wide = cli(tmp_path, "history", "--db-url", url, columns=200)
    assert first in wide.stdout and max(len(line) for line in wide.stdout.splitlines()) <= 200


def test_history_as_json_and_csv(tmp_path: Path, two_runs) -> None:
    url, first, second = two_runs
    runs = json.loads(cli(tmp_path, "history", "--db-url", url, "--format", "json").stdout)
    assert [r["run_id"] for r in runs] == [second, first]
    assert runs[0]["data_file"] == LONG_DATA_FILE and runs[0]["overall_accuracy"] == 0.625
    rows = list(csv.DictReader(io.StringIO(cli(tmp_path, "history", "--db-url", url, "--format", "csv").stdout)))
    assert [r["run_id"] for r in rows] == [second, first] and rows[0]["n_pairs"] == "40"


def test_compare_fits_80_columns_with_whole_run_ids(tmp_path: Path, two_runs) -> None:
    url, first, second = two_runs
    result = cli(tmp_path, "compare", first, second, "--db-url", url)
    assert result.returncode == 0, result.stderr
    assert_fits(result.stdout)
    assert first in result.stdout and second in result.stdout
    assert "pairs changed verdict" in result.stdout
    header = next(line.split() for line in result.stdout.splitlines() if line.split()[:1] == ["slice"])
    assert "verdict" in header and "n" in header, result.stdout  # headers whole, not "verdic" / "t"
    assert " verdict " in result.stdout.splitlines()[3] + " ", result.stdout  # the header whole, not "verdic"/"t"
    assert "00000002-28d5-5a3c-b1af-fedcf5543e72" in result.stdout  # a pair id on one line, whole
    for category in ("livebench-reasoning", "livecodebench", "livebench-math"):
        assert category in result.stdout, result.stdout  # category names never cut mid-word
    # each slice's 95% CI whole on its row ("+0.0..+0.0"), never wrapped as "+0.0 to" over "+0.0"
    intervals = re.findall(r"(?<!\S)[+-]\d+\.\d\.\.[+-]\d+\.\d(?!\S)", result.stdout)
    assert len(intervals) == 5, result.stdout  # overall and the four categories
    assert not re.search(r"\d to\s*$", result.stdout, re.M), result.stdout


def test_a_long_list_of_unreadable_files_is_one_line_naming_where_the_list_is() -> None:
    from judgebench_flows.scoring.published import unread_note

    unread = [(f"dataset=judgebench,judge_name=j{i},judge_model=m.jsonl", "line 1: not JSON") for i in range(31)]
    note = unread_note(3, unread)
    assert note.count("judge_name=") == 3 and "31 could not be read" in note and "`unread`" in note, note
    assert unread_note(3, unread[:2]).count("judge_name=") == 2


def test_rescore_fits_80_columns_with_whole_pair_ids(tmp_path: Path) -> None:
    """A JudgeBench outputs file whose recorded decisions our parser reads differently: the report and its
    table of changed decisions fit 80 columns, pair ids whole."""
    rows = []
    for i in range(8):
        answers = ("My final verdict is [[A>B]]", "I think [[A>>B]]. So: [[A>B]]")  # recorded: A>B, then None
        rows.append(
            {
                "pair_id": f"{i:08d}-28d5-5a3c-b1af-fedcf5543e72",
                "source": SOURCES[i % 4],
                "label": "A>B",
                "judge_name": "arena_hard",
                "judgments": [
                    {"judgment": {"response": text}, "decision": "A>B" if order == 0 else None}
                    for order, text in enumerate(answers)
                ],
            }
        )
    path = tmp_path / "dataset=judgebench,response_model=gpt-4o-2024-05-13,judge_name=arena_hard.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    result = cli(tmp_path, "rescore", str(path), "--judge-type", "arena_hard")
    assert result.returncode == 0, result.stderr
    assert_fits(result.stdout)
    assert "8 decisions differ from the recorded ones, in 8 pairs" in result.stdout
    assert "00000007-28d5-5a3c-b1af-fedcf5543e72" in result.stdout


def wide_lines(text: str, width: int = 80) -> list[str]:
    return [line for line in text.splitlines() if len(line.rstrip()) > width]


@requires_shared
@pytest.mark.slow  # a dozen CLI processes and a repository
def test_every_command_fits_80_columns(tmp_path: Path, two_runs, published) -> None:  # noqa: F811
    """Each command a user types, at COLUMNS=80 against a small results database, published outputs, the
    shipped matrix and a stored run's results: no line of stdout or stderr wider than 80 columns, nothing
    cut with an ellipsis. Errors included: a long path or message is wrapped at words, never cut."""
    url, first, second = two_runs
    fixtures = Path(__file__).parent / "fixtures" / "results"
    summary = (
        "import sys; from judgebench_flows.views.summaries import print_results; "
        "from judgebench_flows.scoring.run_results import RunResults; "
        "print_results(RunResults.model_validate_json(open(sys.argv[1]).read()))"
    )
    repo = ["--repo-url", published["url"], "--ref", published["sha"], "--cache-dir", str(tmp_path / "cache")]
    deep = "missing/dataset=judgebench,response_model=none.jsonl"  # wider than what is left of the line
    with_files = json.loads((fixtures / "first-run.json").read_text())
    folder = "results/72bbb2cdaba144a189ba65cfcf909171/"
    with_files["outputs"] = {
        "results": folder + "results.json",
        "judgments": folder + "dataset=judgebench,response_model=gpt-4o-2024-05-13,judge_name=arena_hard,"
        "judge_model=stand-in.jsonl",
        "report": folder + "report.html",
    }
    (tmp_path / "with-files.json").write_text(json.dumps(with_files))
    commands = {
        "history": ["history", "--db-url", url],
        "compare": ["compare", first, second, "--db-url", url],
        "report": ["report", second, "--db-url", url],
        "retention": ["retention", "--keep-days", "90", "--dry-run", "--db-url", url],
        "leaderboard": ["leaderboard", *repo, "--db-url", url, "--result-path", str(tmp_path / "lb.json")],
        "estimate": ["estimate", "--model", "gpt-4o-mini", *repo, "--max-samples", "20"],
        "--help": ["--help"],
        "run --help": ["run", "--help"],
        "error: a missing data file": ["run", "--model", "m", "--data-path", deep],
        "error: a bad option value": ["history", "--db-url", url, "--limit", "many"],
        "run's summary": ["-c", summary, str(fixtures / "first-run.json")],
        "run's summary with a regression check": [
            "-c",
            summary,
            str(fixtures / "second-run-with-regression-check.json"),
        ],
        "run's summary with its files": ["-c", summary, str(tmp_path / "with-files.json")],
        "nightly matrix": ["-m", "judgebench_flows.deployments.matrix", str(ROOT / "deployments" / "nightly.yaml")],
        "deploy --help": ["-m", "judgebench_flows.deployments.deploy", "--help"],
    }
    widths, problems = {}, []
    for name, args in commands.items():
        python = args[0] in ("-c", "-m")
        if python:
            result = python_at_80(tmp_path, *args)
        else:
            result = on_a_terminal(tmp_path, *args) if name.startswith("error") else cli(tmp_path, *args)
        output = result.stdout + result.stderr
        if "Traceback" in output or name.startswith("error") != (result.returncode == 2):
            problems.append(f"{name}: exit {result.returncode}\n{output}")
        if wide_lines(output) or "…" in output:
            problems.append(
                f"{name}: lines wider than 80 columns or cut:\n" + "\n".join(wide_lines(output) or [output])
            )
        widths[name] = max((len(line.rstrip()) for line in output.splitlines()), default=0)
    assert not problems, "\n\n".join(problems)
    assert all(0 < width <= 80 for width in widths.values()), widths


def on_a_terminal(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`judgebench ARGS` with its stderr on a pseudo-terminal, as in a user's shell (stdout a pipe)."""
    import pty

    controller, terminal = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "JUDGEBENCH_DB_URL"}
    with os.fdopen(controller, "rb", buffering=0) as said:
        process = subprocess.Popen(
            [sys.executable, "-m", "judgebench_flows.cli.main", *args],
            stdout=subprocess.PIPE,
            stderr=terminal,
            cwd=tmp_path,
            env={**env, "COLUMNS": "80"},
        )
        os.close(terminal)
        stdout = process.communicate(timeout=120)[0]
        chunks = []
        with contextlib.suppress(OSError):  # EIO once the process closed its end
            while chunk := said.read(4096):
                chunks.append(chunk)
    stderr = b"".join(chunks).decode().replace("\r\n", "\n")
    return subprocess.CompletedProcess(process.args, process.returncode, stdout.decode(), stderr)


def python_at_80(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "JUDGEBENCH_DB_URL"}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=120, cwd=tmp_path, env={**env, "COLUMNS": "80"}
    )

"""The figures docs/cost.md quotes are what its commands print today: each `$ judgebench estimate ...`
transcript is run on the benchmark data (a git copy, its commit in place of the pinned one) and must
print the lines shown; each `$ judgebench run ... --max-cost` refusal must quote the worst case that
`estimate` computes for the same options. A change to prompts, token counting or prices that moves a
figure fails here instead of leaving the page wrong.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CANARY_KEY, requires_shared

ROOT = Path(__file__).resolve().parents[1]
COST_PAGE = ROOT / "docs" / "cost.md"
TRANSCRIPT = re.compile(r"^```\n(\$ judgebench .*?)^```", re.MULTILINE | re.DOTALL)

pytestmark = [pytest.mark.slow, requires_shared]  # each command clones and reads the whole GPT-4o file


def transcripts() -> list[tuple[list[str], list[str]]]:
    """(command arguments after `judgebench`, the lines shown below it) for every transcript on the page."""
    found = []
    for block in TRANSCRIPT.findall(COST_PAGE.read_text(encoding="utf-8")):
        command, *shown = block.strip().splitlines()
        found.append((shlex.split(command.removeprefix("$ judgebench ")), shown))
    return found


def flat(text: str) -> str:
    return " ".join(text.split())


def estimate(args: list[str], repo: tuple[str, str], tmp_path: Path) -> str:
    url, sha = repo
    done = subprocess.run(
        [sys.executable, "-m", "judgebench_flows.cli.main", "estimate", *args, "--repo-url", url, "--ref", sha]
        + ["--cache-dir", str(tmp_path / "cache")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "OPENAI_API_KEY": CANARY_KEY, "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_page_has_its_transcripts() -> None:
    commands = [args[0] for args, _ in transcripts()]
    assert "estimate" in commands and "run" in commands


def test_estimate_transcripts_print_what_the_page_shows(judgebench_repo, tmp_path) -> None:
    for args, shown in transcripts():
        if args[0] != "estimate":
            continue
        printed = flat(estimate(args[1:], judgebench_repo, tmp_path))
        for line in shown:
            assert flat(line) in printed, f"docs/cost.md shows {line!r}; the command prints:\n{printed}"


def test_a_refused_run_quotes_the_worst_case_estimate_computes(judgebench_repo, tmp_path) -> None:
    for args, shown in transcripts():
        if args[0] != "run" or "--max-cost" not in args:
            continue
        at = args.index("--max-cost")
        options = [a for a in args[1:at] + args[at + 2 :] if a != "..."] + ["--base-url", "https://api.openai.com/v1"]
        printed = flat(estimate(options, judgebench_repo, tmp_path))
        worst = re.search(r"worst case: (\$[\d,.]+)", printed)
        tokens = re.search(r"([\d,]+) prompt tokens \(estimated\) \+ ([\d,]+) output tokens", printed)
        assert worst and tokens, printed
        quoted = flat(" ".join(shown))
        assert f"the worst case is {worst[1]}" in quoted, (quoted, printed)
        assert f"{tokens[1]} prompt tokens (estimated) + {tokens[2]} output tokens" in quoted, (quoted, printed)

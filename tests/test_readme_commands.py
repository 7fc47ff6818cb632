"""Every shell block of README.md and docs/*.md runs as written, so an example cannot drift from what works.

Each fenced `bash`/`sh`/`shell` block runs in `bash -euo pipefail`, in order, one working directory per
document (later blocks read what earlier ones wrote), with the project's folders (`judges/`, ...) beside
it as in a clone. The world the blocks expect is made real and local:

- `~/src/JudgeBench` is a git copy of the JudgeBench data (tests/_benchmark_data.py) with published
  judges' `outputs/` files, and HOME points at its parent; the pinned commit in the text becomes that
  copy's commit and the GitHub URL its file:// URL;
- port 8000/8001 of the bundled server become free ports;
- `judgebench run` and Prefect's own commands (`prefect deploy`, a worker) talk to the session's Prefect server.

A block that cannot run here (it installs packages, needs GitHub or a paid API, starts long-lived
services) says so in the Markdown with `<!-- readme-test: skip (reason) -->` on the line before it; a
block over a few seconds says `<!-- readme-test: slow -->`. A block marked `<!-- readme-test: continued -->`
runs in the shell of the block before it (its variables and background processes still there), as a
reader typing the document's commands would run it.

A block that starts this home's Prefect server on a port of its own (`PREFECT_SERVER_API_PORT=4300`) gets a
PREFECT_HOME of its own and no PREFECT_API_URL, as on a fresh machine; its port 4300 becomes a free port,
and the server is stopped afterwards (`prefect server stop`) even when the block failed.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from judgebench_flows.core.config_defaults import DEFAULT_REF, DEFAULT_REPO_URL
from tests.conftest import CANARY_KEY, CLAUDE_FILE, GPT4O_FILE, SHARED, load_jsonl, make_repo, requires_shared

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PREFECT_CLI = re.compile(r"^prefect ", re.MULTILINE)
FENCE = re.compile(r"^```(bash|sh|shell|console)\s*$")
MARKER = re.compile(r"<!--\s*readme-test:\s*(skip|slow|continued)\s*(?:\((.*)\))?\s*-->")
DOCUMENTED_PORTS = ("8000", "8001", "4300")  # the bundled servers' and a hand-started Prefect server's
PROJECT_FOLDERS = ("judges", "deployments", "templates", "flows", "tasks", "benchmarks", "prefect.yaml")


@dataclass(frozen=True)
class Block:
    document: Path
    line: int
    code: str
    marker: str | None  # "skip", "slow" or "continued"
    reason: str | None

    @property
    def id(self) -> str:
        return f"{self.document.name}:{self.line}"


def shell_blocks(document: Path) -> list[Block]:
    lines = document.read_text().splitlines()
    blocks, index = [], 0
    while index < len(lines):
        if FENCE.match(lines[index]):
            end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
            before = next((lines[i] for i in range(index - 1, -1, -1) if lines[i].strip()), "")
            marker = MARKER.search(before)
            blocks.append(
                Block(
                    document,
                    index + 1,
                    "\n".join(lines[index + 1 : end]) + "\n",
                    marker and marker.group(1),
                    marker and marker.group(2),
                )
            )
            index = end
        index += 1
    return _joined(blocks)


def _joined(blocks: list[Block]) -> list[Block]:
    """Each `continued` block appended to the one before it: one shell runs them in order."""
    joined: list[Block] = []
    for block in blocks:
        if block.marker == "continued" and joined:
            first = joined.pop()
            block = Block(first.document, first.line, first.code + block.code, first.marker, first.reason)
        joined.append(block)
    return joined


def every_block() -> list:
    params = []
    for document in DOCUMENTS:
        for block in shell_blocks(document):
            marks = [pytest.mark.slow] if block.marker == "slow" else []
            if block.marker == "skip":
                marks = [pytest.mark.skip(reason=f"{block.id}: {block.reason or 'marked skip'}")]
            params.append(pytest.param(block, id=block.id, marks=marks))
    return params


def test_every_skip_says_why_and_every_block_is_found() -> None:
    blocks = [block for document in DOCUMENTS for block in shell_blocks(document)]
    assert len([b for b in blocks if b.document.name == "README.md" and b.marker != "skip"]) >= 6
    assert all(block.reason for block in blocks if block.marker == "skip")


HAND_STARTED_SERVER = "export PREFECT_SERVER_API_PORT=4300"  # docs/prefect-server.md: starting it yourself


def watched_nights(output: str) -> None:
    """docs/prefect-server.md's two watched nights: what the docs say `--watch` prints, and its exit code."""
    said = " ".join(output.split())  # Prefect wraps its lines at the terminal's width
    passed, failed = said.split("the night failed: exit", 1)[0].rsplit("Created flow run", 1)
    assert "Flow run finished successfully in 'Completed'." in passed, output
    assert "arena_hard · gpt-4o-mini · gpt-4o: completed, accuracy" in passed, output  # the night's log lines
    reason = r"Finished in state Failed\([\"']4 of 4 configurations need a look: "
    assert re.search(reason + r".*vanilla · gpt-4o-mini · claude \(failed: run failed: ", failed), output
    assert "Traceback" not in failed, output  # the night returns its Failed state: no traceback of ours
    assert "Flow run finished in state 'Failed'." in failed, output
    assert "the night failed: exit 1" in said, output
    assert '"api_url":"http://127.0.0.1:' in said.replace(" ", ""), output  # the UI talks to its own API
    watched = output[output.index("Created flow run") :].splitlines()
    wide = [line for line in watched if len(line.rstrip()) > 80 and " " in line.strip() and "└── " not in line]
    assert not wide, "the nights' lines wider than 80 columns (COLUMNS=80):\n" + "\n".join(wide)


OUTPUT_CHECKS = {HAND_STARTED_SERVER: watched_nights}  # a block's own expectations beyond exit 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def judgebench_home(tmp_path_factory) -> tuple[Path, str]:
    """A HOME whose ~/src/JudgeBench is a git copy of the data with published outputs; (home, commit)."""
    from tests.test_leaderboard import jsonl, llm_file, output_name, reward_file

    gpt4o, claude = load_jsonl(SHARED / "data" / GPT4O_FILE), load_jsonl(SHARED / "data" / CLAUDE_FILE)
    files = {
        output_name(GPT4O_FILE, "arena_hard", "o1-mini-2024-09-12"): llm_file(
            gpt4o, "arena_hard", "o1-mini-2024-09-12", 3
        ),
        output_name(GPT4O_FILE, "reward_model", "Skywork/Skywork-Reward-Gemma-2-27B"): reward_file(
            gpt4o, "Skywork/Skywork-Reward-Gemma-2-27B", 4
        ),
        output_name(CLAUDE_FILE, "arena_hard", "claude-3-haiku-20240307"): llm_file(
            claude, "arena_hard", "claude-3-haiku-20240307", 6
        ),
    }
    home = tmp_path_factory.mktemp("home")
    commit = make_repo(home / "src" / "JudgeBench", {name: jsonl(rows) for name, rows in files.items()})
    return home, commit


@pytest.fixture(scope="module")
def workdirs(tmp_path_factory) -> dict[str, Path]:
    """One working directory per document, shaped like a clone of this project."""
    made = {}
    for document in DOCUMENTS:
        path = tmp_path_factory.mktemp(document.stem.replace(".", "-"))
        for name in PROJECT_FOLDERS:
            if (ROOT / name).exists():
                (path / name).symlink_to(ROOT / name)
        made[document.name] = path
    return made


def as_here(code: str, home: Path, commit: str) -> str:
    """The block with this machine's copy of JudgeBench and free ports in place of GitHub's and 8000."""
    code = code.replace(DEFAULT_REF, commit).replace(DEFAULT_REPO_URL, f"file://{home / 'src' / 'JudgeBench'}")
    for port in DOCUMENTED_PORTS:
        code = re.sub(rf"(127\.0\.0\.1:|--port |_PORT=){port}\b", rf"\g<1>{{port{port}}}", code)
    ports = {f"port{port}": str(free_port()) for port in DOCUMENTED_PORTS}
    for key, value in ports.items():
        code = code.replace("{" + key + "}", value)
    return code


@requires_shared
@pytest.mark.parametrize("block", every_block())
def test_documented_block_runs(block: Block, judgebench_home, workdirs, request, tmp_path_factory) -> None:
    home, commit = judgebench_home
    env = {
        **os.environ,
        "HOME": str(home),
        "OPENAI_API_KEY": CANARY_KEY,
        "JUDGEBENCH_CACHE_DIR": str(home / "cache"),
        "COLUMNS": "80",
    }
    starts_server = HAND_STARTED_SERVER in block.code
    if starts_server:  # a fresh machine's Prefect: its own home, no server configured
        env = {key: value for key, value in env.items() if key not in ("PREFECT_API_URL", "PREFECT_SERVER_API_PORT")}
        env["PREFECT_HOME"] = str(tmp_path_factory.mktemp("hand-started-prefect-home"))
    elif any(command in block.code for command in ("judgebench run", "--flow", "prefect deploy")):
        request.getfixturevalue("prefect_server")  # exports PREFECT_API_URL for the subprocess
        env = {**env, "PREFECT_API_URL": os.environ["PREFECT_API_URL"], "PREFECT_HOME": os.environ["PREFECT_HOME"]}
    # Its own process group: whatever the block leaves running (a server or worker started with `&` whose
    # `kill` it outlived) is stopped with the block, not left behind on the machine.
    process = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", as_here(block.code, home, commit)],
        cwd=workdirs[block.document.name],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=1200 if starts_server else 600)
    finally:
        if starts_server:
            subprocess.run(
                [sys.executable, "-m", "prefect", "server", "stop"], env=env, capture_output=True, timeout=120
            )
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    result = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    assert result.returncode == 0, (
        f"{block.id} exited {result.returncode}\n{block.code}\n{result.stdout}\n{result.stderr}"
    )
    assert "Traceback" not in result.stderr, result.stderr
    for command, check in OUTPUT_CHECKS.items():
        if command in block.code:
            check(result.stdout + result.stderr)
    if block.document.name != "README.md":
        return  # docs/ may show wider output (rescore's table); the README's commands fit 80 columns
    if PREFECT_CLI.search(block.code):
        return  # Prefect's own commands (`prefect deploy`, `--watch`) print links and events wider than 80
    wide = [line for line in (result.stdout + result.stderr).splitlines() if len(line.rstrip()) > 80]
    assert not wide, f"{block.id}: lines over 80 columns at COLUMNS=80:\n" + "\n".join(wide)


def test_the_documented_team_setup_is_the_one_tested_here() -> None:
    """The team setup's block of docs/operations-deployments.md is skipped here (it needs several
    machines); tests/test_pool_team.py's `team` fixture runs its one-time steps as read from it, so the
    block and the tested setup cannot drift apart."""
    from tests.test_pool_team import DOCS, POOL, _documented_steps

    deploy, automations = _documented_steps()
    assert deploy[:3] == ["-m", "judgebench_flows.deployments.deploy", "--installed"], deploy
    assert automations[-2:] == ["--webhook-url", "http://127.0.0.1:9/alerts"], automations
    workers = [line for line in DOCS.read_text().splitlines() if line.startswith("prefect worker start")]
    assert workers and all(f"--pool {POOL} " in line for line in workers), workers


def test_the_copy_without_git_becomes_a_repository_on_a_fresh_account(tmp_path) -> None:
    """The README's inline command that turns a copy of JudgeBench (no .git) into a repository works where
    git has no name or e-mail yet (a fresh HOME: `git commit` refuses, `Author identity unknown`)."""
    command = next(re.finditer(r"`(git init [^`]*)`", (ROOT / "README.md").read_text())).group(1)
    home, copy = tmp_path / "home", tmp_path / "JudgeBench"
    home.mkdir()
    (home / ".gitconfig").write_text("[user]\n\tuseConfigOnly = true\n")  # no guessing from the host name
    (copy / "data").mkdir(parents=True)
    (copy / "data" / "pairs.jsonl").write_text("{}\n")
    git_identity = ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL")
    env = {key: value for key, value in os.environ.items() if key not in git_identity and not key.startswith("GIT_")}
    env.update(HOME=str(home), GIT_CONFIG_NOSYSTEM="1")
    made = subprocess.run(["bash", "-c", command], cwd=copy, env=env, capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, f"{command}\n{made.stderr}"
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=copy, env=env, capture_output=True, text=True)
    assert head.returncode == 0 and len(head.stdout.strip()) == 40, head.stderr

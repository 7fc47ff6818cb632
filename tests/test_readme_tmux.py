"""A new user's walk through the README in an 80-column terminal: its commands, in order, typed into a real
tmux pane (80x50) with a fresh HOME, and what the pane shows read back. No output line of ours may be wider
than 80 columns: on a terminal, a wider line is cut by the terminal, mid-word, at column 80.

Every block the README's own test runs, the nightly section's deployments, worker and watched ad-hoc run
included (Prefect's own output is drawn by rich at the pane's width); the world they expect is made as
tests/test_readme_commands.py makes it (a local JudgeBench copy for GitHub's, free ports for 8000/8001,
the session's Prefect server).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid

import pytest

from tests.conftest import CANARY_KEY, requires_shared
from tests.test_readme_commands import ROOT, as_here, judgebench_home, shell_blocks, workdirs  # noqa: F401

# Lines that are not ours: bash's job notices, Prefect's first-run telemetry notice (shown once per
# PREFECT_HOME, on a terminal only), and the links and parameters `prefect deploy` and `prefect deployment
# run` print unwrapped (Prefect's own lines: a deployment's and a flow run's page, the run's parameters).
NOT_OURS = (
    "[1]",
    "[2]",
    "To opt out: set PREFECT_SERVER_ANALYTICS_ENABLED",
    "View Deployment in UI: http",
    "└── Parameters: {",
    "└── URL: http",
)
PROMPT = "walk$ "


def walked_blocks() -> list:
    return [block for block in shell_blocks(ROOT / "README.md") if block.marker != "skip"]


@requires_shared
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed: the 80-column walk needs a terminal")
def test_the_readme_in_an_80_column_tmux(judgebench_home, workdirs, prefect_server, tmp_path) -> None:  # noqa: F811
    home, commit = judgebench_home
    cwd = workdirs["README.md"]
    socket = f"walk-{uuid.uuid4().hex[:8]}"
    tmux = ["tmux", "-L", socket, "-f", "/dev/null"]
    env = {
        "HOME": str(home),
        "PATH": os.environ["PATH"],
        "TERM": "xterm-256color",
        "LANG": "C.UTF-8",
        "OPENAI_API_KEY": CANARY_KEY,
        "JUDGEBENCH_CACHE_DIR": str(home / "cache"),
        "PREFECT_API_URL": os.environ["PREFECT_API_URL"],
        "PREFECT_HOME": os.environ["PREFECT_HOME"],
    }
    shell = "env -i " + " ".join(f"{k}='{v}'" for k, v in env.items()) + " bash --norc --noprofile"
    subprocess.run(
        [*tmux, "new-session", "-d", "-s", "walk", "-x", "80", "-y", "50", "-c", str(cwd), shell], check=True
    )
    try:
        subprocess.run([*tmux, "set-option", "-g", "history-limit", "100000"], check=True)
        subprocess.run([*tmux, "new-window", "-t", "walk", "-c", str(cwd), shell], check=True)  # with that history
        subprocess.run([*tmux, "kill-window", "-t", "walk:0"], check=True)
        type_line = lambda line: subprocess.run([*tmux, "send-keys", "-t", "walk", "-l", line + "\n"], check=True)  # noqa: E731
        type_line(f"PS1='{PROMPT}'; set -o pipefail")
        for index, block in enumerate(walked_blocks()):
            script = tmp_path / f"block{index}.sh"
            script.write_text(as_here(block.code, home, commit))
            # The block as the user types it (its lines echoed by the shell), then a signal when it ended.
            type_line(f"source {script}; tmux -L {socket} wait-for -S block{index}")
            subprocess.run([*tmux, "wait-for", f"block{index}"], check=True, timeout=900)
        pane = subprocess.run(
            [*tmux, "capture-pane", "-p", "-J", "-S", "-", "-t", "walk"], check=True, capture_output=True, text=True
        ).stdout  # -J: a line the terminal wrapped comes back whole, as wide as it was printed
    finally:
        subprocess.run([*tmux, "kill-server"], check=False)
    typed = f"tmux -L {socket} wait-for -S block"  # the walk's own typed line (echoed without the prompt
    # when typed while a block's background job was still writing)
    ours = [
        line
        for line in pane.splitlines()
        if not line.startswith(PROMPT) and not line.startswith(NOT_OURS) and typed not in line
    ]
    wide = [line for line in ours if len(line.rstrip()) > 80]
    assert "accuracy" in pane and "JudgeBench runs" in pane, pane  # the first run's table, then history
    said = " ".join(pane.split())
    assert "Flow run finished successfully in 'Completed'." in said, pane[-5000:]  # the nightly section's run
    assert not wide, "wider than the 80-column terminal:\n" + "\n".join(wide)

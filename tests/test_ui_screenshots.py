"""What the team sees in Prefect's UI the morning after: a night's artifact at 1400 px and a run's page,
rendered by a real Chromium from the user's own Prefect server (started as a run starts it).

Real parts: `prefect server start` (detached, as a run starts it) through `python -m judgebench_flows.cli.prefect_server`,
a night of 4 cells (one failing) against the bundled stand-in, headless Chromium loading the UI. The
screenshots are kept in the test's folder (JUDGEBENCH_SCREENSHOTS=dir keeps a copy) for a person to look at.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

from judgebench_flows.core.run_names import MAX_RUN_NAME
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from judgebench_flows.testing.oracle import VERDICTS, load_pairs, oracle_responder
from tests._runs import local_server_env, stop_background_server
from tests.conftest import CANARY_KEY, CLAUDE_FILE, GPT4O_FILE, SHARED, requires_shared

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.slow,
    requires_shared,
    pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install -y chromium)"),
]
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
)
ARTIFACT_COLUMNS = ("configuration", "status", "accuracy (95% CI)", "failed / invalid", "cost", "run", "pairs")


def api(url: str, path: str, body: dict | None = None) -> object:
    request = urllib.request.Request(
        f"{url}{path}",
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json"},
        method="POST" if body is not None else "GET",
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def chromium(url: str, out: Path, *what: str, width: int = 1400, height: int = 1100) -> str:
    """Chromium's rendering of `url` after the UI's scripts ran: a screenshot (`--screenshot`) or its DOM."""
    done = subprocess.run(
        [
            str(CHROMIUM),
            *CHROMIUM_FLAGS,
            f"--user-data-dir={out.parent / 'chromium-profile'}",
            f"--window-size={width},{height}",
            "--virtual-time-budget=20000",
            *what,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=out.parent,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_nights_artifact_and_a_runs_page_in_chromium(tmp_path, judgebench_repo):
    url, sha = judgebench_repo
    env = {**local_server_env(tmp_path / "prefect-home"), "JUDGEBENCH_CACHE_DIR": str(tmp_path / "cache")}
    try:
        started = subprocess.run(
            [sys.executable, "-m", "judgebench_flows.cli.prefect_server"],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert started.returncode == 0, started.stderr
        api_url = started.stdout.strip()
        ui = api_url.removesuffix("/api")
        assert api(ui, "/ui-settings")["api_url"] == api_url  # type: ignore[index]
        pairs = load_pairs(SHARED / "data" / GPT4O_FILE) + load_pairs(SHARED / "data" / CLAUDE_FILE)
        with (
            FakeOpenAIServer(oracle_responder(pairs, VERDICTS["vanilla"], accuracy=0.75)) as good,
            FakeOpenAIServer("I cannot decide.") as nonsense,
        ):
            matrix = tmp_path / "night.yaml"
            matrix.write_text(
                yaml.safe_dump(
                    {
                        "judge_types": ["vanilla"],
                        "data_files": [GPT4O_FILE, CLAUDE_FILE],
                        "repo_url": url,
                        "ref": sha,
                        "db_url": f"sqlite:///{tmp_path}/history.db",
                        "output_root": str(tmp_path / "nightly"),
                        "max_samples": 6,
                        "models": [
                            {"model": "gpt-4o-mini-2024-07-18", "base_url": good.base_url},
                            {"model": "claude-3-haiku-20240307", "base_url": nonsense.base_url},
                        ],
                        "options": {"bootstrap_resamples": 100, "max_retries": 0},
                    }
                )
            )
            night = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "import asyncio, sys; from judgebench_flows.flows.nightly import nightly_benchmarks; "
                    "state = asyncio.run(nightly_benchmarks(sys.argv[1], retry_delay_seconds=0, return_state=True)); "
                    "print(state.state_details.flow_run_id)",
                    str(matrix),
                ],
                env={**env, "PREFECT_API_URL": api_url, "OPENAI_API_KEY": CANARY_KEY},
                capture_output=True,
                text=True,
                timeout=900,
                cwd=tmp_path,
            )
        assert night.returncode == 0, night.stderr[-4000:]
        night_id = night.stdout.strip().splitlines()[-1]
        runs = api(api_url, "/flow_runs/filter", {})
        names = sorted(run["name"] for run in runs)  # type: ignore[union-attr]
        assert len(names) == 5 and all(len(name) <= MAX_RUN_NAME for name in names), names
        assert any(name.startswith("nightly ") for name in names) and all("·" in n for n in names if "nightly" not in n)
        [artifact] = api(api_url, "/artifacts/filter", {"artifacts": {"key": {"any_": ["judgebench-nightly"]}}})  # type: ignore[misc]

        shots = tmp_path / "screenshots"
        shots.mkdir()
        page = f"{ui}/artifacts/artifact/{artifact['id']}"
        chromium(page, shots / "artifact.png", f"--screenshot={shots / 'artifact.png'}")
        dom = chromium(page, shots / "artifact.png", "--dump-dom")
        header = dom[dom.find("<table") :]
        assert all(f">{column}<" in header for column in ARTIFACT_COLUMNS), header[:3000]
        assert "vanilla · claude-3-haiku-20240307 · claude" in dom and "FAILED" in dom
        run_page = f"{ui}/runs/flow-run/{night_id}"
        chromium(run_page, shots / "run.png", f"--screenshot={shots / 'run.png'}")
        run_dom = chromium(run_page, shots / "run.png", "--dump-dom")
        assert "nightly " in run_dom, run_dom[:3000]
        kept = os.environ.get("JUDGEBENCH_SCREENSHOTS")
        if kept:
            shutil.copytree(shots, kept, dirs_exist_ok=True)
    finally:
        stop_background_server(env)

"""Optional: a real LiteLLM proxy in front of the bundled server, as teams run a gateway.

The proxy serves an alias (`team-judge`) of a reasoning model (`openai/o3-mini`) that our model table
cannot know; the bundled server behind it enforces what OpenAI enforces for reasoning models
(`openai_rules`). LiteLLM itself refuses `temperature=0.0` for it with its own words
(`litellm.UnsupportedParamsError: O-series models don't support temperature=0.0 ...`, code "400", no
param): a run must drop the parameter and judge with no failures, without `--request-style`. An unknown
model is LiteLLM's 400 "Invalid model name": exit 2, as for OpenAI's and vLLM's 404.

Needs `pip install "litellm[proxy]==1.74.9"` (not part of any of our installs; never 1.107.0, a compromised
release), in any environment: the test finds the `litellm` command on PATH or at $JUDGEBENCH_LITELLM, and
skips with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._helpers import run_command

PINNED = "1.74.9"
NEVER = "1.107.0"
ALIAS = "team-judge"


def litellm_command() -> str:
    command = os.environ.get("JUDGEBENCH_LITELLM") or shutil.which("litellm")
    if not command or not Path(command).exists():
        pytest.skip(f'no LiteLLM proxy: pip install "litellm[proxy]=={PINNED}" (or set JUDGEBENCH_LITELLM)')
    python = Path(command).with_name("python")
    version = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    if version == NEVER:
        pytest.skip(f"litellm {NEVER} is a compromised release: install {PINNED}")
    return command


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def litellm_proxy(tmp_path_factory: pytest.TempPathFactory):
    """(proxy base URL, the bundled server behind it): one proxy for the module (it takes a while to start)."""
    command = litellm_command()
    tmp_path = tmp_path_factory.mktemp("litellm")
    with FakeOpenAIServer("My final verdict is [[A>B]]", openai_rules=True) as server:
        config = tmp_path / "litellm.yaml"
        config.write_text(
            "model_list:\n"
            f"  - model_name: {ALIAS}\n"
            "    litellm_params:\n"
            "      model: openai/o3-mini\n"
            f"      api_base: {server.base_url}\n"
            "      api_key: sk-upstream\n"
        )
        port = free_port()
        log = (tmp_path / "litellm.log").open("w")
        proxy = subprocess.Popen(
            [command, "--config", str(config), "--host", "127.0.0.1", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
        try:
            deadline = time.monotonic() + 300  # its imports alone take 10 s on an idle machine
            while True:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/health/liveliness", timeout=2).read()
                    break
                except OSError:
                    if proxy.poll() is not None or time.monotonic() > deadline:
                        pytest.fail(
                            "the LiteLLM proxy did not start: " + (tmp_path / "litellm.log").read_text()[-2000:]
                        )
                    time.sleep(0.5)
            yield f"http://127.0.0.1:{port}/v1", server
        finally:
            proxy.terminate()
            try:
                proxy.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proxy.kill()
            log.close()


class Proxied:
    """`run_command` takes a server for its base URL: the proxy's."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url


@pytest.mark.slow
def test_an_alias_of_a_reasoning_model_judges_with_no_failures(
    litellm_proxy, run_cli, judgebench_repo, tmp_path: Path
) -> None:
    base_url, server = litellm_proxy
    server.reset_counters()
    result = run_cli(
        *run_command(
            judgebench_repo, Proxied(base_url), tmp_path, model=ALIAS, max_samples=10, shard_size=None, concurrency=4
        )  # type: ignore[arg-type]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    published = json.loads((tmp_path / "results/judgebench.json").read_text())
    assert published["invalid"]["failed_judgments"] == 0
    assert published["overall_accuracy"]["valid_samples"] == 10
    (change,) = published["run"]["requests"]["adjustments"]
    assert change["param"] == "temperature" and change["action"] == "dropped"
    assert "O-series models don't support temperature=0.0" in change["endpoint_said"]
    assert server.answered == 20  # both orders of 10 pairs, each answered once behind the proxy


@pytest.mark.slow
def test_an_unknown_model_through_the_proxy_is_exit_2(litellm_proxy, run_cli, judgebench_repo, tmp_path: Path) -> None:
    base_url, _ = litellm_proxy
    result = run_cli(
        *run_command(judgebench_repo, Proxied(base_url), tmp_path, model="no-such-alias", max_samples=2)  # type: ignore[arg-type]
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "does not know model 'no-such-alias'" in result.stderr and "Invalid model name" in result.stderr

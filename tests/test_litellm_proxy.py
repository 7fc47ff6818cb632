"""Optional: a real LiteLLM proxy in front of the bundled server, as teams run a gateway.

The proxy serves an alias (`team-judge`) of a reasoning model (`openai/o3-mini`) that our model table
cannot know; the bundled server behind it enforces what OpenAI enforces for reasoning models
(`openai_rules`). LiteLLM itself refuses `temperature=0.0` for it with its own words
(`litellm.UnsupportedParamsError: O-series models don't support temperature=0.0 ...`, code "400", no
param): a run must drop the parameter and judge with no failures, without `--request-style`. An unknown
model is LiteLLM's 400 "Invalid model name": exit 2, as for OpenAI's and vLLM's 404. A second alias
(`short-judge`) whose upstream caps the context answers the longer prompts with LiteLLM's
`ContextWindowExceededError`: each such call reaches the proxy once, and its reason is LiteLLM's whole.

Needs `pip install "litellm[proxy]==1.108.7"` (1.74.9 works too; not part of any of our installs; never
1.107.0, a compromised release), in any environment: the test finds the `litellm` command on PATH or at
$JUDGEBENCH_LITELLM, and skips with the reason otherwise. LiteLLM 1.108 refuses to start without a master
key: the config gives it the key the runs use.
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
from tests.conftest import CANARY_KEY

PINNED = "1.108.7"
NEVER = "1.107.0"
ALIAS = "team-judge"
SHORT = "short-judge"  # an alias whose upstream caps the context


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
    """(proxy base URL, the bundled server behind `ALIAS`, the one behind `SHORT`): one proxy for the
    module (it takes a while to start)."""
    command = litellm_command()
    tmp_path = tmp_path_factory.mktemp("litellm")
    with (
        FakeOpenAIServer("My final verdict is [[A>B]]", openai_rules=True) as server,
        FakeOpenAIServer("My final verdict is [[A>B]]", openai_rules=True) as short,
    ):
        config = tmp_path / "litellm.yaml"
        config.write_text(
            "model_list:\n"
            + "".join(
                f"  - model_name: {alias}\n"
                "    litellm_params:\n"
                "      model: openai/o3-mini\n"
                f"      api_base: {upstream.base_url}\n"
                "      api_key: sk-upstream\n"
                for alias, upstream in ((ALIAS, server), (SHORT, short))
            )
            + f"general_settings:\n  master_key: {CANARY_KEY}\n"  # 1.108 does not start without one
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
            yield f"http://127.0.0.1:{port}/v1", server, short
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
    base_url, server, _ = litellm_proxy
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
    base_url, _, _ = litellm_proxy
    result = run_cli(
        *run_command(judgebench_repo, Proxied(base_url), tmp_path, model="no-such-alias", max_samples=2)  # type: ignore[arg-type]
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "does not know model 'no-such-alias'" in result.stderr and "Invalid model name" in result.stderr


@pytest.mark.slow
def test_an_over_long_call_through_the_proxy_is_sent_once_and_keeps_litellms_words(
    litellm_proxy, run_cli, judgebench_repo, gpt4o_pairs, tmp_path: Path
) -> None:
    from judgebench_flows.data.loading import sample_pairs
    from judgebench_flows.judges import get_judge

    base_url, _, short = litellm_proxy
    templates = Path(judgebench_repo[0].removeprefix("file://")) / "utils/templates"
    judge = get_judge("arena_hard", templates_dir=templates, model=SHORT)
    sizes = sorted(
        sum(len(m["content"]) for m in judge.format(p["question"], p["response_A"], p["response_B"]))
        for p in sample_pairs(gpt4o_pairs, 10, 42)
    )
    short.configure(max_context_chars=sizes[6])  # the 3 longest pairs are too long, in both orders
    short.reset_counters()
    result = run_cli(
        *run_command(judgebench_repo, Proxied(base_url), tmp_path, model=SHORT, max_samples=10, concurrency=4),  # type: ignore[arg-type]
        "--max-failed-fraction",
        "0.5",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    published = json.loads((tmp_path / "results/judgebench.json").read_text())
    assert published["invalid"]["failed_judgments"] == 6
    assert set(short.refused_keys().values()) == {1}, short.refused_keys()  # no body reached it twice
    (reason,) = published["invalid"]["reasons"]
    assert reason.startswith("HTTP 400: litellm.") and "ContextWindowExceededError" in reason, reason
    assert f"maximum context length is {sizes[6]}" in reason and "\n" not in reason
    # word for word what the bundled server answers as LiteLLM (`error_style="litellm"`), which other tests use
    assert reason.endswith(f"LiteLLM: model group '{SHORT}' failed with the error above. No fallback was attempted.")

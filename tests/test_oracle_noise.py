"""The stand-in oracle's `noise`: repeated calls of one prompt disagree as a model at temperature > 0 does,
on the expected share of calls, reproducibly for a seed. Real server over HTTP, official `openai` client."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import openai
import pytest

from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from judgebench_flows.testing.oracle import VERDICTS, oracle_responder

PAIRS = [
    {"pair_id": f"p{i}", "response_A": f"<alpha {i}>", "response_B": f"<beta {i}>", "label": ("A>B", "B>A")[i % 2]}
    for i in range(20)
]
# Each pair in both orders: 40 distinct prompts.
PROMPTS = [f"Which is better?\n{first}\n{second}" for p in PAIRS for first, second in ((p["response_A"], p["response_B"]), (p["response_B"], p["response_A"]))]  # fmt: skip
ASKS = 10  # each prompt asked 10 times: 400 calls


def answers(order: list[str], noise: float, noise_seed: int = 0) -> dict[str, list[str]]:
    """Every prompt's answers, in the order asked, from a fresh stand-in oracle (right on 75% of pairs)."""
    oracle = oracle_responder(PAIRS, VERDICTS["skywork_critic"], accuracy=0.75, noise=noise, noise_seed=noise_seed)
    said: dict[str, list[str]] = {prompt: [] for prompt in PROMPTS}
    with FakeOpenAIServer(oracle) as server:
        client = openai.OpenAI(api_key="k", base_url=server.base_url, max_retries=0, timeout=5)
        for prompt in order:
            reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": prompt}])
            said[prompt].append(reply.choices[0].message.content or "")
    return said


def test_without_noise_every_call_of_a_prompt_agrees() -> None:
    said = answers(PROMPTS * 3, noise=0.0)
    assert all(len(set(replies)) == 1 for replies in said.values()), said
    assert {replies[0] for replies in said.values()} == {"[[A]]", "[[B]]"}


def test_noise_changes_about_half_its_share_of_calls_reproducibly_per_seed() -> None:
    clean = {prompt: replies[0] for prompt, replies in answers(PROMPTS, noise=0.0).items()}
    noisy = answers(PROMPTS * ASKS, noise=0.3, noise_seed=7)
    calls = len(PROMPTS) * ASKS
    changed = sum(reply != clean[prompt] for prompt, replies in noisy.items() for reply in replies)
    # a re-drawn verdict lands on the other side half the time: expected share 0.15, within 4 binomial sigmas
    expected = 0.3 / 2
    assert abs(changed / calls - expected) <= 4 * math.sqrt(expected * (1 - expected) / calls), changed
    assert sum(len(set(replies)) > 1 for replies in noisy.values()) >= 10, "few prompts ever disagreed"
    # the same seed, the calls arriving in another order: each prompt's n-th answer is the same
    assert answers(list(reversed(PROMPTS * ASKS)), noise=0.3, noise_seed=7) == noisy
    assert answers(PROMPTS * ASKS, noise=0.3, noise_seed=8) != noisy


def test_a_noise_outside_0_to_1_is_refused_before_any_call() -> None:
    with pytest.raises(ValueError, match="noise 1.5"):
        oracle_responder(PAIRS, VERDICTS["vanilla"], noise=1.5)


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (["--noise", "1.5"], "error: --noise 1.5: give a number from 0 to 1"),
        (["--noise", "abc"], "error: --noise abc: give a number from 0 to 1"),
        (["--noise", "nan"], "error: --noise nan: give a number from 0 to 1"),
        (["--noise-seed", "x"], "error: --noise-seed x: give a whole number"),
        (["--oracle-accuracy", "-0.1"], "error: --oracle-accuracy -0.1: give a number from 0 to 1"),
    ],
)
def test_a_bad_noise_option_is_one_line_and_exit_2(tmp_path: Path, given: list[str], said: str) -> None:
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    command = [sys.executable, "-m", "judgebench_flows.testing.fake_openai", "--port", "0", "--oracle", str(data)]
    done = subprocess.run([*command, *given], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr, done.stdout) == (2, said + "\n", "")


def test_noise_without_the_oracle_is_refused() -> None:
    command = [sys.executable, "-m", "judgebench_flows.testing.fake_openai", "--port", "0", "--noise", "0.3"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr == "error: --noise 0.3: only the --oracle judge has noise (add --oracle DATA)\n"


def test_the_command_line_oracle_with_noise_disagrees_with_itself(tmp_path: Path) -> None:
    """`--oracle DATA --noise 0.5 --noise-seed 3`: one prompt asked 40 times gets both verdicts, in the
    format of its judge's prompt (arena-hard here)."""
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    command = [sys.executable, "-m", "judgebench_flows.testing.fake_openai", "--port", "0", "--oracle", str(data)]
    with subprocess.Popen(
        [*command, "--noise", "0.5", "--noise-seed", "3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            assert process.stdout is not None
            base_url = process.stdout.readline().strip()  # printed once it listens
            assert base_url.startswith("http://127.0.0.1:"), base_url
            text = f"Output your final verdict, e.g. [[A>>B]]\n{PROMPTS[0]}"
            with openai.OpenAI(api_key="k", base_url=base_url, max_retries=0, timeout=5) as client:
                said = {
                    client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])
                    .choices[0]
                    .message.content
                    for _ in range(40)
                }
            assert said == {"My final verdict is [[A>B]]", "My final verdict is [[B>A]]"}
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=10) == 0
        finally:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
                process.wait()

"""Two `evaluate()` calls with different Vertex AI credentials in one process (a notebook that points
GOOGLE_APPLICATION_CREDENTIALS at another project's service-account file between two cells): each run
takes its own credentials' tokens and its own project, nothing of the first run's kept for the second.

Real parts: google-auth's service-account flow against two loopback token endpoints, two Vertex stand-ins
(testing/fake_google.py) that each take only their own endpoint's tokens, evaluate() in a fresh
interpreter reporting to the session's Prefect server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from judgebench_flows.testing.fake_google import FakeGoogleServer, FakeTokenServer

SCRIPT = """
import json, os, sys
import judgebench_flows
from judgebench_flows.core.endpoint import EndpointSettings
from judgebench_flows.core.providers.google import VERTEX

runs = json.loads(sys.argv[1])
seen = []
for n, run in enumerate(runs):
    os.environ["GOOGLE_APPLICATION_CREDENTIALS"] = run["credentials"]  # as a notebook's cell sets it
    evaluation = judgebench_flows.evaluate(
        model="gemini-2.0-flash", provider="vertex", base_url=run["base_url"], data_path="pairs.jsonl",
        db_url=f"sqlite:///{n}.db", result_path=f"{n}/results.json", output_dir=str(n), report=False,
    )
    default = VERTEX.default_base_url(EndpointSettings(provider="vertex"))  # where a run without base_url goes
    seen.append({"judgments": evaluation.usage.judgments, "default_endpoint": default})
print(json.dumps(seen))
"""


def _pairs() -> str:
    pairs = [
        {
            "pair_id": f"pair-{i}",
            "original_id": i,
            "source": "mmlu-pro-law",
            "response_model": "gpt-4o-2024-05-13",
            "question": f"Question {i}: which answer is right?",
            "response_A": f"Answer A {i}.",
            "response_B": f"Answer B {i}.",
            "label": "A>B",
        }
        for i in range(2)
    ]
    return "".join(json.dumps(pair) + "\n" for pair in pairs)


@pytest.mark.slow
def test_two_evaluate_calls_with_different_vertex_credentials_each_use_their_own(
    tmp_path: Path, prefect_server: str
) -> None:
    (tmp_path / "pairs.jsonl").write_text(_pairs())
    env = {**os.environ, "JUDGEBENCH_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("GOOGLE_CLOUD_PROJECT", None)
    with FakeTokenServer() as first_tokens, FakeTokenServer() as second_tokens:
        files = [
            first_tokens.service_account(tmp_path / "first.json", project="first-project"),
            second_tokens.service_account(tmp_path / "second.json", project="second-project"),
        ]
        with (
            FakeGoogleServer(mode="vertex", project="first-project", tokens=first_tokens) as first,
            FakeGoogleServer(mode="vertex", project="second-project", tokens=second_tokens) as second,
        ):
            runs = [
                {"credentials": str(path), "base_url": server.base_url}
                for path, server in zip(files, (first, second), strict=True)
            ]
            done = subprocess.run(
                [sys.executable, "-c", textwrap.dedent(SCRIPT), json.dumps(runs)],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert done.returncode == 0, done.stderr[-3000:]
            answered = (first.answered, second.answered)
        issued = (first_tokens.issued, second_tokens.issued)
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert [run["judgments"] for run in seen] == [4, 4]
    assert answered == (4, 4), "each run was answered by the Vertex endpoint that takes its credentials' tokens"
    assert issued[0] >= 1 and issued[1] >= 1, "the second run used the first run's token"
    assert "/projects/first-project/" in seen[0]["default_endpoint"]
    assert "/projects/second-project/" in seen[1]["default_endpoint"], "the first credentials' project was kept"

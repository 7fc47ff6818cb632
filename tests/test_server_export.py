"""PREFECT_API_URL names the run's Prefect server for the run only: subprocesses started during it (a
local Dask cluster's workers) reach that server, and after it the variable is as it was, so a notebook's
next `evaluate()` and the user's own code do not inherit a server that may since have moved.

Each scenario runs in a fresh interpreter (os.environ is the process's). The quick one enters the block
itself; the slow one makes real `evaluate()` calls that find this PREFECT_HOME's running server without
PREFECT_API_URL (the session's server, reported under the same home), with a judge whose `format`, run
inside the flow, asks a subprocess what it sees.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from judgebench_flows.runtime.prefect_server import PID_FILE
from judgebench_flows.runtime.server_watch import alive
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._runs import background_pid

SEES = "import os; print(os.environ.get('PREFECT_API_URL'))"

BLOCKS = """
import json, os, subprocess, sys, threading
from judgebench_flows.runtime.prefect_server import PrefectServer, pointed_at

SEES = {sees!r}


def child() -> str:
    return subprocess.run([sys.executable, "-c", SEES], capture_output=True, text=True, check=True).stdout.strip()


got = {{}}
got["before"] = os.environ.get("PREFECT_API_URL")
with pointed_at(PrefectServer("http://127.0.0.1:4311/api")):
    got["inside"] = child()
got["after_one"] = os.environ.get("PREFECT_API_URL")

# overlapping blocks (evaluate_async) ending in the other order than they began
a_in, a_out, b_in, b_out = (threading.Event() for _ in range(4))


def block(url, entered, leave):
    with pointed_at(PrefectServer(url)):
        entered.set()
        leave.wait()


first = threading.Thread(target=block, args=("http://127.0.0.1:4311/api", a_in, a_out))
second = threading.Thread(target=block, args=("http://127.0.0.1:4312/api", b_in, b_out))
first.start(); a_in.wait(); second.start(); b_in.wait()
got["both"] = child()
a_out.set(); first.join()
got["second_only"] = child()
b_out.set(); second.join()
got["after_both"] = os.environ.get("PREFECT_API_URL")
print(json.dumps(got))
"""


def fresh(script: str, cwd: Path, env: dict[str, str], *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", script, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mine", [None, "http://127.0.0.1:4200/api"])
def test_the_export_belongs_to_the_block(tmp_path: Path, mine: str | None) -> None:
    env = {name: value for name, value in os.environ.items() if name != "PREFECT_API_URL"}
    if mine is not None:
        env["PREFECT_API_URL"] = mine  # the user's own, to be kept
    got = fresh(textwrap.dedent(BLOCKS).format(sees=SEES), tmp_path, env)
    assert got["before"] == mine
    assert got["inside"] == "http://127.0.0.1:4311/api", "a subprocess of the run did not see its server"
    assert got["after_one"] == mine, "the run's server stayed in the environment"
    assert got["both"] == "http://127.0.0.1:4312/api"  # the latest block in force
    assert got["second_only"] == "http://127.0.0.1:4312/api", "the first block's end took the second's server away"
    assert got["after_both"] == mine


CALLS = """
import json, os, subprocess, sys, threading
import judgebench_flows

SEES = {sees!r}
SEEN, CALL, LOCK = {{}}, [0], threading.Lock()


class Probe:
    sampling = {{"temperature": 0.0, "max_tokens": 8}}

    def format(self, question, answer_A, answer_B):
        with LOCK:  # inside the run's flow: what a subprocess started now sees
            if CALL[0] not in SEEN:
                SEEN[CALL[0]] = subprocess.run(
                    [sys.executable, "-c", SEES], capture_output=True, text=True, check=True
                ).stdout.strip()
        return [{{"role": "user", "content": question}}]

    def parse(self, text):
        return "A>B"


def call(n):
    CALL[0] = n
    judgebench_flows.evaluate(
        judge=Probe, model="judge", base_url=sys.argv[1], data_path="pairs.jsonl", db_url=f"sqlite:///{{n}}.db",
        result_path=f"{{n}}/results.json", output_dir=str(n), report=False,
    )
    return {{"inside": SEEN.get(n), "after": os.environ.get("PREFECT_API_URL")}}


first = call(1)
os.environ["PREFECT_API_URL"] = sys.argv[2]  # the user's own server, set between two calls
print(json.dumps({{"first": first, "second": call(2)}}))
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
def test_evaluate_leaves_prefect_api_url_as_it_was(tmp_path: Path, prefect_server: str) -> None:
    port = urlsplit(prefect_server).port
    # No PREFECT_API_URL: the run finds the server of its PREFECT_HOME on the configured port (the
    # session's server, started under this home), as a notebook's first evaluate() finds the background one.
    env = {name: value for name, value in os.environ.items() if name != "PREFECT_API_URL"}
    env.update(
        PREFECT_HOME=os.environ["PREFECT_HOME"],
        PREFECT_SERVER_API_HOST="127.0.0.1",
        PREFECT_SERVER_API_PORT=str(port),
        OPENAI_API_KEY="sk-test",
        JUDGEBENCH_CACHE_DIR=str(tmp_path / "cache"),
    )
    (tmp_path / "pairs.jsonl").write_text(_pairs())
    mine = f"http://localhost:{port}/api"  # the same server under another name: the user's own value
    home = Path(env["PREFECT_HOME"])
    assert not (home / PID_FILE).exists(), "a background server of the session's PREFECT_HOME was running before"
    try:
        with FakeOpenAIServer("[[A>B]]") as endpoint:
            got = fresh(textwrap.dedent(CALLS).format(sees=SEES), tmp_path, env, endpoint.base_url, mine)
    finally:
        # A run that took the session's (busy) server for a stranger's started one of its own in this home:
        # stopped here, not left to outlive the suite.
        started = (home / PID_FILE).exists()
        if started:
            pid = background_pid(home)
            subprocess.run(
                [sys.executable, "-m", "prefect", "server", "stop"], env=env, capture_output=True, timeout=120
            )
            waited = time.monotonic() + 60
            while alive(pid) and time.monotonic() < waited:
                time.sleep(0.2)
    assert not started, "evaluate() started a second server in the session's PREFECT_HOME"
    assert got["first"] == {"inside": f"http://127.0.0.1:{port}/api", "after": None}, got
    assert got["second"] == {"inside": mine, "after": mine}, got

"""`evaluate()`'s quiet logging belongs to the call: after it returns (or raises) the process logs as before.

Each scenario runs in a fresh interpreter, as a notebook's kernel starts: Prefect reads its settings and
sets its loggers' levels once per process, so the first `evaluate()` is the one that imports it. The calls
are real and cheap: a custom judge file (which records what it sees while the call imports it, inside the
quiet spell) and a data file that does not exist, which the run's checks refuse before any server or
endpoint is needed. The run imports Prefect only once its checks pass (runtime/run.py), so the judge file,
loaded by those checks, imports it itself: the first call is still the one that sets Prefect up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

PROBE = """
import logging, os, sys

from prefect import flow  # Prefect set up inside the call, as the run's own import does once its checks pass

sys.modules["__main__"].SEEN.append(
    {"prefect": logging.getLogger("prefect").level, "env": os.environ.get("PREFECT_LOGGING_LEVEL")}
)


class Probe:
    sampling = {"temperature": 0.0, "max_tokens": 32}

    def format(self, question, answer_A, answer_B):
        return [{"role": "user", "content": question}]

    def parse(self, text):
        return ""
"""

COMMON = """
import json, logging, os
import judgebench_flows
from judgebench_flows.core.errors import UserError

SEEN = []  # what the probe judge saw during each call


def call(**options):
    try:
        judgebench_flows.evaluate(
            model="judge", judge="probe.py:Probe", data_path="missing.jsonl", base_url="http://127.0.0.1:9/v1",
            **options,
        )
    except UserError as exc:  # the run's checks, after Prefect was imported and set up in the call
        assert "missing.jsonl" in str(exc), exc
    else:
        raise AssertionError("evaluate() judged a file that does not exist")


def state():
    from prefect.settings import PREFECT_LOGGING_LEVEL, PREFECT_LOGGING_SETTINGS_PATH

    return {
        "env": sorted(name for name in os.environ if name.startswith("PREFECT_LOGGING_")),
        "prefect": logging.getLogger("prefect").level,
        "client": logging.getLogger("prefect.client").level,
        "flow_runs": logging.getLogger("prefect.flow_runs").getEffectiveLevel(),
        "raise": logging.raiseExceptions,
        "setting": PREFECT_LOGGING_LEVEL.value(),
        "settings_path": str(PREFECT_LOGGING_SETTINGS_PATH.value()),
    }
"""

CALLS = """
call()  # the first: Prefect is imported inside it, with the quiet settings
after_first = state()
call(verbose=True)
after_verbose = state()
logging.getLogger("prefect").setLevel(logging.DEBUG)  # the user's own level, set once Prefect is set up
call()
print(json.dumps({"seen": SEEN, "first": after_first, "verbose": after_verbose, "last": state()}))
"""

OWN_FLOW = """
call()
from prefect import flow, get_run_logger


@flow
def mine():
    get_run_logger().info("my own flow says hello")


mine()
"""


def run(tmp_path: Path, script: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "probe.py").write_text(PROBE)
    env = {name: value for name, value in os.environ.items() if not name.startswith("PREFECT_LOGGING_")}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(COMMON) + textwrap.dedent(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_evaluate_leaves_no_quiet_logging_behind(tmp_path: Path) -> None:
    got = json.loads(run(tmp_path, CALLS).stdout.strip().splitlines()[-1])
    warning, info, debug = 30, 20, 10
    quiet, loud = {"prefect": warning, "env": "WARNING"}, {"prefect": info, "env": None}
    assert got["seen"] == [quiet, loud, quiet], "the calls were not quiet, verbose, quiet while they ran"
    prefect_default = {
        "env": [],
        "prefect": info,  # Prefect's own default (PREFECT_LOGGING_LEVEL unset), as `import prefect` sets it
        "client": info,
        "flow_runs": info,
        "raise": True,
        "setting": "INFO",
    }
    for after in ("first", "verbose"):
        assert {key: got[after][key] for key in prefect_default} == prefect_default, after
        assert "judgebench_flows" not in got[after]["settings_path"], after
    assert got["last"]["prefect"] == debug, "the user's own level was not put back"
    assert got["last"]["env"] == [] and got["last"]["raise"] is True and got["last"]["setting"] == "INFO"


def test_a_users_own_flow_logs_after_evaluate(tmp_path: Path, prefect_server: str) -> None:
    done = run(tmp_path, OWN_FLOW)
    assert "my own flow says hello" in done.stderr, done.stderr[-3000:]

"""The defaults `judgebench run --help` states are the ones a run uses.

The parser's defaults are None (so the settings model can tell an option given from one left out), which
means its help texts spell defaults out by hand; this keeps them from drifting from RunConfig's.
"""

from __future__ import annotations

import argparse
import re

from judgebench_flows.cli.main import build_parser
from judgebench_flows.core.config import build_config

STATED = re.compile(r"\(default ([^():]+|sqlite:[^()]+)\)")


def run_actions() -> list[argparse.Action]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(sub.choices["run"]._actions)


def test_every_default_stated_in_run_help_is_the_one_a_run_uses() -> None:
    used = build_config(model="m").model_dump()
    checked = []
    for action in run_actions():
        match = STATED.search(action.help or "")
        if match is None or action.dest not in used:
            continue
        stated, actual = match.group(1).strip(), used[action.dest]
        if isinstance(actual, bool) or actual is None:
            continue
        if isinstance(actual, (int, float)):
            assert float(stated) == float(actual), f"--{action.dest}: help says {stated}, a run uses {actual}"
        else:
            assert stated == str(actual), f"--{action.dest}: help says {stated}, a run uses {actual}"
        checked.append(action.dest)
    # The options whose defaults are stated as values: a change to the pattern must not check nothing.
    assert {"concurrency", "shard_size", "result_path", "output_dir", "db_url", "seed", "max_retries"} <= set(checked)

"""`--help` is complete: every command has a description, every option says what it does, an option is
never matched by a prefix, and a run option's help is its settings field's description (the settings models
are where #22 derives the CLI from, so the text lives there and argparse repeats it word for word)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

from judgebench_flows.cli.main import build_parser
from judgebench_flows.core.config import RunConfig
from judgebench_flows.core.endpoint import EndpointSettings


def commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


@pytest.mark.parametrize("name", sorted(commands()))
def test_every_command_has_a_description_and_every_option_help(name: str) -> None:
    command = commands()[name]
    assert command.description, name
    assert not command.allow_abbrev, name
    missing = [a.option_strings or [a.dest] for a in command._actions if not a.help]
    assert not missing, f"judgebench {name}: options without help: {missing}"


def test_every_run_setting_is_described_and_the_cli_says_the_same() -> None:
    fields = {**RunConfig.model_fields, **EndpointSettings.model_fields}
    assert not [name for name, field in fields.items() if not field.description]
    compared = []
    for action in commands()["run"]._actions:
        field = fields.get(action.dest)
        if field is None or not isinstance(action, argparse._StoreAction):
            continue  # --no-cache, --no-report: a flag for one value of the setting, worded as the flag
        assert (action.help or "").startswith(field.description or "-"), f"--{action.dest}: help is not its description"
        compared.append(action.dest)
    assert {"model", "concurrency", "base_url", "seed", "drop_params", "external_judge_path"} <= set(compared)


@pytest.mark.parametrize("argv", [["run", "--judge-typ", "vanilla"], ["history", "--lim", "3"]])
def test_a_prefix_of_an_option_is_refused(argv: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "judgebench_flows.cli.main", *argv], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and "unrecognized arguments" in result.stderr, result.stderr


def test_automations_dry_run_is_a_short_summary_and_json_in_full() -> None:
    """`automations install --dry-run` says in a few lines what it would create; `--format json` gives
    every automation as Prefect's JSON (no server needed for either)."""
    import json

    base = [sys.executable, "-m", "judgebench_flows.cli.main", "automations", "install"]
    base += ["--webhook-url", "https://hooks.example.com/judgebench", "--dry-run"]
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    text = subprocess.run(base, capture_output=True, text=True, timeout=120, env=env)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert len(lines) <= 6 and all(len(line) <= 100 for line in lines), text.stdout
    for name in ("judgebench-alert", "judgebench-silent-runs-crashed", "judgebench-reschedule-crashed"):
        assert sum(line.strip().startswith(f"{name}: ") for line in lines) == 1, text.stdout
    full = subprocess.run([*base, "--format", "json"], capture_output=True, text=True, timeout=120, env=env)
    assert full.returncode == 0, full.stderr
    bodies = json.loads(full.stdout)
    assert len(bodies) == 3 and all({"name", "trigger", "actions"} <= body.keys() for body in bodies)

"""`judgebench run`'s options come from the settings models: a field is an option, with no CLI code.

Real parts: the real parser and the real `judgebench` command in a subprocess (bad input exits before
anything starts, so no server is needed).
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
from pydantic import BaseModel, Field

from judgebench_flows.cli.main import build_parser
from judgebench_flows.cli.options import OneLineParser, add_model_options, given_options, model_fields
from judgebench_flows.core.config import RunConfig, build_config


def run_parser() -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["run"]


def test_every_settings_field_is_a_run_option_with_its_description_as_help() -> None:
    flags = {flag for action in run_parser()._actions for flag in action.option_strings}
    helps: dict[str, str] = {}
    for action in run_parser()._actions:  # a field's own option comes first, its shortcuts after it
        helps.setdefault(action.dest, action.help or "")
    for name, field in model_fields(RunConfig).items():
        assert field.description, f"RunConfig/EndpointSettings.{name}: no description (it is the --help text)"
        assert f"--{name.replace('_', '-')}" in flags or f"--no-{name.replace('_', '-')}" in flags, name
        assert field.description in helps[name], name


def test_a_new_field_appears_on_the_cli_with_no_extra_code() -> None:
    class Extended(RunConfig):
        max_cost: float | None = Field(default=None, gt=0, description="stop before spending more than this (USD)")

    parser = OneLineParser(prog="judgebench run")
    add_model_options(parser, Extended)
    args = parser.parse_args(["--model", "m", "--max-cost", "2.5", "--max_workers", "3", "--pairs", "p.jsonl"])
    given = given_options(args, Extended)
    assert given == {"model": "m", "max_cost": "2.5", "concurrency": "3", "data_path": "p.jsonl"}
    config = Extended(**given)
    assert config.max_cost == 2.5 and config.endpoint.concurrency == 3
    assert "stop before spending more than this (USD)" in parser.format_help()


def test_shapes_of_values_defaults_stated_and_drop_in_aliases() -> None:
    args = run_parser().parse_args(
        ["--judge_name", "vanilla", "--judge-model", "m", "--no-cache", "--no-report", "--drop-params", "top_p, seed"]
    )
    config = build_config(**given_options(args, RunConfig))
    assert (config.judge_type, config.model, config.endpoint.cache, config.report) == ("vanilla", "m", "off", False)
    assert config.endpoint.drop_params == ["top_p", "seed"]
    defaults = {action.dest: action.help for action in run_parser()._actions}
    assert "(default 16)" in defaults["concurrency"] and "(default 42)" in defaults["seed"]


class Small(BaseModel):
    count: int = Field(default=1, ge=1, description="how many")


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["run", "--model", "m", "--conc", "3"], "unrecognized arguments: --conc 3"),  # no prefix matching
        (["run", "--model", "m", "--concurrency", "x"], "--concurrency: Input should be a valid integer"),
        (
            ["run", "--model", "m", "--request-style", "nope"],
            "argument --request-style/--request_style: invalid choice: 'nope'",
        ),
    ],
)
def test_a_mistake_is_one_line_naming_the_option_exit_2(argv: list[str], said: str, tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "judgebench_flows.cli.main", *argv, "--data-path", str(tmp_path / "none.jsonl")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and said in done.stderr, done.stderr

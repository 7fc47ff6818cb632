"""Flow run names people read in Prefect's UI: what a run does, short enough for its run list.

Prefect names a run at random (`generous-hare`) unless its flow says otherwise. A run's name here says
its judge, model and data file (JudgeBench's two files by the model that wrote their responses: `gpt-4o`,
`claude`), and for a night's runs the night's date; at most MAX_RUN_NAME characters. The full
configuration stays in the run's parameters and tags: a name is for finding a run, not for telling two
runs' settings apart.
"""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import JsonValue

    from judgebench_flows.core.config import RunConfig

MAX_RUN_NAME = 60
SEPARATOR = " · "
ELLIPSIS = "…"
# JudgeBench's data files by what the UI's readers call them (the responses' model family).
_FAMILIES = (("gpt-4o", "gpt-4o"), ("claude", "claude"))
_DATE_SUFFIX = re.compile(r"[-_]?(\d{4}-\d{2}-\d{2}|\d{8})$")


def data_short_name(data_file: str | None) -> str:
    """`dataset=judgebench,response_model=gpt-4o-2024-05-13.jsonl` -> `gpt-4o`; a Claude file -> `claude`;
    another file -> its response model (or its stem) without a date suffix."""
    if not data_file:
        return "data"
    name = Path(data_file).name
    stem = name.rsplit(".", 1)[0] if "." in name else name
    fields = dict(part.split("=", 1) for part in stem.split(",") if "=" in part)
    value = fields.get("response_model") or stem
    for prefix, short in _FAMILIES:
        if value.startswith(prefix) and "response_model" in fields:
            return short
    return _DATE_SUFFIX.sub("", value) or value


def model_short_name(model: str) -> str:
    """A model as its run list shows it: the last part of a path-like name (`Qwen/Qwen2.5-7B` -> `Qwen2.5-7B`)."""
    return model.rstrip("/").rsplit("/", 1)[-1] or model


def run_name(judge: str, model: str, data_file: str | None, night: date | None = None) -> str:
    """`arena_hard · gpt-4o-mini · gpt-4o` (`2026-11-27 arena_hard · ...` for a night's cell), cut to
    MAX_RUN_NAME characters by shortening the model, the longest free-form part, first."""
    head = f"{night.isoformat()} " if night else ""
    judge, data = _cut(judge, 24), _cut(data_short_name(data_file), 16)
    fixed = len(head) + len(judge) + len(data) + 2 * len(SEPARATOR)
    model = _cut(model_short_name(model), max(8, MAX_RUN_NAME - fixed))
    return _cut(head + SEPARATOR.join((judge, model, data)), MAX_RUN_NAME)


def judge_label(config: RunConfig) -> str:
    """The judge as a run's name shows it: its type, a custom judge's class, an external judge's file."""
    if config.judge_template:
        return config.judge_template.rsplit(":", 1)[-1]
    if config.external_judge_path:
        return f"external:{Path(config.external_judge_path).stem}"
    return config.judge_type


def config_run_name(config: RunConfig | dict[str, JsonValue], night: date | None = None) -> str:
    """A run's name from its configuration (a RunConfig, or its JSON as a deployment's parameters hold it)."""
    from judgebench_flows.core.config import RunConfig

    if not isinstance(config, RunConfig):
        config = RunConfig.model_validate(config)
    return run_name(judge_label(config), config.model, config.data_path or config.data_file, night)


def night_name(night: date) -> str:
    """A night's own run: `nightly 2026-11-27`."""
    return f"nightly {night.isoformat()}"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip(" ·-_") + ELLIPSIS


__all__ = [
    "MAX_RUN_NAME",
    "config_run_name",
    "data_short_name",
    "judge_label",
    "model_short_name",
    "night_name",
    "run_name",
]

"""Configuration of an external-judge run: one pydantic model, loaded from YAML plus CLI overrides.

Precedence is YAML file < CLI: an override whose value is None counts as "not given" (that is what an
unset CLI flag looks like), so the YAML value stays. `external_judge_config` is merged key by key (the
CLI's keys win), so one judge parameter can be changed on the command line without restating the rest.
Relative paths are taken relative to the working directory, like every other CLI path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from judgebench_flows.core.errors import UserError
from judgebench_flows.core.safe_yaml import NotReadable, read_limited
from judgebench_flows.core.safe_yaml import load as load_yaml

# The option names that say which column holds what; the judge's config gets them too (see judge_config).
COLUMN_OPTIONS: tuple[str, ...] = ("model_input_column", "model_output_column", "reference_column", "qid_column")

# A mapping as the user wrote it: a judge's parameters (`external_judge_config`, read by the user's judge
# alone, so it has no shape of ours) and a config file's options before `ExternalJudgeConfig` checks them.
UserMapping = dict[str, Any]


class ExternalJudgeConfig(BaseModel):
    """Everything an external-judge run needs. A column option set to None means "not used, not checked"."""

    model_config = ConfigDict(extra="forbid")

    # Accepted so a shared run YAML may say `judge_type: external`; nothing else is allowed here.
    judge_type: Literal["external"] = "external"
    external_judge_path: str
    external_judge_function: str = "evaluate"
    external_judge_config: UserMapping = Field(default_factory=dict)
    model_input_column: str | None = Field(
        default="model_input",
        description="column of --data-path with the prompt that was answered (default model_input)",
    )
    model_output_column: str | None = Field(
        default="response", description="column with the answer to judge (default response)"
    )
    reference_column: str | None = Field(
        default="ground_truth",
        description="column with the reference answer the judge compares with (default ground_truth)",
    )
    qid_column: str | None = Field(default="id", description="column with each row's unique id (default id)")
    max_workers: int = Field(default=8, ge=1)
    shard_size: int = Field(default=500, ge=1)
    data_path: str
    output_dir: str = "results/external"
    # None: <output_dir>/<data file stem>_summary.json
    result_path: str | None = None

    def summary_path(self) -> Path:
        if self.result_path:
            return Path(self.result_path)
        return Path(self.output_dir) / f"{Path(self.data_path).stem}_summary.json"


FIELDS: tuple[str, ...] = tuple(ExternalJudgeConfig.model_fields)


def judge_config(config: ExternalJudgeConfig) -> UserMapping:
    """The `config` argument a judge receives.

    It is `external_judge_config` flattened, plus the column options (so the judge knows which columns
    hold the response and the reference), plus `external_judge_config` itself under that key, which is
    where CLEAR's judges look (`config.get("external_judge_config", {})`). A judge parameter named like a
    column option would be ambiguous, so it is refused rather than silently shadowed.
    """
    params = dict(config.external_judge_config)
    for name in COLUMN_OPTIONS + ("external_judge_config",):
        if name in params:
            raise UserError(
                f"external_judge_config key '{name}' clashes with the option of the same name; set it as a top-level option"
            )
    columns = {name: getattr(config, name) for name in COLUMN_OPTIONS}
    return {**params, **columns, "external_judge_config": dict(config.external_judge_config)}


def parse_judge_config_json(text: str, source: str = "--external-judge-config") -> UserMapping:
    """CLI judge parameters come as a JSON object string; anything else is a user error."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"Invalid JSON in {source}: {exc}") from None
    if not isinstance(value, dict):
        raise UserError(
            f'Invalid JSON in {source}: expected an object like {{"tolerance": 0.01}}, got {type(value).__name__}'
        )
    return value


def _read_yaml(config_path: str) -> UserMapping:
    path = Path(config_path)
    if not path.exists():
        raise UserError(f"Config file not found: {config_path}")
    try:
        text = read_limited(path)  # a regular file of bounded size: not a FIFO, a device, a huge file
    except NotReadable as exc:
        raise UserError(f"Cannot read config file {config_path}: {exc}") from None
    data = load_yaml(text, config_path)  # `path, line L: ...`; aliases, depth, duplicate keys bounded
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"Config file {config_path} must contain a mapping of options, got {type(data).__name__}")
    for key in data:
        if key not in FIELDS:
            raise UserError(f"Unknown key '{key}' in {config_path} (known: {', '.join(FIELDS)})")
    params = data.get("external_judge_config")
    if params is None:
        data.pop("external_judge_config", None)  # an empty `external_judge_config:` line means none
    elif isinstance(params, str):
        data["external_judge_config"] = parse_judge_config_json(params, f"external_judge_config in {config_path}")
    elif params is not None and not isinstance(params, dict):
        raise UserError(f"external_judge_config in {config_path} must be a mapping, got {type(params).__name__}")
    return data


def external_config_from_options(config_path: str | None, overrides: UserMapping) -> ExternalJudgeConfig:
    """Build the run config from an optional YAML file and CLI overrides (None values are ignored).

    `overrides` keys must be ExternalJudgeConfig field names; `external_judge_config` may be a JSON
    string (as typed on the CLI) or a dict. An unknown override key is a bug in the caller, not a user
    error, so it raises ValueError.
    """
    unknown = [key for key in overrides if key not in FIELDS]
    if unknown:
        raise ValueError(f"unknown external judge option(s): {', '.join(unknown)}")
    merged = _read_yaml(config_path) if config_path else {}
    for key, value in overrides.items():
        if value is None:
            continue
        if key == "external_judge_config":
            params = parse_judge_config_json(value) if isinstance(value, str) else dict(value)
            value = {**(merged.get(key) or {}), **params}
        merged[key] = value
    source = f" (from {config_path} and the command line)" if config_path else ""
    try:
        return ExternalJudgeConfig(**merged)
    except ValidationError as exc:
        error = exc.errors()[0]
        option = ".".join(str(part) for part in error["loc"])
        if error["type"] == "missing":
            flag = "--" + option.replace("_", "-")
            raise UserError(f"Missing option {option}: set {flag} or '{option}' in the config file") from None
        raise UserError(f"Invalid option {option}: {error['msg']} (got {error.get('input')!r}){source}") from None

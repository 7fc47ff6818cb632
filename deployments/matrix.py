"""The nightly benchmark matrix: judge types x models x data files, plus settings they all share.

It is read from a YAML file (deployments/nightly.yaml) by the nightly flow at run time, so changing what
runs tonight is a commit, not a redeploy. Validation happens once, here, before anything is judged: an
unknown key or a bad value is a `UserError` naming the key, and every combination is turned into a full
`RunConfig` up front so a typo in one model name cannot surface halfway through the night.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from judgebench_flows.core.api_keys import check_block_name, check_env_name
from judgebench_flows.core.config import DEFAULT_DB_URL, SECRET_NAME_FIELDS, RunConfig, option_of
from judgebench_flows.core.endpoint import DEFAULT_CONCURRENCY
from judgebench_flows.core.errors import UserError
from judgebench_flows.data.dataset import DEFAULT_REF, DEFAULT_REPO_URL

# Set per configuration by the matrix itself; everything else in RunConfig may go under `options`.
MATRIX_FIELDS = frozenset(
    {"judge_type", "model", "data_file", "result_path", "output_dir", "api_key_env", "api_key_secret"}
)


# A model's own endpoint settings, passed to its cells as given.
CELL_ENDPOINT = {"provider", "batch", "vertex_project", "vertex_location"}


class ModelSpec(BaseModel):
    """A model of the matrix with its own endpoint and key source (a name, never the key itself).

    In the YAML a model is either a plain name (the matrix's shared `base_url` and key) or a mapping:
    `{model: gpt-4o-mini, base_url: https://api.openai.com/v1, api_key_env: OPENAI_API_KEY}` or, for a
    locally served judge, `{model: qwen2.5-7b, base_url: http://gpu-host:8000/v1, api_key_env: VLLM_KEY}`.
    `label` names the cell when the same model is served by two endpoints. `provider: anthropic` calls
    a Claude model through the Messages API (its own base_url or ANTHROPIC_BASE_URL, never the matrix's
    shared OpenAI one; key ANTHROPIC_API_KEY unless named); `provider: gemini` through the Gemini API (key
    GEMINI_API_KEY unless named), `provider: vertex` through Vertex AI (`vertex_project`, `vertex_location`;
    Application Default Credentials, no key); `batch: true` judges it by batch.
    """

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1)
    base_url: str | None = None
    api_key_env: str | None = None
    api_key_secret: str | None = None
    label: str | None = None
    max_cost: float | None = Field(default=None, gt=0, description="budget in USD of each run of this model")
    # Its API (None: the matrix's `options`, else openai) and whether it is judged by batch (half price).
    provider: Literal["openai", "anthropic", "gemini", "vertex"] | None = None
    batch: bool | None = None
    vertex_project: str | None = None
    vertex_location: str | None = None

    @property
    def name(self) -> str:
        return self.label or self.model

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/") if value else value

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        return check_env_name(value)

    @field_validator("api_key_secret")
    @classmethod
    def _block_name(cls, value: str | None) -> str | None:
        return check_block_name(value)

    @model_validator(mode="after")
    def _one_key_source(self) -> ModelSpec:
        if self.api_key_env and self.api_key_secret:
            raise ValueError("give the key's source once: api_key_env or api_key_secret, not both")
        return self


class MatrixEntry(BaseModel):
    """One cell of the matrix: its name (also the subflow run's name and output folder) and its config."""

    name: str
    config: RunConfig


class NightlyMatrix(BaseModel):
    model_config = ConfigDict(extra="forbid")

    judge_types: list[str] = Field(min_length=1)
    models: list[ModelSpec] = Field(min_length=1)
    data_files: list[str] = Field(min_length=1)
    repo_url: str = DEFAULT_REPO_URL
    ref: str | None = DEFAULT_REF
    base_url: str | None = None
    # Where every model's key is read unless the model names its own (OPENAI_API_KEY when neither does).
    api_key_env: str | None = None
    api_key_secret: str | None = None
    concurrency: int = Field(default=DEFAULT_CONCURRENCY, ge=1, le=4096)
    db_url: str = DEFAULT_DB_URL
    output_root: str = "results/nightly"
    max_samples: int | None = Field(default=None, ge=1)
    max_cost: float | None = Field(
        default=None,
        gt=0,
        description="the night's budget in USD: each run's --max-cost is what the night has left (or less)",
    )
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("judge_types", "data_files")
    @classmethod
    def _distinct_names(cls, values: list[str]) -> list[str]:
        if any(not str(v).strip() for v in values):
            raise ValueError("entries must be non-empty")
        if len(set(values)) != len(values):
            raise ValueError("entries must be distinct")
        return values

    @field_validator("models", mode="before")
    @classmethod
    def _no_literal_keys(cls, values: Any) -> Any:
        """A key pasted into the matrix is refused before anything else reads it (and never echoed)."""
        for value in values if isinstance(values, list) else []:
            if isinstance(value, dict) and {"api_key", "key", "openai_api_key"} & set(value):
                raise ValueError("a model names where its key is (api_key_env or api_key_secret), never the key itself")
        # A plain name is a model on the matrix's shared endpoint.
        return [{"model": v} if isinstance(v, str) else v for v in values] if isinstance(values, list) else values

    @field_validator("models")
    @classmethod
    def _distinct_models(cls, specs: list[ModelSpec]) -> list[ModelSpec]:
        if any(not s.model.strip() for s in specs):
            raise ValueError("entries must be non-empty")
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ValueError("entries must be distinct (give a model served by two endpoints a `label`)")
        return specs

    @field_validator("options")
    @classmethod
    def _known_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        for key in options:
            if key in MATRIX_FIELDS:
                raise ValueError(f"'{key}' is set by the matrix itself, not under options")
            if key in cls.model_fields:
                raise ValueError(f"'{key}' is a top-level setting of the matrix, not an option")
            if key not in RunConfig.option_names():
                valid = sorted(RunConfig.option_names() - MATRIX_FIELDS - set(cls.model_fields))
                raise ValueError(f"unknown run option '{key}' (valid: {', '.join(valid)})")
        return options

    def overridden(
        self, repo_url: str | None = None, ref: str | None = None, data_files: list[str] | None = None
    ) -> NightlyMatrix:
        """This matrix with another JudgeBench copy, ref or data files (a deployment run's parameters),
        validated as the file is: a bad override is one line naming it."""
        given = {"repo_url": repo_url, "ref": ref, "data_files": data_files}
        changes = {key: value for key, value in given.items() if value is not None}
        if not changes:
            return self
        return parse_matrix({**self.model_dump(), **changes}, "parameters")

    def entries(self, base_url: str | None = None, max_samples: int | None = None) -> list[MatrixEntry]:
        """Every combination as a RunConfig with its own result file and output directory.

        `base_url` and `max_samples` override the file (the flow's parameters, for a quick manual run).
        """
        entries = []
        for judge_type in self.judge_types:
            for spec in self.models:
                for data_file in self.data_files:
                    name = cell_name(judge_type, spec.name, data_file)
                    folder = Path(self.output_root) / name
                    config = _run_config(
                        {
                            **self.options,
                            "judge_type": judge_type,
                            "model": spec.model,
                            "data_file": data_file,
                            "repo_url": self.repo_url,
                            "ref": self.ref,
                            "base_url": base_url or spec.base_url or (None if spec.provider else self.base_url),
                            **_key_source(spec, self),
                            **{k: v for k, v in spec.model_dump(include=CELL_ENDPOINT).items() if v is not None},
                            "concurrency": self.concurrency,
                            "db_url": self.db_url,
                            "max_samples": max_samples or self.max_samples,
                            **({"max_cost": spec.max_cost} if spec.max_cost is not None else {}),
                            "result_path": str(folder / "results.json"),
                            "output_dir": str(folder),
                        }
                    )
                    entries.append(MatrixEntry(name=name, config=config))
        return entries


def _key_source(spec: ModelSpec, matrix: NightlyMatrix) -> dict[str, str | None]:
    """A model's own key source wins over the matrix's; the two kinds never mix. A model of another
    provider than OpenAI never takes the matrix's (OpenAI) key: its provider's variable unless it names
    one (Vertex takes no key at all)."""
    if spec.provider == "vertex":
        return {"api_key_env": None, "api_key_secret": None}
    if spec.api_key_env or spec.api_key_secret or spec.provider not in (None, "openai"):
        return {"api_key_env": spec.api_key_env, "api_key_secret": spec.api_key_secret}
    return {"api_key_env": matrix.api_key_env, "api_key_secret": matrix.api_key_secret}


def _run_config(options: dict[str, Any]) -> RunConfig:
    """A RunConfig for one cell; a bad value is reported under the matrix key it came from."""
    try:
        return RunConfig(**options)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = option_of(error["loc"][:2]).split(".")[0]
        key = {"judge_type": "judge_types", "model": "models", "data_file": "data_files"}.get(field, field)
        if key not in NightlyMatrix.model_fields:
            key = f"options.{field}"
        got = "" if field in SECRET_NAME_FIELDS else f" (got {error.get('input')!r})"
        raise UserError(f"{key}: {error['msg'].removeprefix('Value error, ')}{got}") from None


def cell_name(judge_type: str, model: str, data_file: str) -> str:
    """judge__model__data-file-stem: a configuration's subflow run name and output folder name."""
    return "__".join(_slug(part) for part in (judge_type, model, Path(data_file).name.removesuffix(".jsonl")))


def _slug(text: str) -> str:
    """A file-name-safe form of a model or data file name (gpt-4o/mini:latest -> gpt-4o_mini_latest)."""
    return re.sub(r"[^A-Za-z0-9._=,-]+", "_", text).strip("_") or "_"


def parse_matrix(data: Any, source: str = "matrix") -> NightlyMatrix:
    """Validate a parsed YAML document; the first problem becomes one line naming the key."""
    if not isinstance(data, dict):
        raise UserError(f"{source}: expected a mapping of settings, got {type(data).__name__}")
    try:
        matrix = NightlyMatrix.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        error = next(
            (e for e in errors if e["type"] == "extra_forbidden"), errors[0]
        )  # a misspelt key explains the rest
        key = ".".join(str(part) for part in error["loc"]) or "matrix"
        fields = (
            ModelSpec.model_fields
            if error["loc"][:1] == ("models",) and len(error["loc"]) > 2
            else NightlyMatrix.model_fields
        )
        message = (
            "unknown key (valid: " + ", ".join(fields) + ")"
            if error["type"] == "extra_forbidden"
            else error["msg"].removeprefix("Value error, ")
        )
        raise UserError(f"{source}: {key}: {message}") from None
    _check_judge_types(matrix, source)
    try:
        matrix.entries()
    except UserError as exc:
        raise UserError(f"{source}: {exc}") from None
    return matrix


def _check_judge_types(matrix: NightlyMatrix, source: str) -> None:
    from judgebench_flows.judges import JUDGE_TYPES

    needs = {"custom": "judge_template", "external": "external_judge_path"}
    for judge_type in matrix.judge_types:
        if judge_type not in JUDGE_TYPES:
            raise UserError(
                f"{source}: judge_types: unknown judge type '{judge_type}' (valid: {', '.join(JUDGE_TYPES)})"
            )
        if judge_type in needs and not matrix.options.get(needs[judge_type]):
            raise UserError(f"{source}: judge_types: '{judge_type}' needs options.{needs[judge_type]}")


def load_matrix(path: str | Path) -> NightlyMatrix:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read the matrix file {path}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    return parse_matrix(data, str(path))


__all__ = ["NightlyMatrix", "MatrixEntry", "cell_name", "load_matrix", "parse_matrix"]

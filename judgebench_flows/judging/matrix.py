"""The nightly benchmark matrix: judge types x models x (benchmark, data file), plus settings they all share.

Without `benchmarks:` the data files are JudgeBench's (`data_files`, `repo_url`, `ref`), as always. With
it, each benchmark names its own subsets (default: all it publishes) and, optionally, its own repository and
ref (default: its registry's, pinned); every judge type runs on every benchmark's pairs, each cell scored
by its benchmark's official rule.

It is read from a YAML file (deployments/nightly.yaml) by the nightly flow at run time, so changing what
runs tonight is a commit, not a redeploy. It sits below the flows and the deployments, which both read it
(`python -m judgebench_flows.deployments.matrix` checks a file from the command line). Validation happens
once, here, before anything is judged: an unknown key or a bad value is a `UserError` naming the key, and
every combination is turned into a full `RunConfig` up front so a typo in one model name cannot surface
halfway through the night.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo

from judgebench_flows.core import benchmarks, providers
from judgebench_flows.core.api_keys import check_block_name, check_env_name
from judgebench_flows.core.config import DEFAULT_DB_URL, SECRET_NAME_FIELDS, RunConfig, option_of
from judgebench_flows.core.endpoint import DEFAULT_CONCURRENCY, EndpointSettings
from judgebench_flows.core.errors import UserError
from judgebench_flows.core.names import MAX_NAME_CHARS, checked_name
from judgebench_flows.core.run_names import judge_label, run_name
from judgebench_flows.core.safe_yaml import NotReadable, read_limited
from judgebench_flows.core.safe_yaml import load as load_yaml
from judgebench_flows.core.text import shorten
from judgebench_flows.core.yaml_lines import with_line
from judgebench_flows.data import storage
from judgebench_flows.data.dataset import DEFAULT_REF, DEFAULT_REPO_URL
from judgebench_flows.data.outputs import RUN_ID_FIELD, short_name

# Set per configuration by the matrix itself; everything else in RunConfig may go under `options`.
MATRIX_FIELDS = frozenset(
    {"judge_type", "model", "data_file", "result_path", "output_dir", "api_key_env", "api_key_secret"}
)


# Run options as the matrix file gives them (its `options`, and each cell's settings put together): values
# as YAML reads them, each checked by `RunConfig` when a cell's config is built, a bad one reported under
# its matrix key (`_run_config`).
RunOptions = dict[str, Any]

# A model's own endpoint settings, passed to its cells as given.
CELL_ENDPOINT = {
    "provider",
    "batch",
    "vertex_project",
    "vertex_location",
    "priced_model",
    "bedrock_batch_input",
    "bedrock_batch_output",
    "bedrock_role_arn",
}


def _endpoint_option(name: str) -> Any:
    """`EndpointSettings`' option `name` as one model's own: its bounds and description as declared there,
    its default None (the matrix's value)."""
    return FieldInfo.merge_field_infos(EndpointSettings.model_fields[name], default=None)


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

    # Besides `model`, `label` and `max_cost`, a model's keys are options of its endpoint, each declared
    # once, in `EndpointSettings` (bounds, description): here only its type, optional (None: the matrix's
    # value, else the run's default). The order is the one "unknown key (valid: ...)" lists.
    model: str = Field(min_length=1)
    base_url: str | None = _endpoint_option("base_url")
    api_key_env: str | None = _endpoint_option("api_key_env")
    api_key_secret: str | None = _endpoint_option("api_key_secret")
    label: str | None = None
    max_cost: float | None = Field(default=None, gt=0, description="budget in USD of each run of this model")
    # Its API (None: the matrix's `options`, else openai) and whether it is judged by batch (half price).
    provider: str | None = _endpoint_option("provider")
    batch: bool | None = _endpoint_option("batch")
    # The limit of the model's endpoint, shared by every cell calling it (None: the matrix's). Models
    # that share an endpoint and give different values share the smallest.
    concurrency: int | None = _endpoint_option("concurrency")
    rpm: float | None = _endpoint_option("rpm")
    vertex_project: str | None = _endpoint_option("vertex_project")
    vertex_location: str | None = _endpoint_option("vertex_location")
    priced_model: str | None = _endpoint_option("priced_model")  # the model an Azure deployment serves
    # with provider bedrock and batch: its jobs' S3 locations and role (else the matrix's `options`)
    bedrock_batch_input: str | None = _endpoint_option("bedrock_batch_input")
    bedrock_batch_output: str | None = _endpoint_option("bedrock_batch_output")
    bedrock_role_arn: str | None = _endpoint_option("bedrock_role_arn")

    @property
    def name(self) -> str:
        return self.label or self.model

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/") if value else value

    @field_validator("model", "label")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        """Its cells' folder names, flow run names and database rows: no control character, no document."""
        return checked_name(value, MAX_NAME_CHARS)

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        return check_env_name(value)

    @field_validator("provider")
    @classmethod
    def _provider(cls, value: str | None) -> str | None:
        return providers.check_name(value)

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
    """One cell of the matrix: its name (also the subflow run's name and output folder), its config, and
    the endpoint whose limit it shares with every other cell calling it (`endpoint_of`)."""

    name: str
    config: RunConfig
    endpoint: str = ""
    label: str = ""  # the model as the matrix names it (its `label` when one model has two endpoints)

    @property
    def title(self) -> str:
        """The cell as people read it (the night's artifact, its run list): judge, model, data file."""
        return self.run_name()

    def run_name(self, night: date | None = None) -> str:
        """The cell's flow run name, at most ~60 characters; with `night`, that night's date first."""
        config = self.config
        return run_name(judge_label(config), self.label or config.model, config.data_path or config.data_file, night)


def endpoint_of(config: RunConfig) -> str:
    """The endpoint a cell's calls go to, as cells share its limit: its provider and URL (the provider's
    default URL when none is given), never credentials; `local` for a judge that calls none."""
    identity = config.endpoint_identity()
    if not config.needs_endpoint:
        return "local"
    return f"{config.endpoint.provider} {identity or '(default URL)'}"


class BenchmarkSpec(BaseModel):
    """A benchmark of the matrix: a name (`llmbar`) or a mapping with its `data_files`, `repo_url`, `ref`."""

    model_config = ConfigDict(extra="forbid")

    name: str
    data_files: list[str] | None = Field(default=None, min_length=1)
    repo_url: str | None = None
    ref: str | None = None

    @field_validator("name")
    @classmethod
    def _known(cls, value: str) -> str:
        return benchmarks.check_name(value.strip().lower())


class NightlyMatrix(BaseModel):
    model_config = ConfigDict(extra="forbid")

    judge_types: list[str] = Field(min_length=1)
    models: list[ModelSpec] = Field(min_length=1)
    # JudgeBench's data files (required without `benchmarks:`, else JudgeBench's when it lists JudgeBench).
    data_files: list[str] = Field(default_factory=list)
    benchmarks: list[BenchmarkSpec] | None = Field(default=None, min_length=1)
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
    options: RunOptions = Field(default_factory=dict)
    # Cells judged at once (batch cells, which mostly wait, are not counted): bounds the night's memory.
    cells_in_flight: int = Field(default=8, ge=1, le=256)
    # When the night must be done: a time of day in a time zone ("07:00 Europe/Berlin": the next such
    # moment after the night's scheduled start), or minutes after that start. At the deadline, what
    # batches have not answered is cancelled and judged synchronously (calls.batch).
    finish_by: str | None = None
    deadline_minutes: float | None = Field(default=None, gt=0)
    # A pool night (`cells: pool`) at its deadline cancels the cell runs no worker has started; those still
    # running this many minutes after it are cancelled too (their workers stop them).
    after_deadline_minutes: float = Field(default=60.0, ge=0, le=24 * 60)
    # A pool night's cell run a worker took but whose flow has not begun (Pending: downloading or importing
    # it; no heartbeat yet) this many minutes is taken as crashed and scheduled again (flows/pool_cells.py).
    pending_timeout_minutes: float = Field(default=15.0, gt=0, le=24 * 60)
    # Where cells run: `process`, side by side in the night's own process; `pool`, each as its own run
    # of the ad-hoc deployment, spread over the work pool's workers, every endpoint's limit held across
    # them by a Prefect global concurrency limit (flows/pool_cells.py).
    cells: Literal["process", "pool"] = "process"

    @field_validator("output_root")
    @classmethod
    def _storage(cls, value: str) -> str:
        """A URL's scheme, bucket and package are checked when the matrix is read; the bucket itself
        (there, credentials accepted) before the night's first cell (judging/preflight.check_night)."""
        if storage.is_url(value):
            try:
                storage.check_url("output_root", value)
            except UserError as exc:
                raise ValueError(str(exc).removeprefix("output_root: ")) from None
        return value

    @field_validator("finish_by")
    @classmethod
    def _time_of_day(cls, value: str | None) -> str | None:
        if value is not None:
            parse_finish_by(value)
        return value

    @model_validator(mode="after")
    def _one_deadline(self) -> NightlyMatrix:
        if self.finish_by is not None and self.deadline_minutes is not None:
            raise ValueError("give one deadline: finish_by or deadline_minutes, not both")
        if self.benchmarks is None and not self.data_files:
            raise ValueError("data_files: give at least one data file (or `benchmarks:`)")
        return self

    @field_validator("benchmarks", mode="before")
    @classmethod
    def _named(cls, values: Any) -> Any:
        """A plain name is the benchmark with its defaults."""
        return [{"name": v} if isinstance(v, str) else v for v in values] if isinstance(values, list) else values

    @field_validator("benchmarks")
    @classmethod
    def _distinct_benchmarks(cls, specs: list[BenchmarkSpec] | None) -> list[BenchmarkSpec] | None:
        names = [spec.name for spec in specs or []]
        if len(set(names)) != len(names):
            raise ValueError("entries must be distinct")
        for spec in specs or []:
            for data_file in spec.data_files or []:
                checked_name(data_file, MAX_NAME_CHARS)
        return specs

    def sources(self) -> list[tuple[str, str, str | None, str]]:
        """Every (benchmark, repo_url, ref, data file) the night judges, in the matrix's order."""
        if self.benchmarks is None:
            return [(benchmarks.DEFAULT, self.repo_url, self.ref, data_file) for data_file in self.data_files]
        found = []
        for spec in self.benchmarks:
            chosen = benchmarks.get(spec.name)
            default = chosen.name == benchmarks.DEFAULT
            data_files = spec.data_files or (self.data_files if default and self.data_files else chosen.data_files)
            repo_url = spec.repo_url or (self.repo_url if default else chosen.repo_url)
            ref = spec.ref if spec.ref is not None else (self.ref if default else chosen.ref)
            found += [(chosen.name, repo_url, ref, data_file) for data_file in data_files]
        return found

    def deadline(self, start: datetime) -> datetime | None:
        """The night's deadline for a night that started (or was scheduled) at `start` (aware)."""
        if self.deadline_minutes is not None:
            return start + timedelta(minutes=self.deadline_minutes)
        if self.finish_by is None:
            return None
        hour, minute, zone = parse_finish_by(self.finish_by)
        local = start.astimezone(zone)
        moment = local.replace(hour=hour, minute=minute, second=0, microsecond=0)
        return (
            moment
            if moment > local
            else (local + timedelta(days=1)).replace(hour=hour, minute=minute, second=0, microsecond=0)
        )

    @field_validator("judge_types", "data_files")
    @classmethod
    def _distinct_names(cls, values: list[str]) -> list[str]:
        if any(not str(v).strip() for v in values):
            raise ValueError("entries must be non-empty")
        for value in values:
            checked_name(value, MAX_NAME_CHARS)  # part of every cell's folder name
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
    def _known_options(cls, options: RunOptions) -> RunOptions:
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
        entries, specs = [], []
        sources = self.sources()
        # The night's false-alarm rate is split over its cells (`scoring.alerts`), unless the matrix says.
        cells = self.options.get("alert_cells") or len(self.judge_types) * len(self.models) * len(sources)
        for judge_type in self.judge_types:
            for spec in self.models:
                for benchmark, repo_url, ref, data_file in sources:
                    name = cell_name(judge_type, spec.name, data_file, benchmark)
                    folder = storage.join(self.output_root, name)  # a path or an object-store URL
                    url = base_url or spec.base_url or (None if spec.provider else self.base_url)
                    config = _run_config(
                        {
                            **self.options,
                            "judge_type": judge_type,
                            "model": spec.model,
                            "data_file": data_file,
                            **({"benchmark": benchmark} if benchmark != benchmarks.DEFAULT else {}),
                            "repo_url": repo_url,
                            "ref": ref,
                            "base_url": url,
                            **_key_source(spec, self, url),
                            **{k: v for k, v in spec.model_dump(include=CELL_ENDPOINT).items() if v is not None},
                            "concurrency": self.concurrency,
                            "db_url": self.db_url,
                            "max_samples": max_samples or self.max_samples,
                            "alert_cells": cells,
                            **({"max_cost": spec.max_cost} if spec.max_cost is not None else {}),
                            # each night's run of the cell in its own folder, `latest` the newest
                            "result_path": storage.join(folder, RUN_ID_FIELD, "results.json"),
                            "output_dir": storage.join(folder, RUN_ID_FIELD),
                        }
                    )
                    entries.append(MatrixEntry(name=name, config=config, endpoint=endpoint_of(config), label=spec.name))
                    specs.append(spec)
        return self._endpoint_limits(entries, specs)

    def _endpoint_limits(self, entries: list[MatrixEntry], specs: list[ModelSpec]) -> list[MatrixEntry]:
        """Every cell on one endpoint gets the endpoint's one `concurrency` and `rpm` (the cells then share
        one limit in the process: `calls.limits`): the value its models give (the smallest, should they
        differ), else the matrix's."""
        given: dict[str, tuple[list[int], list[float]]] = {}
        for entry, spec in zip(entries, specs, strict=True):
            concurrencies, rpms = given.setdefault(entry.endpoint, ([], []))
            concurrencies += [spec.concurrency] if spec.concurrency else []
            rpms += [spec.rpm] if spec.rpm else []
        shaped = []
        for entry in entries:
            concurrencies, rpms = given[entry.endpoint]
            limit = {
                "concurrency": min(concurrencies, default=self.concurrency),
                "rpm": min(rpms, default=entry.config.endpoint.rpm),
            }
            endpoint = entry.config.endpoint.model_copy(update=limit)
            shaped.append(entry.model_copy(update={"config": entry.config.model_copy(update={"endpoint": endpoint})}))
        return shaped


def parse_finish_by(value: str) -> tuple[int, int, ZoneInfo]:
    """`HH:MM Area/City` (IANA time zone; `UTC` too): the hour, minute and zone, or ValueError."""
    match = re.fullmatch(r"\s*(\d{1,2}):(\d{2})\s+(\S+)\s*", value)
    if not match or int(match[1]) > 23 or int(match[2]) > 59:
        raise ValueError(f"expected a time of day and a time zone, such as '07:00 Europe/Berlin', got {value!r}")
    try:
        zone = ZoneInfo(match[3])
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {match[3]!r} (an IANA name such as Europe/Berlin)") from None
    return int(match[1]), int(match[2]), zone


def _key_source(spec: ModelSpec, matrix: NightlyMatrix, url: str | None) -> dict[str, str | None]:
    """A model's own key source wins over the matrix's; the two kinds never mix. A model of another
    provider than the matrix's (its `options`' provider, else the one its model name routes to without a
    URL, else OpenAI) never takes the matrix's key: its provider's variable unless it names one (Vertex
    takes no key at all)."""
    shared = matrix.options.get("provider") or providers.IMPLIED
    routed = None if providers.explicit_endpoint(url) else providers.route(spec.model).provider.name
    provider = providers.get(spec.provider or matrix.options.get("provider") or routed)
    if not provider.takes_key:
        return {"api_key_env": None, "api_key_secret": None}
    if spec.api_key_env or spec.api_key_secret or provider.name != shared:
        return {"api_key_env": spec.api_key_env, "api_key_secret": spec.api_key_secret}
    return {"api_key_env": matrix.api_key_env, "api_key_secret": matrix.api_key_secret}


def _run_config(options: RunOptions) -> RunConfig:
    """A RunConfig for one cell; a bad value is reported under the matrix key it came from."""
    try:
        return RunConfig(**options)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = option_of(error["loc"][:2]).split(".")[0]
        key = {"judge_type": "judge_types", "model": "models", "data_file": "data_files"}.get(field, field)
        if key not in NightlyMatrix.model_fields:
            key = f"options.{field}"
        got = "" if field in SECRET_NAME_FIELDS else f" (got {shorten(repr(error.get('input')), 120)})"
        raise UserError(f"{key}: {error['msg'].removeprefix('Value error, ')}{got}") from None


def cell_name(judge_type: str, model: str, data_file: str, benchmark: str = benchmarks.DEFAULT) -> str:
    """judge__model__data-file-stem: a configuration's subflow run name and output folder name; too long
    for a file name (a 300-character model), shortened with a hash of the whole as the single run's output
    files are (`outputs.short_name`), so it fails before no call and two long names never share a folder.
    Another benchmark's subset is named with its benchmark (`llmbar-Adversarial-Neighbor`)."""
    data = (
        Path(data_file).name.removesuffix(".jsonl") if benchmark == benchmarks.DEFAULT else f"{benchmark}-{data_file}"
    )
    parts = (judge_type, model, data)
    return short_name("__".join(_slug(part) for part in parts))


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
        raise UserError(f"{source}: {key}: {message}" if error["loc"] else f"{source}: {message}") from None
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
    """The matrix file: a path, or an object-store URL (`s3://team/nightly.yaml`), so the machine that
    runs the night needs no checkout."""
    path = str(path)
    if storage.is_url(path):
        storage.check_url("matrix", path)
    try:
        text = storage.read_text(path) if storage.is_url(path) else read_limited(path)
    except NotReadable as exc:  # a FIFO, a device, too large, not UTF-8
        raise UserError(f"cannot read the matrix file {storage.shown(path)}: {exc}") from None
    except OSError as exc:
        raise UserError(f"cannot read the matrix file {storage.shown(path)}: {exc.strerror or exc}") from None
    except Exception as exc:  # a store's own errors (credentials refused, no such bucket)
        raise UserError(f"cannot read the matrix file {storage.shown(path)}: {type(exc).__name__}") from None
    data = load_yaml(text, storage.shown(path))  # bounded: aliases, depth, size, duplicate keys
    try:
        return parse_matrix(data, storage.shown(path))
    except UserError as exc:  # `path: key: ...` -> `path, line N: key: ...`
        raise with_line(exc, storage.shown(path), text) from None


__all__ = ["BenchmarkSpec", "NightlyMatrix", "MatrixEntry", "cell_name", "endpoint_of", "load_matrix", "parse_matrix"]

"""The configuration of one JudgeBench run, validated once at the boundary.

It is also the flow's parameter, so Prefect stores it with the flow run: it must never hold a secret.
The API key is read from the environment at call time and nowhere else.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from judgebench_flows.dataset import DEFAULT_REF, DEFAULT_REPO_URL, public_url
from judgebench_flows.errors import UserError

DEFAULT_DATA_FILE = "dataset=judgebench,response_model=gpt-4o-2024-05-13.jsonl"
DEFAULT_DB_URL = "sqlite:///results/judgebench.db"


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    judge_type: str = "arena_hard"
    judge_template: str | None = None
    model: str = Field(min_length=1)
    repo_url: str = DEFAULT_REPO_URL
    ref: str | None = DEFAULT_REF
    data_file: str = DEFAULT_DATA_FILE
    data_path: str | None = None
    templates_dir: str | None = None
    base_url: str | None = None
    concurrency: int = Field(default=16, ge=1, le=4096)
    rpm: float | None = Field(default=None, gt=0)
    shard_size: int = Field(default=50, ge=1)
    result_path: str = "results/judgebench.json"
    output_dir: str = "results/run"
    db_url: str = DEFAULT_DB_URL
    max_samples: int | None = Field(default=None, ge=1)
    single_game: bool = False
    shuffle_responses: bool = False
    seed: int = 42
    request_timeout: float = Field(default=120.0, gt=0)
    max_retries: int = Field(default=6, ge=0, le=50)
    retry_initial_wait: float = Field(default=1.0, ge=0)
    retry_max_wait: float = Field(default=60.0, ge=0)
    shard_retries: int = Field(default=2, ge=0)
    cache: Literal["use", "off", "refresh"] = "use"
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, ge=1)
    cache_dir: str | None = None
    task_runner: Literal["thread", "dask"] = "thread"
    dask_address: str | None = None
    # None: a Prefect global limit only with --task-runner dask (the in-process semaphore is faster).
    global_limit: bool | None = None
    adaptive_concurrency: bool = False
    bootstrap_resamples: int = Field(default=2000, ge=0)
    regression_min_drop: float = Field(default=0.0, ge=0)
    report: bool = True
    external_judge_path: str | None = None
    external_judge_function: str = "evaluate"
    external_judge_config: dict[str, Any] = Field(default_factory=dict)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/") if value else value

    @field_validator("repo_url")
    @classmethod
    def _no_credentials(cls, value: str) -> str:
        return value.strip()

    @model_validator(mode="after")
    def _consistent(self) -> RunConfig:
        if self.task_runner == "dask" and not self.dask_address:
            raise ValueError("--task-runner dask needs --dask-address tcp://HOST:PORT")
        return self

    @property
    def uses_global_limit(self) -> bool:
        """Whether calls also take slots of a Prefect global concurrency limit shared by all workers."""
        return self.needs_endpoint and (self.global_limit if self.global_limit is not None else self.task_runner == "dask")

    @property
    def shuffle_seed(self) -> int | None:
        """The seed that swaps A and B per pair, or None when responses keep their file order."""
        return self.seed if self.shuffle_responses else None

    @property
    def needs_endpoint(self) -> bool:
        return self.judge_type != "external"

    def resolved_base_url(self) -> str:
        if not self.needs_endpoint:
            return "local:"
        url = self.base_url or os.environ.get("OPENAI_BASE_URL") or os.environ.get("BASE_URL")
        if not url:
            raise UserError("no endpoint: pass --base-url or set OPENAI_BASE_URL (or BASE_URL)")
        return url.rstrip("/")

    def sampling_overrides(self) -> dict[str, float | int]:
        overrides: dict[str, float | int] = {}
        if self.temperature is not None:
            overrides["temperature"] = self.temperature
        if self.max_tokens is not None:
            overrides["max_tokens"] = self.max_tokens
        return overrides

    def identity(self) -> dict[str, object]:
        """What makes two runs comparable: same judge, model, data and protocol (not paths or speed)."""
        return {
            "judge_type": self.judge_template or self.judge_type,
            "external": self.external_judge_path and (self.external_judge_path, self.external_judge_function, self.external_judge_config),
            "model": self.model,
            "data": self.data_path or f"{public_url(self.repo_url)}#{self.data_file}",
            "single_game": self.single_game,
            "shuffle": self.shuffle_responses and self.seed,
            "max_samples": self.max_samples and (self.max_samples, self.seed),
            "sampling": self.sampling_overrides(),
        }

    def config_key(self) -> str:
        return hashlib.sha256(json.dumps(self.identity(), sort_keys=True, default=str).encode()).hexdigest()[:16]

    def public_dict(self) -> dict[str, object]:
        data = self.model_dump()
        data["repo_url"] = public_url(self.repo_url)
        return data


def build_config(**options: object) -> RunConfig:
    """RunConfig from CLI/deployment options, turning validation errors into one line naming the option."""
    try:
        return RunConfig(**{k: v for k, v in options.items() if v is not None})
    except ValidationError as exc:
        error = exc.errors()[0]
        name = ".".join(str(p) for p in error["loc"])
        option = f"--{name.replace('_', '-')}" if name else "configuration"
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "is not a known option"
        raise UserError(f"{option}: {message}" + (f" (got {error['input']!r})" if "input" in error and error["type"] != "extra_forbidden" and not isinstance(error["input"], dict) else "")) from None

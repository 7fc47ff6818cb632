"""The configuration of one JudgeBench run, validated once at the boundary.

It is also the flow's parameter, so Prefect stores it with the flow run: it must never hold a secret.
The API key is read from the environment at call time and nowhere else.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue

from judgebench_flows.core import benchmarks, providers
from judgebench_flows.core.config_defaults import DEFAULT_REF, DEFAULT_REPO_URL
from judgebench_flows.core.credentials import public_url
from judgebench_flows.core.endpoint import ENDPOINT_OPTIONS, EndpointSettings
from judgebench_flows.core.errors import UserError
from judgebench_flows.core.identity import ConfigurationIdentity, configuration_key

DEFAULT_DATA_FILE = "dataset=judgebench,response_model=gpt-4o-2024-05-13.jsonl"
DEFAULT_DB_URL = "sqlite:///results/judgebench.db"


# Options that name where a secret lives: an error never echoes their value (it may be a key pasted by mistake).
SECRET_NAME_FIELDS = frozenset({"api_key_env", "api_key_secret"})
ModelT = TypeVar("ModelT", bound=BaseModel)


DEFAULT_SERVER_LOST_SECONDS = 120.0


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Each field is a `judgebench run` option (cli/options.py): --kebab-name, --snake_name and the drop-in
    # `aliases` of JudgeBench's run_judge.py and RM-Gallery's evaluator, its description the help text.
    judge_type: str = Field(
        default="arena_hard",
        description="arena_hard, vanilla, auto_j, prometheus_2, skywork_critic, compass_judger, judge_lm, "
        "panda_lm, reward_model, custom, external, or an LLMBar evaluator llmbar:<Strategy> (llmbar:Vanilla, ...)",
        json_schema_extra={"aliases": ["--judge_name"]},
    )
    judge_template: str | None = Field(default=None, description="custom judge class: path.py:Class or module:Class")
    benchmark: str = Field(
        default=benchmarks.DEFAULT,
        description="the benchmark judged: judgebench or llmbar; its repository, pinned commit, data file and "
        "official scoring are the defaults (docs/benchmarks.md)",
    )
    model: str = Field(
        min_length=1,
        description="judge model name sent to the endpoint",
        json_schema_extra={"aliases": ["--judge-model", "--judge_model"]},
    )
    repo_url: str = Field(
        default=DEFAULT_REPO_URL, description="git URL, file:// URL or local path of the JudgeBench repository"
    )
    ref: str | None = Field(
        default=DEFAULT_REF, description="commit, tag or branch to check out (default: a pinned JudgeBench commit)"
    )
    data_file: str = Field(
        default=DEFAULT_DATA_FILE,
        description="data file inside the repository's data/ directory, or the benchmark's subset "
        "(llmbar: Natural, Adversarial/Neighbor, Adversarial/GPTInst, Adversarial/GPTOut, Adversarial/Manual)",
    )
    data_path: str | None = Field(
        default=None, description="judge a local file, no clone", json_schema_extra={"aliases": ["--pairs"]}
    )
    templates_dir: str | None = Field(
        default=None, description="directory of judge prompt templates (default: the checkout's utils/templates)"
    )
    # The endpoint and how it is called (core.endpoint), given as flat options (--base-url,
    # --concurrency, ...): the flat names stay the CLI's and the deployments' contract, and a dump is flat.
    endpoint: EndpointSettings = Field(
        default_factory=EndpointSettings,
        description="the endpoint and how it is called, also given as the flat options below",
    )
    shard_size: int = Field(default=50, ge=1, description="pairs per shard task")
    # Each run its own folder ({run_id} is replaced; results/latest links the newest): a run never
    # overwrites what an earlier one wrote unless these options name the same files.
    result_path: str = Field(
        default="results/{run_id}/results.json",
        description="results JSON ({run_id}: the run's id; default: results.json in --output-dir)",
    )
    output_dir: str = Field(
        default="results/{run_id}",
        description="directory for the per-judgment JSONL and report ({run_id}: the run's id; results/latest links the newest)",
    )
    db_url: str = Field(default=DEFAULT_DB_URL, description="SQLAlchemy URL of the results database")
    max_samples: int | None = Field(default=None, ge=1, description="judge a seeded subset of N pairs")
    single_game: bool = Field(default=False, description="judge one order only")
    shuffle_responses: bool = Field(default=False, description="swap A/B per pair from the seed")
    # numpy's bootstrap refuses a negative seed: say so before paying
    seed: int = Field(default=42, ge=0, description="seed for sampling, shuffling and bootstrap")
    shard_retries: int = Field(default=2, ge=0, description="retries of a shard task whose judgments did not all end")
    temperature: float | None = Field(
        default=None, ge=0, le=2, description="override the judge's temperature (default: the judge's own, 0)"
    )
    max_tokens: int | None = Field(default=None, ge=1, description="override the judge's max_tokens")
    max_failed_fraction: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="the run fails (exit 4) when more than this share of judgments failed or were invalid",
    )
    cache_dir: str | None = Field(
        default=None, description="where cloned repositories are kept (default ~/.cache/judgebench-flows)"
    )
    task_runner: Literal["thread", "dask"] = Field(default="thread", description="where shards run")
    dask_address: str | None = Field(default=None, description="tcp://HOST:PORT of a Dask scheduler")
    server_lost_timeout: float | None = Field(
        default=None,
        ge=0,
        description="seconds a run waits for a Prefect server that stopped answering before it ends with exit 5 "
        "(default: $JUDGEBENCH_SERVER_LOST_TIMEOUT, else 120); a server back in time lets the run go on",
    )
    db_lost_timeout: float | None = Field(
        default=None,
        ge=0,
        description="seconds a run waits for a results database that stopped answering before it ends with "
        "exit 5 (default: $JUDGEBENCH_DB_LOST_TIMEOUT, else 300); the answers received meanwhile are kept "
        "in a journal under --cache-dir",
    )
    global_limit: bool | None = Field(
        default=None,
        description="hold --concurrency and --rpm across all workers and runs with a Prefect global concurrency "
        "limit (default: on with --task-runner dask, off in-process)",
    )
    bootstrap_resamples: int = Field(default=2000, ge=0, description="bootstrap resamples of the confidence intervals")
    regression_min_drop: float = Field(
        default=0.0, ge=0, description="a drop in accuracy below this is not reported as a regression"
    )
    position_bias_check: bool = Field(
        default=True,
        description="report order consistency or first-position rate significantly worse than the "
        "configuration's recent runs as a regression (exit 1, judgebench.run.regressed)",
    )
    epochs: int = Field(
        default=1,
        ge=1,
        le=100,
        description="judge every pair K times in each order: accuracy is the mean of the K epochs, the judge's "
        "own noise is measured, and each epoch is cached apart (K+1 after K pays only the new one)",
    )
    baseline_runs: int = Field(
        default=5,
        ge=1,
        le=50,
        description="the regression check compares a run with the mean of this many recent finished runs of "
        "its configuration, pair by pair",
    )
    alert_false_alarm_rate: float = Field(
        default=0.02,
        gt=0,
        lt=0.5,
        description="the share of runs (of nights, for a night's cells together) on which an unchanged judge "
        "may be reported as regressed; split over --alert-cells",
    )
    alert_cells: int = Field(
        default=1,
        ge=1,
        description="how many runs are tested together (a night sets its cell count): each gets "
        "--alert-false-alarm-rate / N, so the night as a whole keeps the rate",
    )
    report: bool = Field(default=True, description="the HTML report")
    head_start: bool = Field(
        default=True,
        description="judge the first pairs while Prefect starts (judging/head_start.py); --no-head-start: "
        "the first call waits for the flow run",
    )
    reward_backend: Literal["pooling", "transformers"] = Field(
        default="pooling",
        description="reward_model: vLLM's Pooling API at --base-url, or the model run here with transformers",
    )
    external_judge_path: str | None = Field(default=None, description="external judge: its Python file")
    external_judge_function: str = Field(default="evaluate", description="external judge: its function")
    external_judge_config: dict[str, Any] = Field(
        default_factory=dict, description="external judge: JSON object passed to the judge as config"
    )
    prices: str | None = Field(
        default=None,
        description="YAML or JSON price file (model id -> input_per_mtok, output_per_mtok) over the bundled table",
    )
    max_cost: float | None = Field(
        default=None,
        gt=0,
        description="budget in USD: refused before the first call when the worst case is above it (exit 2), "
        "stopped when spent (exit 6, resumable)",
    )

    _routed: providers.Route | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _nest_endpoint(cls, data: Any) -> Any:
        """Flat endpoint options (as the CLI, deployments and stored parameters give them) into `endpoint`."""
        if not isinstance(data, dict) or not ENDPOINT_OPTIONS & data.keys():
            return data
        data = dict(data)
        nested = data.get("endpoint") or {}
        nested = nested.model_dump() if isinstance(nested, EndpointSettings) else dict(nested)
        nested.update({name: data.pop(name) for name in ENDPOINT_OPTIONS & data.keys()})
        data["endpoint"] = nested
        return data

    @model_serializer(mode="wrap")
    def _flat(self, handler: Any) -> dict[str, Any]:
        """Dumped flat, as before the endpoint was nested: results.json's `config`, the stored run
        configuration and Prefect's parameters keep their shape, and validate back. The benchmark is
        written only when not JudgeBench, so a JudgeBench run's outputs are what they always were."""
        data = handler(self)
        data.update(data.pop("endpoint", None) or {})
        if data.get("benchmark") == benchmarks.DEFAULT:
            del data["benchmark"]
        return data

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> JsonSchemaValue:
        """The schema Prefect shows and checks parameters against is flat too, like the dump."""
        schema = handler(core_schema)
        target = handler.resolve_ref_schema(schema)
        properties = {k: v for k, v in target.get("properties", {}).items() if k != "endpoint"}
        target["properties"] = {**properties, **EndpointSettings.model_json_schema()["properties"]}
        return schema

    @classmethod
    def option_names(cls) -> set[str]:
        """Every flat option a run takes (CLI flags, deployment `options`)."""
        return (set(cls.model_fields) - {"endpoint"}) | ENDPOINT_OPTIONS

    @field_validator("benchmark")
    @classmethod
    def _known_benchmark(cls, value: str) -> str:
        return benchmarks.check_name(value.strip().lower())

    @field_validator("repo_url", "db_url")
    @classmethod
    def _no_credentials(cls, value: str) -> str:
        """This model is the flow's parameter (stored by Prefect) and is copied into every output: a
        password or token in a URL is kept with the run's credentials only (`credentials.stash`)."""
        from judgebench_flows.core.credentials import stash

        return stash(value.strip())

    @field_validator(
        "model",
        "judge_type",
        "judge_template",
        "ref",
        "data_file",
        "data_path",
        "templates_dir",
        "result_path",
        "output_dir",
        "cache_dir",
        "external_judge_path",
        "external_judge_function",
        "prices",
        "dask_address",
    )
    @classmethod
    def _names(cls, value: str | None) -> str | None:
        """They become file names, database values and printed lines: a control character is refused here,
        before any call (a NUL fails only once calls are paid; an ESC is a terminal escape; core/names)."""
        from judgebench_flows.core.names import checked_name

        return checked_name(value)

    @model_validator(mode="after")
    def _consistent(self) -> RunConfig:
        if self.task_runner == "dask" and not self.dask_address:
            raise ValueError("--task-runner dask needs --dask-address tcp://HOST:PORT")
        self._benchmark_defaults()
        if self.endpoint.provider is None:
            self._route()
        if "result_path" not in self.model_fields_set:
            # A run's files go together: results.json beside its JSONL and report, wherever --output-dir
            # puts them (a bucket too: a worker sharing no disk with its reader loses nothing).
            self.result_path = f"{self.output_dir.rstrip('/')}/results.json"
        return self

    def _benchmark_defaults(self) -> None:
        """Another benchmark's repository, pinned commit and default subset where the run names none."""
        chosen = benchmarks.get(self.benchmark)
        if chosen.name == benchmarks.DEFAULT:
            return
        given = self.model_fields_set
        if "repo_url" not in given:
            self.repo_url = chosen.repo_url
        if "ref" not in given:
            self.ref = chosen.ref
        if "data_file" not in given:
            self.data_file = chosen.default_data_file

    def _route(self) -> None:
        """No --provider: OpenAI-compatible at the URL the run or the environment gives, else the API
        JudgeBench's run_judge.py sends the model to (`providers.route`), said by `routed`."""
        chosen: dict[str, str | None] = {"provider": providers.IMPLIED}
        if self.needs_endpoint and not providers.explicit_endpoint(self.endpoint.base_url):
            way = providers.route(self.model)
            chosen = {"provider": way.provider.name, "base_url": way.base_url}
            self._routed = way
        self.endpoint = self.endpoint.model_copy(update=chosen)
        if problem := providers.get(self.endpoint.provider).settings_problem(self.endpoint):
            raise ValueError(problem)

    def routed(self) -> str | None:
        """The line saying which API the model's name chose, when it chose one."""
        if self._routed is None:
            return None
        return self._routed.line(self.model, public_url(self.resolved_base_url()))

    def server_lost_seconds(self) -> float:
        """How long the run waits for a Prefect server that stopped answering (`--server-lost-timeout`, else
        $JUDGEBENCH_SERVER_LOST_TIMEOUT, else 120 s)."""
        if self.server_lost_timeout is not None:
            return self.server_lost_timeout
        try:
            return max(0.0, float(os.environ.get("JUDGEBENCH_SERVER_LOST_TIMEOUT", DEFAULT_SERVER_LOST_SECONDS)))
        except ValueError:
            return DEFAULT_SERVER_LOST_SECONDS

    @property
    def uses_global_limit(self) -> bool:
        """Whether calls also take slots of a Prefect global concurrency limit shared by all workers."""
        return self.needs_endpoint and (
            self.global_limit if self.global_limit is not None else self.task_runner == "dask"
        )

    @property
    def shuffle_seed(self) -> int | None:
        """The seed that swaps A and B per pair, or None when responses keep their file order."""
        return self.seed if self.shuffle_responses else None

    @property
    def needs_endpoint(self) -> bool:
        return self.judge_type != "external" and not (
            self.judge_type == "reward_model" and self.reward_backend == "transformers"
        )

    def _given_base_url(self) -> str | None:
        """--base-url, else the provider's environment variable (OPENAI_BASE_URL, ANTHROPIC_BASE_URL...), else
        its own API (`Provider.endpoint`), as given."""
        return providers.get(self.endpoint.provider).endpoint(self.endpoint)

    def resolved_base_url(self) -> str:
        if not self.needs_endpoint:
            return "local:"
        url = self._given_base_url()
        if not url:
            raise UserError(f"no endpoint: pass --base-url (--provider {self.endpoint.provider} has no default)")
        from judgebench_flows.core.credentials import stash

        return stash(url.rstrip("/"))  # what runs, results and Prefect see: never a user:password@

    @property
    def priced_model_name(self) -> str:
        """The model priced and shaped for: --priced-model (an Azure deployment's model), else --model as the
        provider's price table names it (a Bedrock profile's model id): `EndpointSettings.priced_name`, which
        the calls' request rule is chosen by too."""
        return self.endpoint.priced_name(self.model)

    def retirement_notice(self) -> str | None:
        """The judge model's retirement notice (its provider's shutdown date past or within 30 days), if the
        run calls a model at all: the one place every door and flow gets it from."""
        from judgebench_flows.core.pricing import retirement_notice

        return retirement_notice(self.priced_model_name, self.prices) if self.needs_endpoint else None

    def sampling_overrides(self) -> dict[str, float | int | str]:
        overrides: dict[str, float | int | str] = {}
        if self.temperature is not None:
            overrides["temperature"] = self.temperature
        if self.max_tokens is not None:
            overrides["max_tokens"] = self.max_tokens
        if self.endpoint.reasoning_effort is not None:
            overrides["reasoning_effort"] = self.endpoint.reasoning_effort
        return overrides

    def identity(self, commit: str | None = None, judge_fingerprint: str | None = None) -> ConfigurationIdentity:
        """What makes two runs comparable: everything that changes the answer (not paths or speed).

        The judge, model, endpoint (without credentials; two servers of "the same" model are different
        judges), data file and the commit actually judged, protocol, prompts and sampling. The flow
        passes the commit it cloned and the judge's fingerprint (a digest of the prompts it renders,
        system text, sampling and follow-up); without them the ref and the options stand in.
        """
        return {
            "judge_type": self.judge_template or self.judge_type,
            "external": self.external_judge_path
            and (self.external_judge_path, self.external_judge_function, self.external_judge_config),
            "model": self.model,
            "endpoint": self.endpoint_identity(),
            "data": self.data_path or f"{public_url(self.repo_url)}#{self.data_file}",
            "commit": None if self.data_path else (commit or self.ref),
            "single_game": self.single_game,
            "shuffle": self.shuffle_responses and self.seed,
            "max_samples": self.max_samples and (self.max_samples, self.seed),
            "sampling": self.sampling_overrides(),
            "prompts": judge_fingerprint and hashlib.sha256(judge_fingerprint.encode()).hexdigest()[:16],
            "templates_dir": None if judge_fingerprint else self.templates_dir,
            "request": [self.endpoint.reasoning_effort, self.endpoint.request_style, sorted(self.endpoint.drop_params)],
            "provider": self.endpoint.provider_name,
            **({"benchmark": self.benchmark} if self.benchmark != benchmarks.DEFAULT else {}),
        }

    def endpoint_identity(self) -> str | None:
        """The endpoint as it identifies a judge: scheme, host, port and path, never credentials."""
        if not self.needs_endpoint:
            return None
        url = self._given_base_url()
        if not url:
            return None
        parts = urlsplit(url.strip().rstrip("/"))
        host = (parts.hostname or "").lower() + (f":{parts.port}" if parts.port else "")
        return f"{parts.scheme.lower()}://{host}{parts.path}"

    def config_key(self, commit: str | None = None, judge_fingerprint: str | None = None) -> str:
        """Key of a configuration's history: a run is compared only with earlier runs of the same key.
        Keys from before the endpoint, commit and prompts were part of it stay readable in the history,
        they just never match a new run's key (a new chain starts)."""
        return configuration_key(self.identity(commit, judge_fingerprint))

    def public_dict(self) -> dict[str, object]:
        data = self.model_dump()
        data["repo_url"] = public_url(self.repo_url)
        return data


def results_db_url(given: str | None) -> str:
    """The results database a command reads: --db-url, else JUDGEBENCH_DB_URL, else the default; without
    its password from here on (messages, outputs), the database is opened with it (`credentials.stash`)."""
    from judgebench_flows.core.credentials import stash

    return stash(given or os.environ.get("JUDGEBENCH_DB_URL") or DEFAULT_DB_URL)


def option_of(loc: tuple[int | str, ...]) -> str:
    """The flat option a validation error's location names (an endpoint setting is given flat)."""
    loc = loc[1:] if loc[:1] == ("endpoint",) else loc
    return ".".join(str(p) for p in loc)


def build_config(**options: Any) -> RunConfig:
    """RunConfig from CLI/deployment options, turning validation errors into one line naming the option."""
    return validated(RunConfig, options)


def run_settings(options: Mapping[str, Any], model_required: str) -> RunConfig:
    """A run's settings from a door's options (the command's given options, `evaluate()`'s keywords): an
    external judge deciding JudgeBench pairs calls no endpoint, so its model is "external" unless named;
    any other run needs its model, else `model_required` (the door's own words for it) as a UserError."""
    given = dict(options)
    if given.get("judge_type") == "external" and not given.get("model"):
        given["model"] = "external"
    if not given.get("model"):
        raise UserError(model_required)
    return build_config(**given)


def validated(model: type[ModelT], options: Mapping[str, object]) -> ModelT:
    """`model` from options (None: left out), a validation error as one line naming the flat option."""
    try:
        return model(**{k: v for k, v in options.items() if v is not None})
    except ValidationError as exc:
        error = exc.errors()[0]
        name = option_of(error["loc"])
        option = f"--{name.replace('_', '-')}" if name else "configuration"
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "is not a known option"
        raise UserError(
            f"{option}: {message}"
            + (
                f" (got {error['input']!r})"
                if "input" in error
                and error["type"] != "extra_forbidden"
                and not isinstance(error["input"], dict)
                and name not in SECRET_NAME_FIELDS
                else ""
            )
        ) from None

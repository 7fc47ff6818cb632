"""How a run talks to its endpoint: one settings model, defaults written here and nowhere else.

`RunConfig` embeds it whole (as `endpoint`, while still taking the flat option names the CLI and the
deployments use), `JudgeSpec` carries it to the workers, and `ChatCaller` is configured from it, whole.
It travels as a Prefect parameter and to Dask workers, so it names where the key is and never
holds the key itself.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from judgebench_flows.core import providers

CacheMode = Literal["use", "off", "refresh"]
CacheReuse = Literal["auto", "this-run", "any"]
_AGE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw]?)")
_AGE_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def age_seconds(text: str) -> float:
    """A maximum age as written (`90s`, `30m`, `12h`, `7d`, `2w`; a bare number is seconds) in seconds."""
    found = _AGE.fullmatch(text.strip().lower())
    if found is None:
        raise ValueError("must be a duration such as 90s, 30m, 12h, 7d or 2w")
    return float(found.group(1)) * _AGE_UNITS[found.group(2)]


class EndpointSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Each field is a `judgebench run` option too (cli/options.py), its description the help text.
    provider: str | None = Field(
        default=None,
        description=f"the API the endpoint speaks: {', '.join(providers.names())} (docs/providers-and-batch.md: each one's "
        "URL and key variables). Default: openai when a base URL is given (--base-url, OPENAI_BASE_URL), else "
        "chosen by the model's name as JudgeBench's run_judge.py does (gpt/o1: OpenAI, claude: Anthropic, "
        "gemini: Vertex AI, Llama-3.1-405B: Together, any other: a vLLM server on localhost:8000)",
    )
    base_url: str | None = Field(
        default=None,
        description="the endpoint (else the provider's variable: OPENAI_BASE_URL, ANTHROPIC_BASE_URL, ...; else the "
        "provider's own API)",
    )
    priced_model: str | None = Field(
        default=None,
        description="the model the endpoint's model name stands for, for prices and request rules (an Azure "
        "OpenAI deployment's model, e.g. gpt-4o-2024-08-06; a gateway's alias)",
    )
    vertex_project: str | None = Field(
        default=None,
        description="with --provider vertex: the Google Cloud project (else GOOGLE_CLOUD_PROJECT, else the "
        "project of the Application Default Credentials)",
    )
    vertex_location: str = Field(
        default="us-central1", description="with --provider vertex: the Vertex AI region (or global)"
    )
    # Where the endpoint's key is read, by NAME only: an environment variable (default OPENAI_API_KEY)
    # or a Prefect Secret block. Never the key itself.
    api_key_env: str | None = Field(
        default=None, description="NAME of the environment variable holding the endpoint's key (default OPENAI_API_KEY)"
    )
    api_key_secret: str | None = Field(
        default=None, description="NAME of a Prefect Secret block holding the endpoint's key"
    )
    concurrency: int = Field(
        default=16,
        ge=1,
        le=4096,
        description="calls in flight at once",
        json_schema_extra={"aliases": ["--max-workers", "--max_workers", "--concurrency_limit"]},
    )
    rpm: float | None = Field(default=None, gt=0, description="at most this many requests per minute")
    request_timeout: float = Field(default=120.0, gt=0, description="seconds per call before it is retried")
    max_retries: int = Field(
        default=6,
        ge=0,
        le=50,
        description="retries per call for 429/5xx/timeouts/dropped connections, shard retries included",
    )
    endpoint_lost_timeout: float = Field(
        default=30.0,
        gt=0,
        description="the run stops (exit 9) when no call was answered for this many seconds and every attempt "
        "since failed to connect; the calls never answered are sent by the same command",
    )
    retry_initial_wait: float = Field(
        default=1.0, ge=0, description="seconds before the first retry; doubles each retry"
    )
    retry_max_wait: float = Field(
        default=60.0, ge=0, description="longest backoff between retries; a server's Retry-After is still honoured"
    )
    cache: CacheMode = Field(
        default="use",
        description="the call and shard caches: use, off (ignore them) or refresh (pay again and overwrite)",
        json_schema_extra={"shortcuts": {"--no-cache": "off", "--refresh-cache": "refresh"}},
    )
    cache_reuse: CacheReuse = Field(
        default="auto",
        description="which cached answers a run reuses: any (any earlier run's), this-run (only what this flow run "
        "paid: its retries, its reschedule after a crash, a twin started meanwhile) or auto (this-run for a night "
        "and a deployment's run, any from the command line)",
    )
    cache_max_age: str | None = Field(
        default=None,
        description="reuse only cached answers younger than this (90s, 30m, 12h, 7d, 2w); older ones are paid again",
    )
    adaptive_concurrency: bool = Field(
        default=False, description="halve the calls in flight on a 429, grow back by one after that many successes"
    )
    # Reasoning models (request_rules): effort passed through, a request style forced for endpoints the
    # model table does not know, parameters never sent.
    reasoning_effort: Literal["low", "medium", "high"] | None = Field(
        default=None, description="reasoning models (o1, o3, o4, gpt-5, ...): passed through as reasoning_effort"
    )
    request_style: Literal["auto", "standard", "o1", "reasoning"] = Field(
        default="auto",
        description="how requests are shaped: auto (by model name), standard (as the judge asks), o1 "
        "(JudgeBench's o1 requests: system folded into the user turn, no sampling parameters), reasoning "
        "(no temperature/top_p, max_tokens sent as max_completion_tokens)",
    )
    drop_params: list[str] = Field(
        default_factory=list,
        description="comma-separated request parameters never to send (e.g. temperature,top_p) for endpoints "
        "that reject them",
    )
    batch: bool = Field(
        default=False,
        description="send every judgment through the provider's batch API (OpenAI Batch, Anthropic Message "
        "Batches, Gemini Batch Mode, Azure OpenAI Batch, Bedrock batch inference): about half the price, answers within 24 hours; for nightly runs, not interactive ones",
    )
    batch_poll_seconds: float = Field(
        default=60.0, gt=0, description="with --batch: how often the status of submitted batches is read"
    )
    batch_deadline: str | None = Field(
        default=None,
        description="with --batch: a time with its UTC offset (2026-11-26T07:00:00+01:00) when open batches are "
        "cancelled and what they have not answered is judged synchronously (at the synchronous price)",
    )
    bedrock_batch_input: str | None = Field(
        default=None,
        description="with --batch --provider bedrock: s3://BUCKET/PREFIX/ where the batch jobs' input files are "
        "written (Bedrock reads them as --bedrock-role-arn)",
    )
    bedrock_batch_output: str | None = Field(
        default=None,
        description="with --batch --provider bedrock: s3://BUCKET/PREFIX/ where Bedrock writes the jobs' outputs",
    )
    bedrock_role_arn: str | None = Field(
        default=None,
        description="with --batch --provider bedrock: the IAM service role Bedrock's batch jobs run as "
        "(arn:aws:iam::ACCOUNT:role/NAME), allowed to read the input and write the output location",
    )

    @field_validator("provider")
    @classmethod
    def _known_provider(cls, value: str | None) -> str | None:
        return providers.check_name(value)

    @field_validator("batch_deadline")
    @classmethod
    def _moment(cls, value: str | None) -> str | None:
        if value is None:
            return None
        from datetime import datetime

        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError("must be an ISO 8601 time such as 2026-11-26T07:00:00+01:00") from None
        if moment.tzinfo is None:
            raise ValueError("must give its UTC offset (+01:00, Z)")
        return moment.isoformat()

    @field_validator("cache_max_age")
    @classmethod
    def _age(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if age_seconds(value) <= 0:
            raise ValueError("must be longer than 0 seconds")
        return value.strip().lower()

    @property
    def max_age_seconds(self) -> float | None:
        """`cache_max_age` in seconds (None: answers of any age are reused)."""
        return age_seconds(self.cache_max_age) if self.cache_max_age else None

    def reused_newer_than(self, started: datetime) -> datetime | None:
        """The oldest a cached answer a run started at `started` may reuse (None: any age)."""
        age = self.max_age_seconds
        return started - timedelta(seconds=age) if age is not None else None

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        from judgebench_flows.core.credentials import stash

        return stash(value.rstrip("/")) if value else value  # user:password@ stays with the run's credentials

    @field_validator("api_key_env")
    @classmethod
    def _key_env_name(cls, value: str | None) -> str | None:
        from judgebench_flows.core.api_keys import check_env_name

        return check_env_name(value)

    @field_validator("api_key_secret")
    @classmethod
    def _key_block_name(cls, value: str | None) -> str | None:
        from judgebench_flows.core.api_keys import check_block_name

        return check_block_name(value)

    @field_validator("priced_model")
    @classmethod
    def _model_id(cls, value: str | None) -> str | None:
        """A model id the price table and request rules look up: no control character, no path (`../../x`)."""
        from judgebench_flows.core.names import checked_model_id

        return checked_model_id(value)

    @field_validator("bedrock_batch_input", "bedrock_batch_output", "bedrock_role_arn")
    @classmethod
    def _no_control(cls, value: str | None) -> str | None:
        from judgebench_flows.core.names import checked_name

        return checked_name(value)

    @field_validator("vertex_project", "vertex_location")
    @classmethod
    def _google_name(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[a-z][a-z0-9-]{1,62}", value):
            raise ValueError("must be a Google Cloud name (lowercase letters, digits, dashes)")
        return value

    @model_validator(mode="after")
    def _one_key_source(self) -> EndpointSettings:
        if self.api_key_env and self.api_key_secret:
            raise ValueError("give the key's source once: api_key_env or api_key_secret, not both")
        if self.provider and (problem := providers.get(self.provider).settings_problem(self)):
            raise ValueError(problem)
        return self

    @property
    def provider_name(self) -> str:
        """The provider the run calls (one is always chosen once a `RunConfig` holds these settings)."""
        return providers.get(self.provider).name

    def priced_name(self, model: str) -> str:
        """The model a run calling `model` here is priced and its requests shaped for: --priced-model (an
        Azure deployment's model, a gateway's alias), else `model` as the provider's price table names it (a
        Bedrock profile's or ARN's model id; a `global.` profile kept, priced apart). One answer for the
        settings' prices (`RunConfig.priced_model_name`) and the request rule the calls go out under
        (`judging.shards.request_rule_of`): a run is never priced as one model and shaped as another."""
        return self.priced_model or providers.get(self.provider).priced_name(model)


ENDPOINT_OPTIONS = frozenset(EndpointSettings.model_fields)
"""The flat option names (CLI flags, deployment options) that belong to the endpoint settings."""
DEFAULT_CONCURRENCY: int = EndpointSettings.model_fields["concurrency"].default
"""For the deployments' own parameters, which show it as their default (the value is written above only)."""

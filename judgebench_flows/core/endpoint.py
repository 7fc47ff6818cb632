"""How a run talks to its endpoint: one settings model, defaults written here and nowhere else.

`RunConfig` embeds it whole (as `endpoint`, while still taking the flat option names the CLI and the
deployments use), `JudgeSpec` carries it to the workers, and `ChatCaller.from_settings` builds the caller
from it. It travels as a Prefect parameter and to Dask workers, so it names where the key is and never
holds the key itself.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

CacheMode = Literal["use", "off", "refresh"]


class EndpointSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    provider: Literal["openai", "anthropic"] = Field(
        default="openai",
        description="the endpoint's wire protocol: openai (any OpenAI-compatible chat endpoint) or anthropic "
        "(Anthropic's Messages API through the anthropic SDK; key from ANTHROPIC_API_KEY, URL from "
        "ANTHROPIC_BASE_URL, else https://api.anthropic.com)",
    )
    base_url: str | None = None
    # Where the endpoint's key is read, by NAME only: an environment variable (default OPENAI_API_KEY)
    # or a Prefect Secret block. Never the key itself.
    api_key_env: str | None = None
    api_key_secret: str | None = None
    concurrency: int = Field(default=16, ge=1, le=4096)
    rpm: float | None = Field(default=None, gt=0)
    request_timeout: float = Field(default=120.0, gt=0)
    max_retries: int = Field(default=6, ge=0, le=50)
    retry_initial_wait: float = Field(default=1.0, ge=0)
    retry_max_wait: float = Field(default=60.0, ge=0)
    cache: CacheMode = "use"
    adaptive_concurrency: bool = False
    # Reasoning models (request_rules): effort passed through, a request style forced for endpoints the
    # model table does not know, parameters never sent.
    reasoning_effort: Literal["low", "medium", "high"] | None = None
    request_style: Literal["auto", "standard", "o1", "reasoning"] = "auto"
    drop_params: list[str] = Field(default_factory=list)
    batch: bool = Field(
        default=False,
        description="send every judgment through the provider's batch API (OpenAI Batch, Anthropic Message "
        "Batches): about half the price, answers within 24 hours; for nightly runs, not interactive ones",
    )
    batch_poll_seconds: float = Field(
        default=60.0, gt=0, description="with --batch: how often the status of submitted batches is read"
    )

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        from judgebench_flows.core.credentials import stash

        return stash(value.rstrip("/")) if value else value  # user:password@ stays in this process only

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

    @model_validator(mode="after")
    def _one_key_source(self) -> EndpointSettings:
        if self.api_key_env and self.api_key_secret:
            raise ValueError("give the key's source once: api_key_env or api_key_secret, not both")
        return self


ENDPOINT_OPTIONS = frozenset(EndpointSettings.model_fields)
"""The flat option names (CLI flags, deployment options) that belong to the endpoint settings."""
DEFAULT_CONCURRENCY: int = EndpointSettings.model_fields["concurrency"].default
"""For the deployments' own parameters, which show it as their default (the value is written above only)."""

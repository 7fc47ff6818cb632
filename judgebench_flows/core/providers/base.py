"""What a provider is: one object holding every fact the run needs about one API it can call.

Plain data (and a few methods a provider may override), so the low layers (settings, keys, prices, cache
identities) read it without importing the model-call layer: the wires, the batch API, the request rule
and the token budget are named as "module:attribute" strings inside `judgebench_flows.calls`, imported
by `calls.providers` when a run picks them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from judgebench_flows.core.errors import UserError

CHAT = "chat"


class Settings(Protocol):
    """What a provider reads of the endpoint settings (`core.endpoint.EndpointSettings`, which imports
    this package: a protocol keeps the import one way)."""

    base_url: str | None
    api_key_env: str | None
    api_key_secret: str | None
    batch: bool
    vertex_project: str | None
    vertex_location: str
    bedrock_batch_input: str | None
    bedrock_batch_output: str | None
    bedrock_role_arn: str | None


# The provider every key made before providers existed implied (`core.identity`), and the one a run
# calls when it names none and gives a base URL.
IMPLIED = "openai"


@dataclass(frozen=True)
class Provider:
    """One API a run can call. `name` is `--provider NAME`; the rest is what each layer asks of it."""

    name: str
    # what the routing line and the README call it, e.g. "OpenAI's API"
    title: str
    # its endpoint when the run gives none: a URL, or None (then `default_base_url` derives one)
    base_url: str | None = None
    # environment variables naming its endpoint, the first set wins over `base_url`
    base_url_envs: tuple[str, ...] = ()
    # variables its key is read from when the run names none (the first is named in messages); () takes no key
    key_envs: tuple[str, ...] = ()
    # other credential sources, in words, for messages and the README (never a value)
    credentials: str = ""
    # endpoint API -> "calls module:Class" of its wire (`calls.providers.ModelAPI`)
    wires: Mapping[str, str] = field(default_factory=dict)
    # "calls module:Class" of its batch API (`calls.batch.BatchAPI`), or None
    batch: str | None = None
    # "calls module:function" (model, drop_params=...) -> RequestRule, or None: OpenAI's table (`request_rules`)
    request_rule: str | None = None
    # "calls module:function" (model, sampling) -> sampling as sent (what an answer may cost), or None
    token_budget: str | None = None
    # model names (regular expressions, matched whole) `route` sends here when the run names no provider
    claims: tuple[str, ...] = ()
    # hosts whose calls bill the bundled list prices (`core.pricing`): the host itself or a subdomain, or a
    # pattern with `*` (fnmatch: `bedrock-runtime.*.amazonaws.com`)
    priced_hosts: tuple[str, ...] = ()
    # the provider name its cache keys are made under: an OpenAI-compatible API sends what OpenAI's does
    keyed_as: str | None = None
    # a model name as JudgeBench sends it to this API -> the name the API knows it by
    model_names: Mapping[str, str] = field(default_factory=dict)

    @property
    def cache_name(self) -> str:
        return self.keyed_as or self.name

    @property
    def takes_key(self) -> bool:
        return bool(self.key_envs)

    def claims_model(self, model: str) -> bool:
        return any(re.fullmatch(pattern, model, flags=re.IGNORECASE) for pattern in self.claims)

    def wire_model(self, model: str) -> str:
        """The model name sent on the wire."""
        return self.model_names.get(model, model)

    def priced_name(self, model: str) -> str:
        """The name the price table lists `model` under (Bedrock: the model id inside a profile or ARN)."""
        return model

    def env_base_url(self) -> str | None:
        return next((os.environ[name] for name in self.base_url_envs if os.environ.get(name)), None)

    def default_base_url(self, settings: Settings) -> str | None:
        """Its endpoint when neither the run nor the environment names one."""
        return self.base_url

    def endpoint(self, settings: Settings) -> str | None:
        """--base-url, else the environment's, else its default."""
        return settings.base_url or self.env_base_url() or self.default_base_url(settings)

    def settings_problem(self, settings: Settings) -> str | None:
        """What in the endpoint settings this provider cannot take (a validation message), or None."""
        if settings.batch and self.batch is None:
            return f"--batch: --provider {self.name} has no batch API this tool drives; drop --batch"
        return None

    def key_source(self, env_name: str | None, block_name: str | None) -> str:
        """Where the key comes from, for messages: never the key."""
        if block_name:
            return f"Prefect Secret block '{block_name}'"
        if env_name or self.key_envs:
            return f"${env_name or self.key_envs[0]}"
        return self.credentials

    def check_credentials(self, settings: Settings, base_url: str) -> None:
        """Before the first call: its credentials are there (their value is not read here). A key is
        needed unless the endpoint is plain http:// (a local server, which takes any key)."""
        if not self.takes_key or settings.api_key_secret:
            return
        name = settings.api_key_env or self.key_envs[0]
        if settings.api_key_env:
            if not os.environ.get(name):
                raise UserError(f"--api-key-env: the variable ${name} is not set")
            return
        if base_url.startswith("https://") and not any(os.environ.get(env) for env in self.key_envs):
            raise UserError(
                f"{self.title} (--provider {self.name}): set {name} (or name the key with --api-key-env / "
                "--api-key-secret)"
            )

    def wire_options(self, settings: Settings | None, state: Any) -> dict[str, object]:
        """Keyword arguments its wire takes beyond the uniform five (a token the run's calls share)."""
        return {}

"""Azure OpenAI: OpenAI's models in an Azure resource, each reached by its deployment's name.

The endpoint is the resource's (`https://NAME.openai.azure.com`: --base-url, else AZURE_OPENAI_ENDPOINT),
the API version OPENAI_API_VERSION (else a GA version), the key AZURE_OPENAI_API_KEY; without a key,
Microsoft Entra ID through azure-identity (the `azure` extra: DefaultAzureCredential, whose token the
run's calls share and refresh before it expires). `--model` is the deployment's name; `--priced-model`
says which model a deployment serves, for prices and request rules. `--batch`: Azure's Batch API
(`calls/azure_batch.py`), on a batch deployment.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from judgebench_flows.core.errors import UserError
from judgebench_flows.core.providers.base import CHAT, Provider, Settings

API_VERSION_ENV = "OPENAI_API_VERSION"
ENTRA_SCOPE = "https://cognitiveservices.azure.com/.default"
DEFAULT_API_VERSION = "2024-10-21"  # Azure OpenAI's GA data-plane version
ENTRA = "Microsoft Entra ID (azure-identity's DefaultAzureCredential: environment, managed identity, az login)"


def api_version() -> str:
    return os.environ.get(API_VERSION_ENV) or DEFAULT_API_VERSION


class AzureProvider(Provider):
    def has_key(self, settings: Settings) -> bool:
        return bool(settings.api_key_env or settings.api_key_secret or any(os.environ.get(e) for e in self.key_envs))

    def default_base_url(self, settings: Settings) -> str | None:
        raise UserError(f"{self.title} (--provider azure): no endpoint; set AZURE_OPENAI_ENDPOINT or pass --base-url")

    def check_credentials(self, settings: Settings, base_url: str) -> None:
        """A key, else a Microsoft Entra ID token now (azure-identity's chain, tried before any call)."""
        if self.has_key(settings):
            super().check_credentials(settings, base_url)
            return
        if importlib.util.find_spec("azure") is None or importlib.util.find_spec("azure.identity") is None:
            raise UserError(
                f"{self.title} (--provider azure): set {self.key_envs[0]}, or install judgebench-flows[azure] "
                "to sign in with Microsoft Entra ID"
            )
        from azure.identity import DefaultAzureCredential

        from judgebench_flows.core.secrets import redact

        try:
            DefaultAzureCredential().get_token(ENTRA_SCOPE)
        except Exception as exc:  # noqa: BLE001 - whatever the credential chain says, said in one line
            reason = redact(" ".join(str(exc).split()))[:200]
            raise UserError(
                f"{self.title} (--provider azure): set {self.key_envs[0]}, or sign in for Microsoft Entra ID "
                f"(no token: {reason})"
            ) from None

    def key_source(self, env_name: str | None, block_name: str | None) -> str:
        if env_name or block_name or any(os.environ.get(e) for e in self.key_envs):
            return super().key_source(env_name, block_name)
        return ENTRA

    def wire_options(self, settings: Settings | None, state: Any) -> dict[str, object]:
        options: dict[str, object] = {"api_version": api_version()}
        if settings is not None and not self.has_key(settings) and state is not None:
            options["token"] = state.entra_token()
        return options


AZURE = AzureProvider(
    name="azure",
    title="Azure OpenAI",
    base_url_envs=("AZURE_OPENAI_ENDPOINT",),
    key_envs=("AZURE_OPENAI_API_KEY",),
    credentials=ENTRA,
    wires={CHAT: "azure_api:AzureTransport"},
    batch="azure_batch:AzureBatches",  # the deployment must be a batch one (GlobalBatch, DataZoneBatch)
    priced_hosts=("openai.azure.com",),
)

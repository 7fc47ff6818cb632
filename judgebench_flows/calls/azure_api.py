"""`--provider azure`: Azure OpenAI through the openai SDK's `AsyncAzureOpenAI`.

The SDK sends each chat request to the deployment the body's `model` names
(`{endpoint}/openai/deployments/{model}/chat/completions?api-version=...`) with the key in `api-key`,
or, without a key, a Microsoft Entra ID token as `Authorization: Bearer` from `EntraToken` (one per
run, shared by its calls: `state.CallState.entra_token`), taken again before it expires and once more on
a 401. The request body is OpenAI's, so request rules, retries and the answer are the OpenAI wire's.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import openai
from typing_extensions import TypedDict

from judgebench_flows.calls.errors import CallError
from judgebench_flows.calls.tokens import RefreshedToken
from judgebench_flows.calls.transport import Transport, tls_context
from judgebench_flows.core.completion import Sampling
from judgebench_flows.core.providers.azure import ENTRA_SCOPE as SCOPE
from judgebench_flows.core.secrets import redact


class EntraToken(RefreshedToken):
    """A Microsoft Entra ID access token for Azure OpenAI from a `TokenCredential` (azure-identity's
    DefaultAzureCredential unless one is given), shared by the run's calls and taken again before it
    expires (`tokens.RefreshedToken`)."""

    def __init__(self, credential: Any = None):
        super().__init__()
        self._credential = credential

    def _take(self) -> tuple[str, float]:
        try:
            credential = self._credential or _default_credential()
            self._credential = credential
            access = credential.get_token(SCOPE)
        except Exception as exc:  # noqa: BLE001 - azure-identity's errors, read as the rest of calls/ reads errors
            raise token_error(exc) from None
        return access.token, float(access.expires_on) - time.time()  # its expiry is a wall-clock time


def _default_credential() -> Any:
    from azure.identity import DefaultAzureCredential

    return DefaultAzureCredential()


def token_error(exc: Exception) -> CallError:
    """A failed token request: a refused credential stops the run (401); anything else is retried."""
    reason = redact(" ".join(str(exc).split())[:300])
    if type(exc).__name__ in ("ClientAuthenticationError", "CredentialUnavailableError"):
        return CallError("status", 401, f"Microsoft Entra ID token refused: {reason}")
    return CallError("connection", message=f"Microsoft Entra ID token request failed: {reason}")


class ClientAuth(TypedDict, total=False):
    """How the OpenAI client authenticates to Azure: a key, or a provider of Entra tokens (one of them)."""

    api_key: str
    azure_ad_token_provider: Callable[[], Awaitable[str]]


class AzureTransport(Transport):
    """The OpenAI wire on `AsyncAzureOpenAI`: the model is the deployment's name."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str,
        request_timeout: float,
        concurrency: int,
        api_version: str,
        token: EntraToken | None = None,
    ):
        self.api_version, self.token = api_version, token
        super().__init__(base_url, model, api_key, request_timeout, concurrency)

    def new_client(self, api_key: str, request_timeout: float) -> openai.AsyncOpenAI:
        auth: ClientAuth = (
            {"api_key": api_key} if self.token is None else {"azure_ad_token_provider": self.token.bearer}
        )
        return openai.AsyncAzureOpenAI(
            azure_endpoint=self.base_url,
            api_version=self.api_version,
            max_retries=0,
            timeout=request_timeout,
            http_client=openai.DefaultAsyncHttpxClient(verify=tls_context()),
            **auth,
        )

    async def post(self, messages: list[dict[str, str]], sampling: Sampling) -> Any:
        for attempt in range(2 if self.token else 1):
            sent = self.token.current if self.token else None
            try:
                return await super().post(messages, sampling)
            except CallError as exc:
                if exc.status != 401 or self.token is None or attempt:
                    raise
                self.token.expire(sent)  # revoked or expired early: one new token, one more try
        raise AssertionError("unreachable")

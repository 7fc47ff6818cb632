"""Where a run's API key comes from: the NAME of an environment variable or of a Prefect Secret block.

Run settings (the flow's parameters, the matrix file, results, the database) only ever hold such a name;
the value is read in the process that makes the calls, when its endpoint client is built, and registered
for log redaction. A nightly matrix can so give each model its own endpoint and its own key (an OpenAI
judge beside a locally served one) without a key ever being written down.
"""

from __future__ import annotations

import os
import re
from typing import Any

from judgebench_flows.core import providers
from judgebench_flows.core.errors import UserError

DEFAULT_KEY_ENV = providers.get(None).key_envs[0]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_BLOCK_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
# Prefixes of real keys (OpenAI, Anthropic, Google, Groq, Hugging Face, GitHub, AWS...).
_KEY_PREFIXES = (
    "sk-",
    "sk_",
    "sess-",
    "pk-",
    "rk-",
    "gsk_",
    "hf_",
    "ghp_",
    "gho_",
    "github_pat_",
    "xai-",
    "AIza",
    "AKIA",
    "Bearer ",
)


def looks_like_a_key(value: str) -> bool:
    """A literal secret where a name belongs: a known key prefix, or a long random-looking token
    (environment variable names are words: they have underscores or are short)."""
    text = value.strip()
    if text.startswith(_KEY_PREFIXES):
        return True
    compact = text.replace("-", "").replace("_", "")
    has_digits, has_lower, has_upper = (
        any(c.isdigit() for c in compact),
        any(c.islower() for c in compact),
        any(c.isupper() for c in compact),
    )
    return len(compact) >= 24 and has_digits and (has_lower + has_upper + has_digits) >= 2 and "_" not in text


def check_env_name(value: str | None, option: str = "api_key_env") -> str | None:
    if value is None:
        return None
    if looks_like_a_key(value):
        raise ValueError(
            f"{option} names the environment variable that holds the key; this looks like a key itself (never write the key here)"
        )
    if not _ENV_NAME.match(value):
        raise ValueError(f"{option} must be an environment variable name such as OPENAI_API_KEY (letters, digits, _)")
    return value


def check_block_name(value: str | None, option: str = "api_key_secret") -> str | None:
    if value is None:
        return None
    if looks_like_a_key(value):
        raise ValueError(
            f"{option} names a Prefect Secret block; this looks like a key itself (never write the key here)"
        )
    if not _BLOCK_NAME.match(value):
        raise ValueError(f"{option} must be a Prefect Secret block name (lowercase letters, digits, dashes)")
    return value


def describe(env_name: str | None, block_name: str | None, provider: str | None = None) -> str:
    """Where the key comes from, for messages: never the key."""
    return providers.get(provider).key_source(env_name, block_name)


def read_api_key(
    env_name: str | None, block_name: str | None, required: bool = False, provider: str | None = None
) -> str:
    """The key itself, in the calling process only. An unset default variable (the provider's
    `key_envs`) gives "EMPTY" (local endpoints take any key; a provider's own API was checked before the
    first call: `Provider.check_credentials`); a variable or block the run names explicitly must exist."""
    from judgebench_flows.core.secrets import register_secret

    source = providers.get(provider)
    if not source.takes_key:  # no key: its wire authenticates otherwise (Vertex: a token per call)
        return "EMPTY"
    if block_name:
        key = _read_secret_block(block_name)
    else:
        name = env_name or source.key_envs[0]
        key = next((os.environ[env] for env in ([name] if env_name else source.key_envs) if os.environ.get(env)), "")
        if not key and (env_name or required):
            raise UserError(
                f"the API key variable ${name} is not set in this process's environment (the worker's, for a deployment)"
            )
    register_secret(key)
    return key or "EMPTY"


def _read_secret_block(name: str) -> str:
    """A Prefect Secret block's value, read through the API with the synchronous client (this may run
    inside an event loop, where `Secret.load` would hand back a coroutine)."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    try:
        with get_client(sync_client=True) as client:
            document = client.read_block_document_by_name(name, block_type_slug="secret", include_secrets=True)
    except ObjectNotFound:
        raise UserError(f"no Prefect Secret block named '{name}' (create it: Blocks > Secret in the UI)") from None
    value: Any = document.data.get("value")  # a SecretStr, a string, or anything a user stored
    if hasattr(value, "get_secret_value"):
        value = value.get_secret_value()
    if not isinstance(value, str) or not value:
        raise UserError(f"the Prefect Secret block '{name}' holds no string value")
    return value


__all__ = [
    "DEFAULT_KEY_ENV",
    "check_block_name",
    "check_env_name",
    "describe",
    "looks_like_a_key",
    "read_api_key",
]

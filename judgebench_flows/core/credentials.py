"""Credentials in URLs (a database password, a git token) kept out of every parameter and store.

A run's configuration is its Prefect flow parameter, which Prefect stores in its database, and it is
copied into the results database and results.json. So a URL with credentials never stays in it:
`stash` gives back the credential-free URL, which is what the configuration holds, and keeps the full URL
(a `SecretStr`, its secret registered for log redaction) in the run's `Credentials`. Whatever opens the
database or clones the repository asks `resolve` for the full URL again, at the moment it connects.

The run's `Credentials` is reached through one context variable, set where the run's settings are read
(`command_run`, or the first `stash` of a context): the flow, its tasks and the threads they start with
`asyncio.to_thread` see it, since each starts with a copy of the context that read the settings, and two
runs read in different contexts hold different credentials.

Another process (a deployment's worker, a Dask worker) gets the full URL from its own environment:
`JUDGEBENCH_DB_URL` / `JUDGEBENCH_REPO_URL` holding the URL with credentials are used for a configured
URL that is the same without them. PostgreSQL's own `PGPASSWORD` or `~/.pgpass`, and git's credential
helpers, work too, since the credential-free URL is what they are asked about.
"""

from __future__ import annotations

import contextvars
import os
from urllib.parse import unquote, urlsplit, urlunsplit

from pydantic import SecretStr

from judgebench_flows.core.secrets import register_secret

ENVIRONMENT = ("JUDGEBENCH_DB_URL", "JUDGEBENCH_REPO_URL")


def _split(url: str) -> tuple[str, list[str]]:
    """(the URL without its secret part, the secrets it held). A password always goes; a user name
    goes too for http(s) (tokens are often passed as the user name), but stays for a database (it is
    needed to connect and is not secret) and for ssh (`git@host`)."""
    parts = urlsplit(url)
    if not parts.scheme or "@" not in parts.netloc:
        return url, []
    userinfo, host = parts.netloc.rsplit("@", 1)
    user, has_password, password = userinfo.partition(":")
    if parts.scheme.lower() in ("http", "https"):
        secrets = [s for s in (user, password) if s]
        return urlunsplit(parts._replace(netloc=host)), [*secrets, *(unquote(s) for s in secrets)]
    if not has_password:
        return url, []
    return urlunsplit(parts._replace(netloc=f"{user}@{host}" if user else host)), [password, unquote(password)]


def public_url(url: str) -> str:
    """The URL with any user:password@ removed, safe for logs, results and the database."""
    parts = urlsplit(url)
    if parts.scheme and "@" in parts.netloc:
        return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
    return url


def without_credentials(url: str) -> str:
    return _split(url)[0]


def _hide(url: str, secrets: list[str]) -> None:
    """Never show the URL with credentials, nor any of its secrets (`secrets.register_secret`)."""
    for secret in (url, *secrets):
        register_secret(secret)


class Credentials:
    """The full URLs of a run's settings, by their credential-free form, for `resolve`."""

    def __init__(self) -> None:
        self._full: dict[str, SecretStr] = {}

    def stash(self, url: str) -> str:
        """The credential-free form of `url`; the full URL is kept here and its secrets are registered
        for redaction."""
        public, secrets = _split(url)
        if secrets:
            self._full[public] = SecretStr(url)
            _hide(url, secrets)
        return public

    def full(self, url: str) -> str | None:
        held = self._full.get(url)
        return None if held is None else held.get_secret_value()


_run_credentials: contextvars.ContextVar[Credentials | None] = contextvars.ContextVar(
    "judgebench_credentials", default=None
)


def run_credentials() -> Credentials:
    """The `Credentials` of the run in this context, made (and set for this context) on first use."""
    credentials = _run_credentials.get()
    if credentials is None:
        credentials = Credentials()
        _run_credentials.set(credentials)
    return credentials


def stash(url: str) -> str:
    """The credential-free form of `url`; the full URL stays with the run's `Credentials` for `resolve`."""
    return run_credentials().stash(url)


def resolve(url: str) -> str:
    """The URL to connect with: the full form the run was given, or the environment's, else `url` itself
    (credentials then come from the driver's or git's own configuration)."""
    credentials = _run_credentials.get()
    full = credentials.full(url) if credentials is not None else None
    if full is not None:
        return full
    for name in ENVIRONMENT:
        full = os.environ.get(name)
        if full and full != url and _split(full)[0] == url:
            _hide(full, _split(full)[1])
            return full
    return url


__all__ = ["ENVIRONMENT", "Credentials", "resolve", "run_credentials", "stash", "without_credentials"]

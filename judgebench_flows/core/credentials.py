"""Credentials in URLs (a database password, a git token) kept out of every parameter and store.

A run's configuration is its Prefect flow parameter, which Prefect stores in its database, and it is
copied into the results database and results.json. So a URL with credentials never stays in it:
`stash` keeps the full URL in this process only (and registers its secret for redaction) and gives back
the credential-free URL, which is what the configuration holds. Whatever opens the database or clones
the repository asks `resolve` for the full URL again, at the moment it connects.

Another process (a deployment's worker, a Dask worker) gets the full URL from its own environment:
`JUDGEBENCH_DB_URL` / `JUDGEBENCH_REPO_URL` holding the URL with credentials are used for a configured
URL that is the same without them. PostgreSQL's own `PGPASSWORD` or `~/.pgpass`, and git's credential
helpers, work too, since the credential-free URL is what they are asked about.
"""

from __future__ import annotations

import os
from urllib.parse import unquote, urlsplit, urlunsplit

from judgebench_flows.core.secrets import register_secret

ENVIRONMENT = ("JUDGEBENCH_DB_URL", "JUDGEBENCH_REPO_URL")
_full_urls: dict[str, str] = {}  # credential-free URL -> the URL with credentials, this process only


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


def stash(url: str) -> str:
    """The credential-free form of `url`; the full URL stays in this process for `resolve`."""
    public, secrets = _split(url)
    if secrets:
        _full_urls[public] = url
        register_secret(url)
        for secret in secrets:
            register_secret(secret)
    return public


def resolve(url: str) -> str:
    """The URL to connect with: the full form stashed in this process or given by the environment, else
    `url` itself (credentials then come from the driver's or git's own configuration)."""
    if url in _full_urls:
        return _full_urls[url]
    for name in ENVIRONMENT:
        full = os.environ.get(name)
        if full and full != url and _split(full)[0] == url:
            stash(full)
            return full
    return url


__all__ = ["ENVIRONMENT", "resolve", "stash", "without_credentials"]

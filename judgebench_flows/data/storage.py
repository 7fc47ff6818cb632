"""Where a run's files live: a local path as always, or an object-store URL (`s3://`, `gs://`, `az://`).

Every place a run writes or reads its files goes through these few functions, so a path and a URL are
one thing to the rest of the code. URLs go through fsspec (s3fs, gcsfs, adlfs: the `s3`, `gcs` and
`azure` extras); credentials come only from each cloud's own chain (AWS's environment, profiles and
roles, with `AWS_ENDPOINT_URL` for S3-compatible stores; Google's Application Default Credentials;
Azure's DefaultAzureCredential with `AZURE_STORAGE_ACCOUNT_NAME`), never from us, so none is ever
stored, logged or passed as a parameter. A URL that carries credentials itself is refused.

An object is written with one PUT (a multipart upload completes at once on close), so a reader sees the
old object or the new one, never half of one, and a retried write replaces the same key: one copy.
Object stores have no links: `latest` beside a layout's run folders is then a small object holding the
newest run folder's name (`point_latest`, `resolve_latest`).
"""

from __future__ import annotations

import logging
import os
import posixpath
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from judgebench_flows.core.errors import UserError

# scheme -> (fsspec protocol, the package it needs, the extra that installs it)
SCHEMES: dict[str, tuple[str, str, str]] = {
    "s3": ("s3", "s3fs", "s3"),
    "gs": ("gcs", "gcsfs", "gcs"),
    "gcs": ("gcs", "gcsfs", "gcs"),
    "az": ("az", "adlfs", "azure"),
    "abfs": ("abfs", "adlfs", "azure"),
}
CONNECT_TIMEOUT_S = 10.0  # a store that does not answer is bad input at preflight, not a hang
READ_TIMEOUT_S = 60.0


def is_url(path: str | Path) -> bool:
    """A `scheme://` location (never a Windows drive letter, never a local path)."""
    return isinstance(path, str) and "://" in path and len(path.split("://", 1)[0]) > 1


def scheme_of(url: str) -> str:
    return url.split("://", 1)[0].lower()


def check_url(option: str, url: str) -> None:
    """The URL names a store we can use: a known scheme, a bucket, no credentials in it, its package
    installed. One line naming the option and the URL (without anything secret)."""
    scheme = scheme_of(url)
    if scheme not in SCHEMES:
        known = ", ".join(f"{s}://" for s in ("s3", "gs", "az"))
        raise UserError(f"{option}: unknown URL scheme '{scheme}://' in '{shown(url)}' (use {known} or a path)")
    parts = urlsplit(url)
    if parts.username or parts.password or "@" in parts.netloc:
        raise UserError(
            f"{option}: '{shown(url)}' carries credentials; they come from the cloud's own chain "
            "(environment, profile, role), never from the URL"
        )
    if not parts.netloc:
        raise UserError(f"{option}: '{shown(url)}' names no bucket or container")
    package, extra = SCHEMES[scheme][1], SCHEMES[scheme][2]
    try:
        __import__(package)
    except ImportError:
        raise UserError(f"{option}: '{shown(url)}' needs {package}: pip install 'judgebench-flows[{extra}]'") from None


def shown(url: str) -> str:
    """A URL as it may be printed: any user information (a key, a SAS token) and the query dropped."""
    if not is_url(url):
        return url
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return f"{parts.scheme}://{host}{parts.path}"


def _options(scheme: str) -> dict[str, object]:
    """Bounded waits for each store; the endpoint of an S3-compatible store from AWS's own variables."""
    if scheme == "s3":
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        return {
            "client_kwargs": {"endpoint_url": endpoint} if endpoint else {},
            "config_kwargs": {
                "connect_timeout": CONNECT_TIMEOUT_S,
                "read_timeout": READ_TIMEOUT_S,
                "retries": {"max_attempts": 3, "mode": "standard"},
            },
            "use_listings_cache": False,
        }
    if scheme in ("gs", "gcs"):
        return {"timeout": READ_TIMEOUT_S}
    if scheme in ("az", "abfs"):
        return {"anon": False}  # DefaultAzureCredential, with AZURE_STORAGE_ACCOUNT_NAME naming the account
    return {}


# What each cloud's chain may read from the environment that is secret: never in a log record or message.
SECRET_VARIABLES = (
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_CLIENT_SECRET",
)


def filesystem(url: str) -> tuple[Any, str]:
    """The fsspec filesystem for `url` and the path within it (bucket/key)."""
    import fsspec

    from judgebench_flows.core.secrets import register_secret

    for variable in SECRET_VARIABLES:
        register_secret(os.environ.get(variable))
    scheme = scheme_of(url)
    protocol = SCHEMES[scheme][0]
    if protocol == "gcs" and logging.getLogger("gcsfs").level == logging.NOTSET:
        # gcsfs logs each request it gives up on with its traceback, and each bucket whose type it cannot
        # read, before raising: what we raise says it in one line naming the URL (a user's level stays)
        logging.getLogger("gcsfs").setLevel(logging.CRITICAL)
    fs = fsspec.filesystem(protocol, **_options(scheme))
    return fs, fs._strip_protocol(url)


def join(base: str | Path, *names: str) -> str:
    """`base/name/...`: a URL keeps its `scheme://` (pathlib would fold it into `scheme:/`)."""
    if is_url(base):
        return posixpath.join(str(base).rstrip("/"), *names)
    return str(Path(base, *names))


def parent(path: str) -> str:
    if is_url(path):
        return posixpath.dirname(path.rstrip("/"))
    return str(Path(path).parent)


def name(path: str) -> str:
    return posixpath.basename(path.rstrip("/")) if is_url(path) else Path(path).name


def write_bytes(path: str | Path, data: bytes) -> str:
    """Write a whole file: a local one through a temporary file and a rename, so readers never see half
    of it after a crash; an object with one PUT. Returns where it was written."""
    if is_url(path):
        fs, key = filesystem(str(path))
        fs.pipe_file(key, data)
        return str(path)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(tmp, target)
    return str(target)


def write_text(path: str | Path, text: str) -> str:
    return write_bytes(path, text.encode("utf-8"))


def read_bytes(path: str | Path) -> bytes:
    """A whole file; an object that is not there is FileNotFoundError, as a missing file is."""
    if is_url(path):
        fs, key = filesystem(str(path))
        return fs.cat_file(key)
    return Path(path).read_bytes()


def read_text(path: str | Path) -> str:
    return read_bytes(path).decode("utf-8")


def exists(path: str | Path) -> bool:
    if is_url(path):
        fs, key = filesystem(str(path))
        return bool(fs.exists(key))
    return Path(path).exists()


@contextmanager
def open_text(path: str | Path) -> Iterator[IO[str]]:
    """A file to read line by line (a large outputs JSONL is streamed, not read whole)."""
    if is_url(path):
        fs, key = filesystem(str(path))
        with fs.open(key, "rt", encoding="utf-8") as handle:
            yield handle
    else:
        with Path(path).open(encoding="utf-8") as handle:
            yield handle


@contextmanager
def open_write(path: str | Path) -> Iterator[IO[bytes]]:
    """A file to write in pieces that appears whole or not at all: a temporary file renamed locally, a
    multipart upload completed on close for an object (an exception aborts it)."""
    if is_url(path):
        fs, key = filesystem(str(path))
        with fs.open(key, "wb") as handle:
            yield handle
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f".{target.name}.tmp")
    try:
        with staging.open("wb") as handle:
            yield handle
        os.replace(staging, target)
    except BaseException:  # a full disk: no half-written copy left to keep it full
        staging.unlink(missing_ok=True)
        raise


def remove(path: str | Path) -> None:
    """Remove one file or object; gone already is fine."""
    try:
        if is_url(path):
            fs, key = filesystem(str(path))
            fs.rm_file(key)
        else:
            Path(path).unlink(missing_ok=True)
    except FileNotFoundError:
        pass


def probe_writable(option: str, url: str) -> None:
    """Write and remove a small object under `url`: the bucket exists, the chain's credentials are
    accepted and may write there. One line naming the URL (never a credential) otherwise."""
    check_url(option, url)
    probe = join(url, f".judgebench-probe-{uuid.uuid4().hex}")
    try:
        write_bytes(probe, b"")
        remove(probe)
    except Exception as exc:  # every SDK has its own errors; what the user can fix is one of these
        raise UserError(f"{option}: cannot write to '{shown(url)}': {_reason(exc)}") from None


def check_readable(option: str, path: str) -> None:
    """A file or object to read is there and the chain's credentials may read it: one line otherwise."""
    if not is_url(path):
        if not Path(path).is_file():
            raise UserError(f"{option}: file not found: {path}")
        return
    check_url(option, path)
    try:
        found = exists(path)
    except Exception as exc:
        raise UserError(f"{option}: cannot read '{shown(path)}': {_reason(exc)}") from None
    if not found:
        raise UserError(f"{option}: no such object: '{shown(path)}'")


def browser_url(url: str) -> str:
    """Where a person opens an object: the cloud's console (an S3-compatible store: its own URL)."""
    parts = urlsplit(url)
    bucket, key = parts.netloc, parts.path.lstrip("/")
    scheme = scheme_of(url)
    if scheme == "s3":
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if endpoint:
            return f"{endpoint.rstrip('/')}/{bucket}/{key}"
        return f"https://s3.console.aws.amazon.com/s3/object/{bucket}?prefix={key}"
    if scheme in ("gs", "gcs"):
        return f"https://console.cloud.google.com/storage/browser/_details/{bucket}/{key}"
    account = os.environ.get("AZURE_STORAGE_ACCOUNT_NAME", "ACCOUNT")
    return f"https://{account}.blob.core.windows.net/{bucket}/{key}"


def markdown_link(path: str) -> str:
    """A file for a Prefect artifact: an object as a link to it, a path as code."""
    return f"[{shown(path)}]({browser_url(path)})" if is_url(path) else f"`{path}`"


def _reason(exc: BaseException) -> str:
    """Why a store refused, in words that name no credential (SDK messages may quote a key id)."""
    kind = type(exc).__name__
    text = str(exc)
    if isinstance(exc, FileNotFoundError) or "NoSuchBucket" in text or "ContainerNotFound" in text:
        return "no such bucket or container"
    if "NoCredentials" in kind or "Unable to locate credentials" in text or "DefaultCredentialsError" in kind:
        return "no credentials found in the cloud's chain (environment, profile, role)"
    refused = (
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "Forbidden",
        "403",
        "AuthorizationFailure",  # Azure: a wrong account key or SAS
        "AuthenticationFailed",
        "failed to authenticate",
        "invalid_grant",  # Google: the token endpoint refused the service account's key
        "RefreshError",
    )
    status = getattr(exc, "code", None) or getattr(exc, "status_code", None)  # gcsfs's HttpError, Azure's
    if isinstance(exc, PermissionError) or status in (401, 403) or any(word in text for word in refused):
        return "credentials refused (access denied or unknown key)"
    if "Could not connect" in text or "Connect timeout" in text or "EndpointConnectionError" in kind:
        return "the store does not answer"
    return kind


__all__ = [
    "SCHEMES",
    "browser_url",
    "check_readable",
    "check_url",
    "exists",
    "filesystem",
    "is_url",
    "markdown_link",
    "join",
    "name",
    "open_text",
    "open_write",
    "parent",
    "probe_writable",
    "read_bytes",
    "read_text",
    "remove",
    "shown",
    "write_bytes",
    "write_text",
]

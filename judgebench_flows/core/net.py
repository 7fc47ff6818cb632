"""Whether a TCP connection to a service opens: the quick check before anything waits on it for long."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit


def host_port(url: str, default_port: int | None = None) -> tuple[str, int]:
    """The host and port a URL points at (its port, else `default_port`, else the scheme's)."""
    parts = urlsplit(url)
    return parts.hostname or "", parts.port or default_port or (443 if parts.scheme == "https" else 80)


def connect_error(url: str, default_port: int | None = None, timeout: float = 5.0) -> str | None:
    """None when a TCP connection to the URL's host and port opens within `timeout`, else why not."""
    try:
        with socket.create_connection(host_port(url, default_port), timeout=timeout):
            return None
    except OSError as exc:
        return exc.strerror or str(exc)

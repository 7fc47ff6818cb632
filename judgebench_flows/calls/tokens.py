"""An access token shared by every call of a run, taken again before it expires: Microsoft Entra ID's
for Azure OpenAI (`azure_api.EntraToken`) and Google's OAuth token for Vertex AI
(`google_api.VertexToken`).

The two differ only in where a token comes from (`_take`): how long one is used, who refreshes it and
what a 401 does are one policy, on one clock (`time.monotonic`, so a wall clock set back or forward
moves no deadline). A token is handed out while more than `REFRESH_BEFORE_SECONDS` (or a quarter of
its life, for short-lived ones) is left; then one caller takes a new one, in a thread since the
credential libraries block, while the others wait for that same round trip. A call answered 401 asks
for a token other than the one refused (`bearer(stale)` or `expire(stale)`): taken again unless another
call already did. The libraries' own margins would refresh minutes early, a whole token's life in the
tests (tokens living seconds); the deadline here is the token's own.
"""

from __future__ import annotations

import asyncio
import threading
import time

from judgebench_flows.core.secrets import register_secret

# azure-identity's own margin; a token living less is taken again with a quarter of its life left.
REFRESH_BEFORE_SECONDS = 300.0


class RefreshedToken:
    """One run's token from one credential: `bearer()` per request, `expire()` on a 401. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._token: str | None = None
        self._refresh_at = 0.0  # time.monotonic() after which the token is taken again
        self.refreshes = 0

    def _take(self) -> tuple[str, float]:
        """A new token from the credential and the seconds it lives (blocking; a failure is raised as the
        provider's `CallError`)."""
        raise NotImplementedError

    @property
    def current(self) -> str | None:
        """The token last handed out (None before the first): what a call that failed with 401 sent."""
        return self._token

    def _fresh(self) -> str | None:
        return self._token if self._token is not None and time.monotonic() < self._refresh_at else None

    async def bearer(self, stale: str | None = None) -> str:
        """The current token, or a new one when it is near its end or is `stale` (refused with a 401)."""
        token = self._fresh()
        if token is not None and token != stale:
            return token
        return await asyncio.to_thread(self.refresh, stale)

    def expire(self, stale: str | None) -> None:
        """The endpoint refused `stale` (401): the next `bearer()` takes a new one, unless another call did."""
        with self._lock:
            if self._token == stale:
                self._refresh_at = 0.0

    def refresh(self, stale: str | None = None) -> str:
        """A token that is fresh and not `stale` (blocking: the token endpoint's round trip)."""
        with self._lock:
            token = self._fresh()
            if token is not None and token != stale:
                return token
            token, lifetime = self._take()
            register_secret(token)  # never logged, stored or put in an error from here on
            lifetime = max(0.0, lifetime)
            self._token = token
            self._refresh_at = time.monotonic() + lifetime - min(REFRESH_BEFORE_SECONDS, lifetime / 4)
            self.refreshes += 1
            return token


__all__ = ["REFRESH_BEFORE_SECONDS", "RefreshedToken"]

"""One retry budget per call: at most `--max-retries + 1` requests for one request, however often it is asked.

A call can be asked again after it failed: the shard task's retries and a re-run of the shard judge the
same pairs again. Each used to get a full budget of its own, so 3 shard attempts x 3 call attempts sent
one failing request 9 times. The ledger counts the failed attempts of each request (by its call-cache key) for
the run's caller (one per run and event loop, kept across the shard task's retries: `judging.shards.
runtime_for`), and remembers why its last attempt failed: a request with nothing left fails at once with that reason, sending nothing. Only failures count,
so identical requests in flight together (two pairs with the same prompt) each get their own attempts. A deterministic rejection
(a 4xx that is not a rate limit) spends the whole budget at once: sending it again cannot help.

A new run starts afresh: running the same command again is how a user says "try again" (after fixing the
server, say), and what that run pays for is bounded the same way.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class AttemptLedger:
    """Attempts spent and the last failure, per request key (thread-safe: Dask runs shards in threads)."""

    spent: dict[str, int] = field(default_factory=dict)
    # key -> (the failure without the server's words, as `retry.failure_kind` gives it; the whole reason)
    last_failure: dict[str, tuple[str, str]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def left(self, key: str, budget: int) -> int:
        with self._lock:
            return max(0, budget - self.spent.get(key, 0))

    def spend(self, key: str) -> None:
        with self._lock:
            self.spent[key] = self.spent.get(key, 0) + 1

    def exhaust(self, key: str, budget: int, kind: str, reason: str) -> None:
        """The request failed for good (`reason`, of `kind`): nothing is left of its budget."""
        with self._lock:
            self.spent[key] = max(budget, self.spent.get(key, 0))
            self.last_failure[key] = (kind, reason)

    def answered(self, key: str) -> None:
        """An answer: the request is the cache's from now on; forget what it cost."""
        with self._lock:
            self.spent.pop(key, None)
            self.last_failure.pop(key, None)

    def why(self, key: str) -> tuple[str, str]:
        """(kind, reason) of the request's last failure."""
        with self._lock:
            return self.last_failure.get(key, ("failed", "failed"))

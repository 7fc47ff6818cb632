"""One retry budget per call: at most `--max-retries + 1` requests for one request, however often it is asked.

A call can be asked again after it failed: the shard task's retries and a re-run of the shard judge the
same pairs again. Each used to get a full budget of its own, so 3 shard attempts x 3 call attempts sent
one failing request 9 times. The ledger counts what each request (by its call-cache key) has spent in this
process, across every caller to the same endpoint and model, and remembers why its last attempt failed:
a request with nothing left fails at once with that reason, sending nothing. A deterministic rejection
(a 4xx that is not a rate limit) spends the whole budget at once: sending it again cannot help.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class AttemptLedger:
    """Attempts spent and the last failure, per request key (thread-safe: Dask runs shards in threads)."""

    spent: dict[str, int] = field(default_factory=dict)
    last_failure: dict[str, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def left(self, key: str, budget: int) -> int:
        with self._lock:
            return max(0, budget - self.spent.get(key, 0))

    def spend(self, key: str) -> None:
        with self._lock:
            self.spent[key] = self.spent.get(key, 0) + 1

    def exhaust(self, key: str, budget: int, reason: str) -> None:
        """The request failed for good (`reason`): nothing is left of its budget."""
        with self._lock:
            self.spent[key] = max(budget, self.spent.get(key, 0))
            self.last_failure[key] = reason

    def answered(self, key: str) -> None:
        """An answer: the request is the cache's from now on; forget what it cost."""
        with self._lock:
            self.spent.pop(key, None)
            self.last_failure.pop(key, None)

    def why(self, key: str) -> str:
        with self._lock:
            return self.last_failure.get(key, "")


_ledgers: dict[tuple[str, str], AttemptLedger] = {}
_ledgers_lock = threading.Lock()


def ledger_for(base_url: str, model: str) -> AttemptLedger:
    """The process's ledger for an endpoint and model (created on first use)."""
    key = (base_url.rstrip("/"), model)
    with _ledgers_lock:
        return _ledgers.setdefault(key, AttemptLedger())

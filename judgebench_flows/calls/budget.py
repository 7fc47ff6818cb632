"""One retry budget per call: at most `--max-retries + 1` requests for one request, however often it is asked.

A call can be asked again after it failed: the shard task's retries and a re-run of the shard judge the
same pairs again. Each used to get a full budget of its own, so 3 shard attempts x 3 call attempts sent
one failing request 9 times. The ledger counts the failed attempts of each request (by its call-cache key) for
the run's caller (one per run and event loop, kept across the shard task's retries: `judging.shards.
runtime_for`), and remembers why its last attempt failed: a request with nothing left fails at once with
that reason, sending nothing. Only failures count, so identical requests in flight together (two pairs
with the same prompt) each get their own attempts. A deterministic rejection (a 4xx that is not a rate
limit) spends the whole budget at once: sending it again cannot help.

A request the endpoint rejected for what it is (a deterministic 4xx: context too long, invalid request) is
also remembered by the run's `state.CallState` for the same endpoint and model (`rejections_for`): a
nightly configuration run once more in the same night (flows/nightly.py) does not send it again either.

A new `judgebench run` starts afresh: running the same command again is how a user says "try again" (after
fixing the server, say), and what that run pays for is bounded the same way.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

# A request's last failure: (the failure without the server's words, as `retry.failure_kind` gives it;
# the whole reason; the requests actually sent for it).
Failure = tuple[str, str, int]


@dataclass
class AttemptLedger:
    """Attempts spent and the last failure, per request key (thread-safe: Dask runs shards in threads)."""

    spent: dict[str, int] = field(default_factory=dict)
    last_failure: dict[str, Failure] = field(default_factory=dict)
    # Requests rejected for what they are: shared by the run's ledgers for one endpoint and model.
    rejected: dict[str, Failure] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def left(self, key: str, budget: int) -> int:
        with self._lock:
            return 0 if key in self.rejected else max(0, budget - self.spent.get(key, 0))

    def spend(self, key: str) -> None:
        with self._lock:
            self.spent[key] = self.spent.get(key, 0) + 1

    def exhaust(self, keys: set[str], budget: int, failure: Failure, deterministic: bool = False) -> None:
        """The request failed for good (`failure`): nothing is left of its budget, under each of its
        `keys` (the key it was asked by, and the key of the request last sent, when a rule adjusted it)."""
        with self._lock:
            for key in keys:
                self.spent[key] = max(budget, self.spent.get(key, 0))
                self.last_failure[key] = failure
                if deterministic:
                    self.rejected[key] = failure

    def answered(self, key: str) -> None:
        """An answer: the request is the cache's from now on; forget what it cost."""
        with self._lock:
            self.spent.pop(key, None)
            self.last_failure.pop(key, None)

    def why(self, key: str) -> Failure:
        """(kind, reason, requests sent) of the request's last failure."""
        with self._lock:
            return self.last_failure.get(key) or self.rejected.get(key) or ("failed", "failed", 0)


def not_sent_again(failure: Failure) -> str:
    """A request's reason when it is asked again and not sent: its last reason, and how often it was sent."""
    kind, reason, made = failure
    sent = "sent once" if made == 1 else f"sent {made} times"
    return f"{reason} ({sent}: not sent again)"

"""What one shard's calls heard, counted apart while its task judges (tasks/judge.py): what the endpoint
said about the model that answered, and which runs paid the answers the call cache gave. The run's
callers count the same in their `CallStats`; a shard judged on a Dask worker carries its own share back
to the run with its records (`judging.shards.ShardRecords`), where the worker's callers cannot be read.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass
class ShardHeard:
    """(model answered as, system_fingerprint) -> answers; paying run id -> answers read from the call
    cache ("" where no run is recorded)."""

    served: Counter[tuple[str, str]] = field(default_factory=Counter)
    cache_sources: Counter[str] = field(default_factory=Counter)


heard_here: contextvars.ContextVar[ShardHeard | None] = contextvars.ContextVar("heard_here", default=None)


@contextlib.contextmanager
def hearing() -> Iterator[ShardHeard]:
    """What the calls made inside (in this context and the tasks it starts) hear, counted apart. A
    function, so a task pickled by value (a Dask shard task) refers to it rather than carrying the
    context variable."""
    heard = ShardHeard()
    token = heard_here.set(heard)
    try:
        yield heard
    finally:
        heard_here.reset(token)


__all__ = ["ShardHeard", "heard_here", "hearing"]

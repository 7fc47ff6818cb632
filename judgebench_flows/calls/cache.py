"""The persistent call cache: answers looked up and written by a hash of the exact request (`request_key`,
made in `core.identity` with every other stored key).

A re-run or a resumed run pays only for what was never answered. Lookups come from one query per shard
(`prefetch`) or, for a request nobody prefetched, one query each; writes are grouped (`save`).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable
from typing import Any

from sqlalchemy.engine import Engine

from judgebench_flows.core.completion import Completion
from judgebench_flows.core.endpoint import CacheMode
from judgebench_flows.core.identity import request_key
from judgebench_flows.data import db


def stored_score(text: str) -> float | None:
    """A score as the cache table's `response` holds it (the float's repr), or None when it is no finite
    number (the reward judge then reports the answer invalid, its text kept)."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


class CallCache:
    """One caller's view of the cache table: `use` reads and writes, `refresh` only writes, `off` neither.
    Without an engine it holds nothing.

    A row's `response` is the answer's text, or for a score API (`scores`) the score's repr: the table
    keeps one text column for both, so answers cached by any earlier version are read as they were."""

    def __init__(
        self, engine: Engine | None, mode: CacheMode, model: str, paid_by: str | None = None, scores: bool = False
    ):
        self.engine = engine
        self.mode = mode
        self.model = model
        self.paid_by = paid_by  # the run whose calls these are (`db.paid_by_run`)
        self.scores = scores  # the caller's API answers scores (`providers.ModelAPI.answers_scores`)
        self._prefetched: dict[str, Completion | None] = {}
        self._unsaved: list[dict[str, Any]] = []
        self._writer: asyncio.Task[None] | None = None

    @property
    def reads(self) -> bool:
        return self.mode == "use"

    async def prefetch(self, keys: Iterable[str]) -> None:
        """Load many cached answers in one query (a shard's worth), so lookups cost no round trip each.
        `keys` is consumed only when the cache is read: computing them costs a render and a hash each."""
        if self.engine is None or self.mode != "use":
            return
        wanted = list(keys)
        if not wanted:
            return
        rows = await asyncio.to_thread(db.cache_get_many, self.engine, wanted)
        for key in wanted:  # a known miss (None) is remembered too, so it costs no second query
            row = rows.get(key)
            self._prefetched[key] = self._completion(row) if row is not None else None

    async def lookup(self, key: str) -> Completion | None:
        """The cached answer to this request, if any (only with mode `use`; the caller checks `reads`)."""
        known = key in self._prefetched
        hit = self._prefetched.pop(key, None)  # used once: memory holds only the shards in flight
        if not known and self.engine is not None:
            rows = await asyncio.to_thread(db.cache_get_many, self.engine, [key])
            if key in rows:
                hit = self._completion(rows[key])
        return hit

    def _completion(self, row: db.CallCacheRow) -> Completion:
        """A cached answer as the wire gave it: a score API's score, else the text."""
        score = stored_score(row.response) if self.scores else None
        text = "" if score is not None else row.response
        return Completion(text, row.prompt_tokens, row.completion_tokens, cached=True, key=row.key, score=score)

    def save(self, completions: list[Completion]) -> None:
        """Queue answers for writing; the write starts at once, in the background (see `_write`)."""
        if self.engine is None or self.mode == "off" or not completions:
            return
        self._unsaved.extend(
            {
                "key": c.key,
                "model": self.model,
                "response": repr(c.score) if c.score is not None else c.text,
                "prompt_tokens": c.prompt_tokens,
                "completion_tokens": c.completion_tokens,
                "created": db.utcnow(),
                "paid_by": self.paid_by,
            }
            for c in completions
        )
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write())

    async def _write(self) -> None:
        """Group commit: write what is waiting at once; what arrives meanwhile goes in the next write.

        A write starts the moment an answer is remembered, so nothing waits for a timer, but a thousand
        answers arriving together cost a few transactions instead of a thousand (one transaction per
        answer was most of our CPU per judgment).
        """
        engine = self.engine
        assert engine is not None  # `save` queues nothing without one
        while self._unsaved:
            batch, self._unsaved = self._unsaved, []
            await asyncio.to_thread(db.cache_put_many, engine, batch)

    async def flush(self) -> None:
        """Wait until every saved answer is in the database (a failed write raises here)."""
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)
        if self._writer is not None and self._writer.done() and self._writer.exception():
            raise self._writer.exception()  # type: ignore[misc]


__all__ = ["CallCache", "request_key"]

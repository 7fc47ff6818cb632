"""The persistent call cache: answers looked up and written by a hash of the exact request (`request_key`,
made in `core.identity` with every other stored key).

A re-run or a resumed run pays only for what was never answered. Lookups come from one query per shard
(`prefetch`) or, for a request nobody prefetched, one query each; writes are grouped (`save`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from sqlalchemy.engine import Engine

from judgebench_flows.core.completion import Completion
from judgebench_flows.core.endpoint import CacheMode
from judgebench_flows.core.identity import request_key
from judgebench_flows.data import db


class CallCache:
    """One caller's view of the cache table: `use` reads and writes, `refresh` only writes, `off` neither.
    Without an engine it holds nothing."""

    def __init__(self, engine: Engine | None, mode: CacheMode, model: str, paid_by: str | None = None):
        self.engine = engine
        self.mode = mode
        self.model = model
        self.paid_by = paid_by  # the run whose calls these are (`db.paid_by_run`)
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
            self._prefetched[key] = (
                Completion(row.response, row.prompt_tokens, row.completion_tokens, cached=True, key=key)
                if row is not None
                else None
            )

    async def lookup(self, key: str) -> Completion | None:
        """The cached answer to this request, if any (only with mode `use`; the caller checks `reads`)."""
        known = key in self._prefetched
        hit = self._prefetched.pop(key, None)  # used once: memory holds only the shards in flight
        if not known and self.engine is not None:
            rows = await asyncio.to_thread(db.cache_get_many, self.engine, [key])
            if key in rows:
                row = rows[key]
                hit = Completion(row.response, row.prompt_tokens, row.completion_tokens, cached=True, key=key)
        return hit

    def save(self, completions: list[Completion]) -> None:
        """Queue answers for writing; the write starts at once, in the background (see `_write`)."""
        if self.engine is None or self.mode == "off" or not completions:
            return
        self._unsaved.extend(
            {
                "key": c.key,
                "model": self.model,
                "response": c.text,
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

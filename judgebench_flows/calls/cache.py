"""The persistent call cache: answers looked up and written by a hash of the exact request (`request_key`,
made in `core.identity` with every other stored key).

A re-run or a resumed run pays only for what was never answered. Lookups come from one query per shard
(`prefetch`) or, for a request nobody prefetched, one query each; writes are grouped (`save`).

An answer received is never lost: it is held in memory (and served to lookups: a shard's retry never asks
again what its earlier attempt received) until the database confirms its write. A write that fails keeps
its answers: they go to the run's journal on local disk (`data.journal`, fsync'd) and are written again
until the database takes them; a process that ends first leaves the journal to the next run.

What a run may reuse is its `reuse` (`db.CacheReuse`): a night's or a deployment run's answers paid under
its own flow run only, from the command line any run's, either no older than `--cache-max-age`. Each hit
is counted under the run that paid it (`sources`), for the run's results to say where its answers came from.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Iterable
from typing import Any

from sqlalchemy.engine import Engine

from judgebench_flows.calls.heard import heard_here
from judgebench_flows.core.completion import Completion
from judgebench_flows.core.endpoint import CacheMode
from judgebench_flows.core.identity import request_key
from judgebench_flows.data import db
from judgebench_flows.data.journal import AnswerJournal

# Waits between writes the database refused, while it is away: short, so answers land soon after it is back.
RETRY_FIRST_SECONDS = 0.25
RETRY_MAX_SECONDS = 2.0


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
        self,
        engine: Engine | None,
        mode: CacheMode,
        model: str,
        paid_by: str | None = None,
        scores: bool = False,
        journal: AnswerJournal | None = None,
        reuse: db.CacheReuse = db.ANY_RUN,
        sources: Counter[str] | None = None,
    ):
        self.engine = engine
        self.mode = mode
        self.model = model
        self.paid_by = paid_by  # the run whose calls these are (`db.paid_by_run`)
        self.scores = scores  # the caller's API answers scores (`providers.ModelAPI.answers_scores`)
        self.journal = journal  # where answers the database refused are kept (None: memory only)
        self.reuse = reuse  # which stored answers this run may read (`db.CacheReuse`)
        # Hits by the run that paid them ("" when no run is recorded: answers of an older version).
        self.sources: Counter[str] = sources if sources is not None else Counter()
        self._prefetched: dict[str, Completion | None] = {}
        self._paid_by: dict[str, str] = {}
        self._unsaved: list[dict[str, Any]] = []  # received, not yet tried: in memory only
        self._refused: list[dict[str, Any]] = []  # refused by the database, journaled: tried again
        self._held: dict[str, dict[str, Any]] = {}  # every row not yet confirmed by the database, by key
        self._durable = asyncio.Event()  # set while every received answer is in the database or journal
        self._durable.set()
        self._failure: BaseException | None = None  # the journal could not be written either
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
        rows = await asyncio.to_thread(db.cache_get_many, self.engine, wanted, self.reuse)
        for key in wanted:  # a known miss (None) is remembered too, so it costs no second query
            row = rows.get(key)
            self._prefetched[key] = self._completion(row) if row is not None else None

    async def lookup(self, key: str) -> Completion | None:
        """The cached answer to this request, if any (only with mode `use`; the caller checks `reads`).
        An answer received but not yet in the database is one too."""
        held = self.received(key)
        if held is not None:
            self._count(self.paid_by or "")  # this run's own answer, not yet in the database
            return held
        known = key in self._prefetched
        hit = self._prefetched.pop(key, None)  # used once: memory holds only the shards in flight
        if not known and self.engine is not None:
            rows = await asyncio.to_thread(db.cache_get_many, self.engine, [key], self.reuse)
            if key in rows:
                hit = self._completion(rows[key])
        if hit is not None:
            self._count(self._paid_by.pop(key, ""))
        return hit

    def answered(self, key: str) -> bool:
        """Whether `lookup` would answer this key without a query: prefetched, or received by this run."""
        return (self.reads and self._prefetched.get(key) is not None) or key in self._held

    def _count(self, paid_by: str) -> None:
        """A hit, under the run that paid it: the run's count, and the shard task's (`calls.heard`)."""
        self.sources[paid_by] += 1
        shard = heard_here.get()
        if shard is not None:
            shard.cache_sources[paid_by] += 1

    def received(self, key: str) -> Completion | None:
        """An answer this cache received but the database has not confirmed yet (whatever the mode)."""
        row = self._held.get(key)
        if row is None:
            return None
        return self._answer(row["key"], row["response"], row["prompt_tokens"], row["completion_tokens"])

    def _completion(self, row: db.CallCacheRow) -> Completion:
        self._paid_by[row.key] = row.paid_by or ""
        return self._answer(row.key, row.response, row.prompt_tokens, row.completion_tokens)

    def _answer(self, key: str, response: str, prompt_tokens: int, completion_tokens: int) -> Completion:
        """A cached answer as the wire gave it: a score API's score, else the text."""
        score = stored_score(response) if self.scores else None
        text = "" if score is not None else response
        return Completion(text, prompt_tokens, completion_tokens, cached=True, key=key, score=score)

    @property
    def holds(self) -> int:
        """Answers received that the database has not confirmed yet (in memory, and journaled if refused)."""
        return len(self._held)

    def save(self, completions: list[Completion]) -> None:
        """Queue answers for writing; the write starts at once, in the background (see `_write`)."""
        if self.engine is None or self.mode == "off" or not completions:
            return
        rows: list[dict[str, Any]] = [
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
        ]
        self._unsaved.extend(rows)
        self._held.update((row["key"], row) for row in rows)
        self._durable.clear()
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write())

    async def _write(self) -> None:
        """Group commit: write what is waiting at once; what arrives meanwhile goes in the next write.

        A write starts the moment an answer is remembered, so nothing waits for a timer, but a thousand
        answers arriving together cost a few transactions instead of a thousand (one transaction per
        answer was most of our CPU per judgment). A refused write keeps its rows: new ones are journaled
        first (`data.journal`), then all are tried again after a short wait, until the database takes them.
        """
        engine = self.engine
        assert engine is not None  # `save` queues nothing without one
        wait = RETRY_FIRST_SECONDS
        while self._unsaved or self._refused:
            fresh, batch = self._unsaved, self._refused + self._unsaved
            self._unsaved, self._refused = [], []
            try:
                await asyncio.to_thread(db.cache_put_many, engine, batch, False)
            except Exception:  # the database is away (or its disk full): keep every row, durably
                self._refused = batch
                await self._journal(fresh)
                await asyncio.sleep(wait)
                wait = min(RETRY_MAX_SECONDS, wait * 2)
                continue
            wait = RETRY_FIRST_SECONDS
            for row in batch:
                if self._held.get(row["key"]) is row:
                    del self._held[row["key"]]
            if not self._unsaved:
                self._durable.set()
            if self.journal is not None and not self._held:
                await asyncio.to_thread(self.journal.settle)  # all in the database: the journal goes

    async def _journal(self, rows: list[dict[str, Any]]) -> None:
        """Make rows the database refused durable on local disk; they stay in memory either way."""
        if self.journal is not None and rows:
            try:
                await asyncio.to_thread(self.journal.append, rows)
            except OSError as exc:  # the journal's disk is full too: only memory holds them (flush says so)
                self._failure = exc
                return
        if not self._unsaved:
            self._durable.set()

    async def flush(self) -> None:
        """Wait until every saved answer is durable: in the database, or journaled while it is away. Raises
        when neither could take them (the journal's `OSError`); the answers stay held here."""
        if self._writer is None:
            return
        while not self._durable.is_set() and not self._writer.done():
            waiter = asyncio.ensure_future(self._durable.wait())
            await asyncio.wait([waiter, self._writer], return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure
        if self._writer.done() and not self._writer.cancelled() and self._writer.exception():
            raise self._writer.exception()  # type: ignore[misc]

    async def close(self) -> None:
        """The caller is done: one last write of what the database has not taken; what it still refuses
        stays in the journal for the next run."""
        await self.flush()
        if self._writer is not None and not self._writer.done():
            self._writer.cancel()
            await asyncio.gather(self._writer, return_exceptions=True)
        remaining = list(self._held.values())
        if remaining and self.engine is not None:
            try:
                await asyncio.to_thread(db.cache_put_many, self.engine, remaining, False)
                self._held.clear()
                self._unsaved, self._refused = [], []
                if self.journal is not None:
                    await asyncio.to_thread(self.journal.settle)
            except Exception:
                pass
        if self.journal is not None:
            await asyncio.to_thread(self.journal.close)


__all__ = ["CallCache", "request_key"]

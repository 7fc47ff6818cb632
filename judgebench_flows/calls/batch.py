"""`--batch`: every call of a run through its provider's batch API, as one more `ModelAPI`.

The caller's policies stay as they are (call cache, request rules and their 400 adjustments, retries);
only the wire changes. `post` puts the request in the next batch and waits for its line's answer:
requests that arrive together (a run's first turns; then the follow-up turns their answers ask for) are
gathered for `GATHER_SECONDS` after the last one, split at the provider's limits, submitted, and polled
every `--batch-poll-seconds`. The first round goes sooner when the run's shards declared its lines
(`batch_round`): as soon as every one of them is in. A line's outcome comes back to its call as a
synchronous answer would: a 200's body, or the `CallError` its status and error body make, so a 5xx or
rate-limited line is retried in a later batch within the retry budget, and an invalid one fails its
judgment with the API's message.

Nothing paid twice: each line's custom id is a hash of its request body (`core.identity.batch_line_id`), and a batch's id and custom
ids are stored (`data.db.BatchRow`) the moment it is created. A run killed, crashed or retried posts
the same requests again and each is re-attached to the batch that holds it instead of being submitted.
Lines an expired or cancelled batch never finished go into the next batch, without spending a retry,
at most `MAX_BATCHES_PER_LINE` batches in all; then they are sent synchronously (a provider that expires
every batch cannot keep a run resubmitting). A batch the provider refuses whole stops the run
(`BatchRefused`, exit 7; exit 2 when the refusal is about our input, such as an unknown model).

A deadline (`deadline`, seconds since the epoch: the nightly matrix's `finish_by`/`deadline_minutes`,
or `--batch-deadline`): when it passes, every open batch is cancelled at the provider, the lines it
finished are read if it ended, and every line still waiting is sent synchronously (as are requests
posted after it), at most `sync_concurrency` at once. Answers sent synchronously are marked
(`Completion.synchronous`) and paid at the synchronous price.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import JsonValue
from sqlalchemy.engine import Engine

from judgebench_flows.calls.batch_round import FirstRound
from judgebench_flows.calls.errors import CallError, http_error
from judgebench_flows.calls.transport import JsonBody
from judgebench_flows.core.completion import Completion, Sampling
from judgebench_flows.core.errors import BatchRefused
from judgebench_flows.core.identity import batch_line_id
from judgebench_flows.data import db

GATHER_SECONDS = 2.0
# Batches one line may be in (the first and two resubmissions after expiries); then it goes synchronous.
MAX_BATCHES_PER_LINE = 3
log = logging.getLogger(__name__)


@dataclass
class SyncAnswer:
    """A batch run's answer that came from a synchronous call (past the deadline, or after expiries)."""

    response: Any


@dataclass
class LineResult:
    """One line of a finished batch: `status` 200 with the answer `body`, an HTTP error status with its
    error body, or 0 when the batch ended (expired, cancelled) before the line was done."""

    status: int
    body: JsonValue = None


@dataclass
class BatchState:
    """Where a batch stands: `counts` for progress, `ended` once its results can be read, `refused`
    (the provider's reason) when it rejected the batch as a whole, `our_input` when that reason is ours."""

    status: str
    counts: dict[str, int] = field(default_factory=dict)
    ended: bool = False
    refused: str | None = None
    our_input: bool = False
    handle: Any = None  # what `results` needs (the provider's batch object)


class BatchAPI(Protocol):
    """A provider's batch API: request bodies in, one `LineResult` per custom id out."""

    provider: str
    max_lines: int
    max_bytes: int
    # fewer lines than this are not a batch the provider takes (Bedrock: 100): they are sent synchronously
    min_lines: int

    @classmethod
    def for_wire(cls, wire: Any, api_key: str, settings: Any) -> BatchAPI:
        """The batch API of the provider whose chat wire this is, with the run's endpoint settings (what
        the provider's batches need beyond the wire: Bedrock's S3 locations and role)."""

    def body(self, messages: list[dict[str, str]], sampling: Sampling) -> JsonBody:
        """The request body of one line: the same body a synchronous chat call sends."""

    def line(self, custom_id: str, body: JsonBody) -> bytes:
        """One request as the provider's batch input holds it (its size counts toward `max_bytes`)."""

    async def submit(self, lines: list[bytes]) -> str:
        """Create a batch of these lines; its id."""

    async def state(self, batch_id: str) -> BatchState: ...

    async def results(self, state: BatchState) -> dict[str, LineResult]: ...

    async def cancel(self, batch_id: str) -> None:
        """Ask the provider to stop the batch (its unfinished lines are then never run nor paid)."""


def line_error(result: LineResult) -> CallError:
    """The failure a synchronous call would have had for this line's status and error body."""
    failed = http_error(result.status, result.body)
    if failed.message:
        return failed
    return CallError("status", result.status, f"batch line failed with HTTP {result.status}", failed.error)


class BatchStore:
    """The stored batches of one endpoint and model (none without a database: nothing to re-attach to)."""

    def __init__(self, engine: Engine | None, provider: str, endpoint: str, model: str):
        self.engine, self.provider, self.endpoint, self.model = engine, provider, endpoint, model
        self._writes: set[asyncio.Future[None]] = set()

    async def _write(self, write: Any, *args: Any) -> None:
        """A write that finishes even when the task awaiting it is cancelled (the transport closing as its
        last lines are handed out): `settle` waits for it before the transport is closed."""
        task = asyncio.ensure_future(asyncio.to_thread(write, self.engine, *args))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)
        await asyncio.shield(task)

    async def settle(self) -> None:
        """Wait for every write under way."""
        await asyncio.gather(*self._writes, return_exceptions=True)

    async def open_batches(self) -> dict[str, list[str]]:
        if self.engine is None:
            return {}
        rows = await asyncio.to_thread(db.batches_open, self.engine, self.endpoint, self.model)
        return {row.batch_id: json.loads(row.custom_ids) for row in rows}

    async def created(self, batch_id: str, ids: list[str]) -> None:
        if self.engine is None:
            return
        row = {
            "batch_id": batch_id,
            "provider": self.provider,
            "endpoint": self.endpoint,
            "model": self.model,
            "custom_ids": json.dumps(ids),
            "status": "open",
            "created": db.utcnow(),
        }
        await self._write(db.batch_save, row)

    async def done(self, batch_id: str) -> None:
        if self.engine is not None:
            await self._write(db.batch_done, batch_id)


def report(line: str) -> None:
    """A batch's progress: on the terminal (stderr) and in the Prefect run's logs (the task or flow that
    started the batch), or this module's logger outside a run."""
    from prefect.exceptions import MissingContextError
    from prefect.logging import get_run_logger

    print(f"batch: {line}", file=sys.stderr, flush=True)
    try:
        get_run_logger().info("batch: %s", line)
    except MissingContextError:
        log.info(line)


class BatchTransport:
    """The `ModelAPI` of a batch run: `post` waits for its line in a batch (see the module docstring);
    `answer` reads a line's body as the provider's synchronous wire would (`inner.answer`)."""

    def __init__(self, inner: Any, batches: BatchAPI, store: BatchStore, poll_seconds: float):
        self.inner, self.batches, self.store, self.poll_seconds = inner, batches, store, poll_seconds
        self.base_url, self.model = inner.base_url, inner.model
        self.checks_raw_scores = self.answers_scores = False  # chat only
        self.gather_seconds = min(GATHER_SECONDS, poll_seconds)
        self._waiting: dict[str, list[asyncio.Future[Any]]] = {}
        self._bodies: dict[str, JsonBody] = {}
        self._queued: list[str] = []
        self._open: dict[str, list[str]] = {}  # batch id -> custom ids, polled while someone waits
        self._stored: dict[str, str] | None = None  # custom id -> open stored batch (read once)
        self._stored_batches: dict[str, list[str]] = {}
        self._last_post = 0.0
        self._seen: dict[str, str] = {}
        self._runner: asyncio.Task[None] | None = None
        # Answers already downloaded, by custom id: the same request posted again (two orders of a pair
        # whose responses are the same text) is answered from here instead of being paid again.
        self._answers: dict[str, JsonValue] = {}
        # The deadline (time.time(); None: none) and the synchronous calls allowed in flight after it.
        self.deadline: float | None = None
        self.sync_concurrency = 16
        self._requests: dict[str, tuple[list[dict[str, str]], Sampling]] = {}
        self._batches_of: Counter[str] = Counter()  # custom id -> batches it was submitted in
        self._sync_slots: asyncio.Semaphore | None = None
        self._sync_tasks: set[asyncio.Task[None]] = set()
        self.sync_calls = 0
        # The first round's lines, declared by the run's shards: once all are in, the batch goes at once.
        self.round = FirstRound()
        self._round_in = asyncio.Event()

    def line_id(self, messages: list[dict[str, str]], sampling: Sampling) -> str:
        """The custom id of the line these (shaped) messages and sampling make."""
        return batch_line_id(self.batches.body(messages, sampling))

    def past_deadline(self) -> bool:
        return self.deadline is not None and time.time() >= self.deadline

    async def post(self, messages: list[dict[str, str]], sampling: Sampling) -> Any:
        """Chat requests only: the factory wraps no other API's wire (`providers.unserved`)."""
        body = self.batches.body(messages, sampling)
        cid = batch_line_id(body)
        if cid in self._answers:
            self._arrived(cid)
            return self._answers[cid]
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        waiters = self._waiting.setdefault(cid, [])
        waiters.append(future)
        if len(waiters) == 1:
            self._bodies[cid] = body
            self._requests[cid] = (messages, sampling)
            if self.past_deadline():
                self._go_synchronous([cid])
            else:
                await self._place(cid)
        self._arrived(cid)
        return await future

    def _arrived(self, cid: str) -> None:
        self.round.arrived(cid)
        if self.round.complete():
            self._round_in.set()

    async def _place(self, cid: str) -> None:
        """Re-attach the request to the stored batch that holds it, or queue it for the next batch."""
        if self._stored is None:
            self._stored_batches = await self.store.open_batches()
            self._stored = {i: batch for batch, ids in self._stored_batches.items() for i in ids}
        batch_id = self._stored.pop(cid, None)
        if batch_id is not None:
            if batch_id not in self._open:
                report(f"re-attached to {batch_id}")
            self._open.setdefault(batch_id, self._stored_batches[batch_id])
        else:
            self._queued.append(cid)
            self._last_post = asyncio.get_running_loop().time()
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run())

    async def _run(self) -> None:
        """`_rounds`, and should it break, every waiting call fails with its error instead of waiting forever."""
        try:
            await self._rounds()
        except Exception as exc:
            self._fail(list(self._waiting), exc)
            raise

    async def _rounds(self) -> None:
        """Submit what was gathered, poll what is open, until nobody waits."""
        loop = asyncio.get_running_loop()
        next_poll = loop.time() + self.poll_seconds
        tick = min(0.25, self.gather_seconds / 4)
        while self._queued or self._open:
            with contextlib.suppress(asyncio.TimeoutError):  # woken early when the first round is in
                await asyncio.wait_for(self._round_in.wait(), tick)
            self._round_in.clear()
            if self.past_deadline():
                await self._at_deadline()
                return
            quiet = loop.time() - self._last_post >= self.gather_seconds
            if self._queued and (quiet or self.round.complete()):
                await self._submit_queued()
            elif self.round.complete():  # all of it re-attached to stored batches or answered already
                self.round.close()
            if self._open and loop.time() >= next_poll:
                next_poll = loop.time() + self.poll_seconds
                for batch_id in list(self._open):
                    await self._poll(batch_id)

    async def _submit_queued(self) -> None:
        self.round.close()
        queued, self._queued = self._queued, []
        chunk: list[str] = []
        size = 0
        for cid in queued:
            line = self.batches.line(cid, self._bodies[cid])
            if chunk and (len(chunk) >= self.batches.max_lines or size + len(line) > self.batches.max_bytes):
                await self._submit(chunk)
                chunk, size = [], 0
            chunk.append(cid)
            size += len(line)
        if chunk:
            await self._submit(chunk)

    async def _submit(self, ids: list[str]) -> None:
        if len(ids) < self.batches.min_lines:
            report(
                f"{len(ids)} requests are fewer than the {self.batches.min_lines} a {self.batches.provider} batch "
                "job takes: sent synchronously (at the synchronous price)"
            )
            self._go_synchronous(ids)
            return
        try:
            batch_id = await self.batches.submit([self.batches.line(cid, self._bodies[cid]) for cid in ids])
        except CallError as exc:
            if exc.kind == "status" and exc.status < 500 and exc.status != 429:
                refusal = f"{self.batches.provider} refused a batch of {len(ids)} requests: {exc}"
                self._fail(ids, BatchRefused(refusal, our_input=exc.status == 404))  # 404: no such model
                return
            self._fail(ids, exc)
            return
        await self.store.created(batch_id, ids)
        self._batches_of.update(ids)
        self._open[batch_id] = ids
        report(f"submitted {batch_id}: {len(ids)} requests to {self.model}")

    async def _poll(self, batch_id: str) -> None:
        try:
            state = await self.batches.state(batch_id)
        except CallError as exc:  # the provider is unreachable for now: poll again later
            report(f"{batch_id}: status unknown ({exc.failure_kind()}); polling again")
            return
        progress = f"{batch_id}: {state.status} " + " ".join(f"{k} {v}" for k, v in state.counts.items())
        if self._seen.get(batch_id) != progress:
            self._seen[batch_id] = progress
            report(progress)
        if state.refused:
            ids = self._open.pop(batch_id)
            refusal = f"{self.batches.provider} refused batch {batch_id} as a whole: {state.refused}"
            self._fail(ids, BatchRefused(refusal, our_input=state.our_input))
            await self.store.done(batch_id)
        elif state.ended:
            await self._settle(batch_id, await self.batches.results(state))

    async def _settle(self, batch_id: str, results: dict[str, LineResult]) -> None:
        """Hand each waiting line its outcome; lines the batch never finished go into the next batch, or
        synchronously once they were in `MAX_BATCHES_PER_LINE` batches or the deadline passed."""
        ids = self._open.pop(batch_id)
        unfinished, synchronous = 0, []
        for cid in ids:
            result = results.get(cid, LineResult(0))
            if cid not in self._waiting:
                continue
            if result.status == 0:
                if self.past_deadline() or self._batches_of[cid] >= MAX_BATCHES_PER_LINE:
                    synchronous.append(cid)
                    continue
                unfinished += 1
                self._queued.append(cid)
                self._last_post = asyncio.get_running_loop().time()
                continue
            outcome: Any = result.body if result.status == 200 else line_error(result)
            if result.status == 200:
                self._answers[cid] = outcome
            self._hand_out(cid, outcome)
            self._bodies.pop(cid, None)
            self._requests.pop(cid, None)
        if unfinished:
            report(f"{batch_id}: {unfinished} unfinished requests go into the next batch")
        if synchronous:
            why = "the deadline passed" if self.past_deadline() else f"in {MAX_BATCHES_PER_LINE} batches already"
            report(f"{batch_id}: {len(synchronous)} unfinished requests are sent synchronously ({why})")
            self._go_synchronous(synchronous)
        await self.store.done(batch_id)

    async def _at_deadline(self) -> None:
        """Cancel every open batch; the lines an ended batch finished are handed out, every other line
        still waiting (queued, or in a batch not yet ended) is sent synchronously."""
        queued, self._queued = self._queued, []
        report(f"deadline passed: cancelling {len(self._open)} open batches, the rest goes synchronously")
        for batch_id in list(self._open):
            try:
                await self.batches.cancel(batch_id)
                state = await self.batches.state(batch_id)
            except CallError as exc:
                report(f"{batch_id}: could not cancel ({exc.failure_kind()}); its lines go synchronously")
                state = None
            if state is not None and state.ended and not state.refused:
                await self._settle(batch_id, await self.batches.results(state))
            else:
                queued += self._open.pop(batch_id)
                await self.store.done(batch_id)
        self._go_synchronous([cid for cid in queued if cid in self._waiting])

    def _go_synchronous(self, ids: list[str]) -> None:
        if self._sync_slots is None:
            self._sync_slots = asyncio.Semaphore(self.sync_concurrency)
        for cid in ids:
            task = asyncio.create_task(self._synchronous(cid))
            self._sync_tasks.add(task)
            task.add_done_callback(self._sync_tasks.discard)

    async def _synchronous(self, cid: str) -> None:
        """One waiting line as a synchronous call (its outcome, answer or error, to every waiter)."""
        messages, sampling = self._requests[cid]
        assert self._sync_slots is not None
        try:
            async with self._sync_slots:
                self.sync_calls += 1
                outcome: Any = SyncAnswer(await self.inner.post(messages, sampling))
        except Exception as exc:
            outcome = exc
        self._hand_out(cid, outcome)
        self._bodies.pop(cid, None)

    def _hand_out(self, cid: str, outcome: Any) -> None:
        """A line's outcome (an answer, or the error to raise) to every call still waiting for it."""
        for future in self._waiting.pop(cid, []):
            if future.done():
                continue
            if isinstance(outcome, Exception):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)

    def _fail(self, ids: list[str], exc: BaseException) -> None:
        for cid in ids:
            for future in self._waiting.pop(cid, []):
                if not future.done():
                    future.set_exception(exc)
            self._bodies.pop(cid, None)
            self._requests.pop(cid, None)

    def answer(self, response: Any) -> Completion:
        if isinstance(response, SyncAnswer):
            completion = self.inner.answer(response.response)
            completion.synchronous = True
            return completion
        return self.inner.answer(response)

    def ignored(self, params: Sampling, response: Any) -> tuple[str, str] | None:
        return None

    async def model_entry(self, timeout: float) -> Any:
        return await self.inner.model_entry(timeout)

    async def aclose(self) -> None:
        for task in [self._runner, *self._sync_tasks]:
            if task is not None and not task.done():
                task.cancel()
        await asyncio.gather(*(t for t in [self._runner, *self._sync_tasks] if t is not None), return_exceptions=True)
        await self.store.settle()
        await self.inner.aclose()

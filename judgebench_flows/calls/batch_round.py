"""A batch run's first round: the lines its shards will post, so the batch goes once they are all in.

A batch gathers the requests that arrive together and goes after a quiet window (`batch.GATHER_SECONDS`):
a window shorter than a busy event loop's pause between shards would split a round over two batches,
and each batch costs its provider's whole turnaround. But the first round is known before it is posted:
a run's shards all start at once, and each knows its pairs' first requests and which of them the call
cache already answers. So the run says how many shards will declare (`expect`), each shard declares its
lines (`declare`), and once every declared line has arrived the round is complete: the batch goes at
once, not a window later. Anything unforeseen leaves the window in charge: a shard Prefect's cache
serves never declares, a judgment that fails before posting never arrives, and a line no shard declared
(a follow-up turn to a cached first answer) just rides along. Later rounds (follow-up turns, lines
retried after an expired batch) always wait for the window: what they hold is not known ahead.
"""

from __future__ import annotations

from collections.abc import Iterable


class FirstRound:
    """The first round of one batch transport (one model at one endpoint, in one run)."""

    def __init__(self) -> None:
        self._open = False
        self._declarations = 0  # shards that have yet to declare their lines
        self._expected: set[str] = set()  # declared lines not arrived yet
        self._arrived: set[str] = set()

    @property
    def open(self) -> bool:
        return self._open

    def expect(self, shards: int) -> None:
        """A run's shards are starting: `shards` of them will each `declare` (a fresh round)."""
        self._open, self._declarations = shards > 0, shards
        self._expected, self._arrived = set(), set()

    def declare(self, lines: Iterable[str]) -> None:
        """One shard's lines (custom ids) that it will post: those the call cache does not answer."""
        if self._open:
            self._declarations -= 1
            self._expected.update(line for line in lines if line not in self._arrived)

    def arrived(self, line: str) -> None:
        if self._open:
            self._expected.discard(line)
            self._arrived.add(line)

    def complete(self) -> bool:
        """Every shard declared and every declared line arrived: nothing more is coming before answers."""
        return self._open and self._declarations <= 0 and not self._expected

    def close(self) -> None:
        """The round went out: what arrives later waits for the window."""
        self._open, self._expected, self._arrived = False, set(), set()

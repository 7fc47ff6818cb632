"""Judgments done of judgments planned, for whatever draws a run's progress (the command's bar on a
terminal, `evaluate(progress=True)`'s): the counting is the run's, the drawing the door's."""

from __future__ import annotations

import threading
from collections.abc import Callable

from judgebench_flows.judging.run_context import RunProgress


class JudgmentCounter:
    """Judgments done out of judgments planned, each counted once: a retried shard does not count its
    judgments again, and a shard served whole from Prefect's cache (no judgment ticked) counts when the
    flow settles it. Memory: one number per shard."""

    def __init__(self, show: Callable[[int], None]):
        self._show = show
        self._per_shard: dict[int, int] = {}
        self._settled: set[int] = set()
        self.done = 0
        self._lock = threading.Lock()  # ticks come from the event loop, settles from a worker thread

    def advance(self, shard: int, judgments: int, planned: int) -> None:
        with self._lock:
            if shard in self._settled:
                return
            before = self._per_shard.get(shard, 0)
            after = min(planned, before + judgments)
            self._per_shard[shard] = after
            self.done += after - before
            done = self.done
        self._show(done)

    def settle(self, shard: int, judgments: int) -> None:
        with self._lock:
            self._settled.add(shard)
            self.done += judgments - self._per_shard.get(shard, 0)
            self._per_shard[shard] = judgments
            done = self.done
        self._show(done)


def count_judgments(
    progress: RunProgress, done: Callable[[int], None], total: Callable[[int], None]
) -> JudgmentCounter:
    """`done(n)` each time the run's count of judgments changes, `total(n)` when its plan is known."""
    counter = JudgmentCounter(done)
    progress.add_total_hook(total)
    progress.add_hook(counter.advance, counter.settle)
    return counter


__all__ = ["JudgmentCounter", "count_judgments"]

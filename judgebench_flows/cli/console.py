"""A run under a progress bar on stderr, then its results (views/summaries.py)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from judgebench_flows.core.config import RunConfig
from judgebench_flows.core.errors import RunFailed
from judgebench_flows.core.text import wrapped
from judgebench_flows.judging.run_context import RunContext, running
from judgebench_flows.scoring.run_results import RunResults
from judgebench_flows.views.summaries import err, print_results


def run_with_progress(config: RunConfig, show_progress: bool = True, run: RunContext | None = None) -> int:
    """The JudgeBench flow under a progress bar, then its results as tables; 1 when it found a regression.
    `run`: the run's context (a new one without it), which the flow uses and the bar's hooks are added to."""
    from judgebench_flows.flows.judgebench_flow import judgebench_flow

    run = run or RunContext()

    say(
        f"judgebench {config.judge_template or config.judge_type} / {config.model}; "
        f"dataset {config.data_path or config.repo_url} @ {config.ref or 'default branch'}"
    )
    progress = Progress(
        TextColumn("judging"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
        disable=not show_progress,
    )
    # Drawn only once the data is read and checked (the total known): a bad ref or data file is one
    # line with nothing drawn before it.
    with contextlib.closing(_LazyBar(progress)) as lazy:
        bar = progress.add_task("judging", total=None)
        counter = JudgmentCounter(lambda done: progress.update(bar, completed=done))
        run.add_total_hook(lambda n: lazy.start(total=n))
        run.add_link_hook(say)
        run.add_progress_hook(counter.advance, counter.settle)
        try:
            with running(run):
                results = asyncio.run(judgebench_flow(config))
        except RunFailed as exc:  # published but not a measurement: show what there is, then exit 4
            if exc.results:
                progress.stop()
                print_results(RunResults.model_validate(exc.results))
            raise
    print_results(RunResults.model_validate(results))
    regression = results.get("regression") or {}
    return 1 if regression.get("regressed") else 0


class _LazyBar:
    """A progress display started when there is something to show, stopped on the way out."""

    def __init__(self, progress: Progress) -> None:
        self.progress, self.started = progress, False

    def start(self, total: int) -> None:
        for task in self.progress.task_ids:
            self.progress.update(task, total=total)
        if not self.started:
            self.started = True
            self.progress.start()

    def close(self) -> None:
        if self.started:
            self.progress.stop()


def say(line: str) -> None:
    """A line on stderr (above the progress bar while it is drawn), wrapped at whole words to the
    terminal: a path or URL longer than a line stays whole on a line of its own, never cut by Rich."""
    err.print(wrapped(line), markup=False, highlight=False, soft_wrap=True)


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


__all__ = ["JudgmentCounter", "run_with_progress"]

"""The command's view of a run: a line naming it and a progress bar on stderr while it judges (its results
are views/summaries.py's)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from judgebench_flows.core.config import RunConfig
from judgebench_flows.core.errors import RunFailed
from judgebench_flows.core.text import wrapped
from judgebench_flows.judging.run_context import RunProgress
from judgebench_flows.runtime.progress import count_judgments
from judgebench_flows.scoring.run_results import RunResults
from judgebench_flows.views.summaries import err, print_results


@contextlib.contextmanager
def progress_shown(config: RunConfig, hooks: RunProgress, show_progress: bool = True) -> Iterator[None]:
    """The command's view of a run while its flow runs inside the block (runtime/run.py runs it): a line
    naming it, then a progress bar on stderr, fed by the run's progress `hooks`; a run that measured too
    little (RunFailed) shows what it published before `main` says its error line."""
    # a local file is judged as it is: no commit of JudgeBench's is named (results.json records none)
    source = config.data_path or f"{config.repo_url} @ {config.ref or 'default branch'}"
    say(f"judgebench {config.judge_template or config.judge_type} / {config.model}; dataset {source}")
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
        count_judgments(hooks, lambda done: progress.update(bar, completed=done), lambda n: lazy.start(total=n))
        hooks.add_link_hook(say)
        try:
            yield
        except RunFailed as exc:  # published but not a measurement: show what there is, then exit 4
            if exc.results:
                progress.stop()
                print_results(RunResults.model_validate(exc.results))
            raise


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


__all__ = ["progress_shown", "say"]

"""`evaluate`: `judgebench run` as a Python function, for scripts and notebooks (docs/python-api.md).

It takes the command's options as keyword arguments (the same names, `--base-url` is `base_url`), checks
them as the command does before the first call, runs the same flow against the same Prefect server
(`PREFECT_API_URL`, else PREFECT_HOME's background server, started when none answers) and returns the
typed results. Errors are the command's, raised instead of turned into exit codes: `UserError` for bad
input (exit 2), `RunFailed` for a run that measured too little (exit 4, its published results in
`.results`), `BudgetReached` for a spent `--max-cost` (exit 6).

A notebook (Jupyter, IPython) runs its own event loop in the thread that runs the cell, where
`asyncio.run` refuses to start another: the flow then runs in a worker thread of its own (its event loop
there) while the cell waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import sys
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from judgebench_flows.api.evaluation import Evaluation
from judgebench_flows.core.config import RunConfig, build_config
from judgebench_flows.core.errors import UserError
from judgebench_flows.judging.run_context import RunContext

DEFAULT_JUDGE = "arena_hard"


def evaluate(
    *,
    model: str | None = None,
    judge: str | type = DEFAULT_JUDGE,
    provider: str | None = None,
    base_url: str | None = None,
    data_path: str | os.PathLike[str] | None = None,
    progress: bool = False,
    verbose: bool = False,
    **options: Any,
) -> Evaluation:
    """Judge JudgeBench's pairs as `judgebench run` does and return the results.

    - `model`: the judge model's name at the endpoint (`--model`).
    - `judge`: a built-in judge's name (`"arena_hard"`, `"vanilla"`, ... as `--judge-type`), a custom
      judge as `"path.py:Class"` or `"module:Class"` (`--judge-template`), or the custom judge class
      itself, defined at the top level of a module, a script or a notebook (docs/judges.md).
    - `provider`, `base_url`: `--provider`, `--base-url` (else the environment's, as the command reads it).
    - `data_path`: a local file of pairs (`--data-path`); without it the pinned JudgeBench checkout is
      cloned and `data_file` judged, as the command does.
    - `options`: any other option of `judgebench run`, by its field name (`concurrency=8`,
      `max_samples=50`, `db_url="sqlite:///runs.db"`, `single_game=True`, ...).
    - `progress`: a progress bar on stderr; `verbose`: Prefect's own logs (else warnings only).

    Returns the run's `Evaluation`: results.json's fields, typed, with `accuracy()`, `by_category()`,
    `by_source()` and `judgments()` as pandas frames.
    """
    config = run_config(
        model=model, judge=judge, provider=provider, base_url=base_url, data_path=data_path, options=options
    )
    if not _event_loop_running():
        return _run(config, progress=progress, verbose=verbose)
    with ThreadPoolExecutor(1, thread_name_prefix="judgebench-evaluate") as pool:
        context = contextvars.copy_context()  # the run's credentials, read with its settings above
        return pool.submit(context.run, _run, config, progress, verbose).result()


async def evaluate_async(**kwargs: Any) -> Evaluation:
    """`await evaluate_async(...)`: `evaluate` in a worker thread, so the caller's event loop goes on."""
    return await asyncio.to_thread(evaluate, **kwargs)


def run_config(
    *,
    model: str | None,
    judge: str | type,
    provider: str | None,
    base_url: str | None,
    data_path: str | os.PathLike[str] | None,
    options: dict[str, Any],
) -> RunConfig:
    """The run's settings from `evaluate`'s arguments, validated as the command's options are."""
    unknown = sorted(set(options) - RunConfig.option_names())
    if unknown:
        raise UserError(
            f"evaluate(): unknown option {unknown[0]!r} (the options are `judgebench run`'s, as field names)"
        )
    given = {**options, **judge_options(judge, options)}
    given |= {"provider": provider, "base_url": base_url, "data_path": data_path and os.fspath(data_path)}
    if given.get("judge_type") == "external" and not model:
        model = "external"  # a pairwise external judge deciding JudgeBench pairs: no endpoint, as the command
    if not model:
        raise UserError("evaluate(): model= is required (the judge model's name at the endpoint)")
    return build_config(model=model, **given)


def judge_options(judge: str | type, options: dict[str, Any]) -> dict[str, Any]:
    """`judge=` as the command's `--judge-type` / `--judge-template`; given those too, they must agree."""
    if isinstance(judge, type):
        chosen = {"judge_type": "custom", "judge_template": class_spec(judge)}
    elif ":" in judge:
        chosen = {"judge_type": "custom", "judge_template": judge}
    else:
        chosen = {"judge_type": judge}
    given = {name: options[name] for name in ("judge_type", "judge_template") if options.get(name) is not None}
    if given and judge != DEFAULT_JUDGE:
        raise UserError(f"evaluate(): pass the judge once: judge= or {' and '.join(given)}=, not both")
    return given or chosen


def class_spec(cls: type) -> str:
    """`module:Class` of a custom judge class, which the run loads again by that name (a class defined in
    a script or a notebook is `__main__`'s); a class it could not find that way is refused."""
    module = sys.modules.get(cls.__module__)
    if module is None or getattr(module, cls.__qualname__, None) is not cls:
        raise UserError(
            f"evaluate(): judge class {cls.__qualname__} must be defined at the top level of a module, a script "
            "or a notebook cell (the run loads it again by its name)"
        )
    return f"{cls.__module__}:{cls.__qualname__}"


def _event_loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _run(config: RunConfig, progress: bool, verbose: bool) -> Evaluation:
    """What `command_run` does before and around the flow: quiet Prefect, the checks, the server, the run's
    context; then the results with the judgments the results database holds for the run."""
    from judgebench_flows.cli.quiet import quiet_prefect

    quiet_prefect(verbose)
    from judgebench_flows.cli.prefect_server import pointed_at, use_prefect_server
    from judgebench_flows.core.pricing import retirement_notice
    from judgebench_flows.core.secrets import install_log_redaction
    from judgebench_flows.flows.judgebench_flow import judgebench_flow
    from judgebench_flows.judging.preflight import holds_judgebench_pairs, preflight
    from judgebench_flows.judging.run_context import running
    from judgebench_flows.scoring.run_results import RunResults

    install_log_redaction()
    if config.judge_type == "external" and not holds_judgebench_pairs(config.data_path):
        raise UserError(
            "evaluate() judges JudgeBench pairs; score a table with an external judge with `judgebench run`"
        )
    preflight(config)
    notice = retirement_notice(config.priced_model_name, config.prices) if config.needs_endpoint else None
    if notice:
        warnings.warn(notice, stacklevel=3)
    server = use_prefect_server()
    run = RunContext()
    with pointed_at(server), running(run), _progress_bar(run, progress):
        final = asyncio.run(judgebench_flow(config))
    results = RunResults.model_validate(final)
    return Evaluation.of(results, _judgments(config.db_url, results.run.run_id))


def _judgments(db_url: str, run_id: str | None) -> list:
    from judgebench_flows.data import db
    from judgebench_flows.scoring.compare import records_of

    engine = db.open_existing(db_url)
    return records_of(engine, run_id) if engine is not None and run_id else []


@contextlib.contextmanager
def _progress_bar(run: RunContext, show: bool) -> Iterator[None]:
    """The command's progress bar (judgments done of planned, each counted once), on stderr."""
    if not show:
        yield
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from judgebench_flows.cli.console import JudgmentCounter
    from judgebench_flows.views.summaries import err

    with Progress(TextColumn("judging"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err) as bar:
        task = bar.add_task("judging", total=None)
        counter = JudgmentCounter(lambda done: bar.update(task, completed=done))
        run.add_total_hook(lambda n: bar.update(task, total=n))
        run.add_progress_hook(counter.advance, counter.settle)
        yield


__all__ = ["evaluate", "evaluate_async"]

"""One run path under both doors of a run, written once: settings -> checks -> server -> flow -> `RunResults`.

The `judgebench run` command (cli/main.py) and `evaluate()` (api/evaluate.py) each hand `judge_run` the
run's settings and a `RunHost`: what the door says (the route line, a retirement notice), what it shows
while the flow runs (the command's progress bar and results, a notebook's bar or nothing) and how its flow
runs (the command's in the main thread, `evaluate()`'s in a `FlowThread`). Everything else is here once:
the checks before the first call (`preflight`), the Prefect server (`use_prefect_server`), the watch that
ends a run whose server is lost (`ServerWatch`, exit 5 for the command), the run's context, the flow.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import importlib
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from judgebench_flows.core.errors import UserError
from judgebench_flows.runtime.server_watch import CANCEL_GRACE_SECONDS, RESUME

if TYPE_CHECKING:  # imported where a run starts: the command's `--help` and its bad-option lines stay fast
    from judgebench_flows.core.config import RunConfig
    from judgebench_flows.judging.run_context import RunContext, RunProgress
    from judgebench_flows.judging.shards import JudgeSpec, Shard
    from judgebench_flows.runtime.prefect_server import PrefectServer
    from judgebench_flows.runtime.server_watch import ServerWatch
    from judgebench_flows.scoring.run_results import RunResults

T = TypeVar("T")

# After Ctrl-C (or a notebook's stop button) the run's in-flight calls are cancelled and its shutdown
# records it and writes the answers its callers hold: measured at about 1 s; the wait for it is bounded.
INTERRUPT_GRACE_SECONDS = 8.0
POLL_SECONDS = 0.2  # how often a waiting caller looks at a stop request from elsewhere (`stop_requested`)

stop_requested: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar(
    "judgebench_stop_requested", default=None
)
"""Set (to an event) by a caller that waits for a run from another thread or coroutine (`evaluate_async`):
setting the event stops the run as Ctrl-C would."""


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C (or a notebook's stop button) in `evaluate()`: a KeyboardInterrupt still,
    whose message says the calls answered are kept and how to resume."""


class RunHost:
    """A door's side of a run. These defaults say nothing, show nothing and run the flow in this thread
    (`asyncio.run`): Ctrl-C and SIGTERM reach it as they reach the command, and a lost server is
    cancelled with SIGTERM to the main thread (`cancel_run` None)."""

    resume = RESUME  # how the run resumes, said when its server was lost
    cancel_run: Callable[[], None] | None = None
    # Modules the door needs once the run is over (its results' view): imported in a thread while the run
    # judges, not after it.
    imports_after: tuple[str, ...] = ()

    def say_route(self, config: RunConfig) -> None:
        """The line naming the API the model's name chose (`config.routed()`), before the checks."""

    def say_retirement(self, notice: str) -> None:
        """The judge model's retirement notice (near or past its shutdown date), after the checks; said once
        per run (`RunSetUp.say_retirement`): the flow then does not log it again."""

    def showing(self, config: RunConfig, progress: RunProgress) -> AbstractContextManager[object]:
        """What the door shows while the flow runs inside the block (its hooks on the run's `progress`)."""
        return contextlib.nullcontext()

    def run_flow(self, flow: Callable[[], Coroutine[Any, Any, T]]) -> T:
        return asyncio.run(flow())


def judge_run(config: RunConfig, host: RunHost) -> RunResults:
    """The JudgeBench flow with these settings, checked before the first call, on the run's Prefect server,
    watched; its results. A server lost during the run is `PrefectServerError` (the run marked failed)."""
    from judgebench_flows.judging.preflight import preflight
    from judgebench_flows.judging.run_context import RunContext, running

    run = RunContext()  # the run's state, which the door's progress display watches
    run.setup.redact_logs()  # the run's set-up, here once for both doors: the flow finds it done
    host.say_route(config)
    preflight(config)
    run.setup.say_retirement(config, host.say_retirement)
    served = Served(host, config.db_url, config.server_lost_seconds())
    with served.ends_if_lost():
        with host.showing(config, run.progress), running(run):
            final = host.run_flow(lambda: flow_started_early(config, run, served))
    from judgebench_flows.scoring.run_results import RunResults

    return RunResults.model_validate(final)


def watched_run(work: Callable[[], T], host: RunHost, db_url: str | None = None) -> T:
    """`work` (a flow called in this thread, e.g. the external-table flow), the run set up first (its log
    redaction), on the run's Prefect server, watched as `judge_run`'s flow is: a server lost mid-run ends it
    with `PrefectServerError` (exit 5 for the command), not a hang; Prefect's settings point at the server
    inside."""
    from judgebench_flows.core.run_setup import RunSetUp
    from judgebench_flows.runtime.prefect_server import pointed_at
    from judgebench_flows.runtime.server_watch import lost_timeout

    RunSetUp().redact_logs()  # the run's set-up: an external judge's run has no retirement notice
    served = Served(host, db_url, lost_timeout())
    with served.ends_if_lost():
        server = served.find()
        served.watched(server)
        with pointed_at(server):
            return work()


class Served:
    """The run's Prefect server, found while its first calls go out, and the watch on it: a server lost
    mid-run ends the run, not a hang (the watch cancels it: SIGTERM to the main thread, or the host's
    `cancel_run`; the run's own shutdown writes its cached answers, and `ends_if_lost` reports it)."""

    def __init__(self, host: RunHost, db_url: str | None, lost_seconds: float) -> None:
        self.host, self.db_url, self.lost_seconds = host, db_url, lost_seconds
        self.watch: ServerWatch | None = None

    @contextlib.contextmanager
    def ends_if_lost(self) -> Iterator[None]:
        """The run inside the block: if it ended because its server was lost (cancelled by the watch, or
        Prefect's retries gave up on a stopped server), the run is marked failed and `PrefectServerError`
        says so and how to resume; the watch is disarmed as the block ends, whatever happened."""
        from judgebench_flows.runtime.prefect_server import PrefectServerError
        from judgebench_flows.runtime.server_watch import mark_run_failed

        try:
            yield
        except BaseException as exc:
            lost = self.lost(exc)
            if lost is None:
                raise
            self.disarm()
            mark_run_failed(self.db_url, lost)
            raise PrefectServerError(f"{lost}; {self.host.resume}") from None
        finally:
            self.disarm()

    def find(self) -> PrefectServer:
        """The server (`use_prefect_server`: Prefect's settings, started if it is this home's background
        server and down); in a thread, beside the run's first calls."""
        from judgebench_flows.runtime.prefect_server import use_prefect_server

        return use_prefect_server()

    def watched(self, server: PrefectServer) -> None:
        """Watch `server` from now on (in the thread the run's loop runs in: the command's main thread)."""
        from judgebench_flows.runtime.server_watch import ServerWatch

        self.watch = ServerWatch(
            server.api_url,
            server.pid,
            self.db_url,
            self.lost_seconds,
            cancel=self.host.cancel_run,
        ).start()

    def lost(self, exc: BaseException) -> str | None:
        """Why the run ended with `exc` if its server is gone (its watch said, or it does not answer now)."""
        watch = self.watch
        if watch is None:
            return None
        return watch.lost or (None if not isinstance(exc, Exception) or isinstance(exc, UserError) else watch.gone())

    def disarm(self) -> None:
        if self.watch is not None:
            self.watch.disarm()


FLOW_MODULE = "judgebench_flows.flows.judgebench_flow"


async def held_in_shard_cache(spec: JudgeSpec, shards: list[Shard]) -> bool:
    """`tasks.shard_cache.shard_results_held` for a head start, Prefect's results imported in a thread."""
    shard_cache = await asyncio.to_thread(importlib.import_module, "judgebench_flows.tasks.shard_cache")
    settings = spec.endpoint
    return await shard_cache.shard_results_held(spec, shards, settings.cache, settings.cache_max_age)


def _import_all(modules: tuple[str, ...]) -> None:
    for name in modules:
        importlib.import_module(name)


async def flow_started_early(config: RunConfig, run: RunContext, served: Served) -> dict[str, Any]:
    """The JudgeBench flow, with the run's first pairs judged while Prefect and the flow are imported and
    the flow run is created (`judging.head_start`): the imports run in threads, so this loop sends and
    receives the first calls meanwhile, and the flow's shards take them over."""
    from judgebench_flows.judging.head_start import head_start_of, prepare_head_start
    from judgebench_flows.runtime.prefect_server import pointed_at

    early = await prepare_head_start(config, run)
    try:
        server = await asyncio.to_thread(served.find)
        served.watched(server)
        with pointed_at(server):
            if early is not None:
                await early.start(run, held_in_shard_cache)
            module = await asyncio.to_thread(importlib.import_module, FLOW_MODULE)
            after = asyncio.ensure_future(asyncio.to_thread(_import_all, served.host.imports_after))
            final = await module.judgebench_flow(config)
        await after
        return final
    except BaseException as exc:
        if (early := head_start_of(run)) is not None:  # stopped before its flow adopted it: recorded here
            await early.stopped(exc)
        raise
    finally:
        if (early := head_start_of(run)) is not None:  # what no shard took is cancelled, what was answered is cached
            await early.close(run)


class FlowThread:
    """The flow in a worker thread with its own event loop while the calling thread waits, and stops.

    A notebook runs its cells inside its own event loop, where the flow cannot start another; a script's
    caller waits the same way, so both stop alike. Ctrl-C in a script and a notebook's stop button both
    raise KeyboardInterrupt in the waiting (main) thread: the flow's task is then cancelled in its loop,
    which cancels the calls in flight at once; the run's shutdown records it `interrupted` and writes the
    answers received to the call cache, and the caller gets `RunInterrupted` with `interrupted` as its
    message once the run has stopped, or after `grace` seconds (a second Ctrl-C: at once). A cancel from
    another thread (`cancel`: the server watch) is waited for `CANCEL_GRACE_SECONDS` at most.
    """

    def __init__(self, interrupted: str, grace: float = INTERRUPT_GRACE_SECONDS) -> None:
        self.interrupted, self.grace = interrupted, grace
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[Any] | None = None
        self._cancelled_at: float | None = None

    def cancel(self) -> None:
        """Cancel the flow's task (from any thread); a flow not started yet will not start."""
        with self._lock:
            if self._cancelled_at is None:
                self._cancelled_at = time.monotonic()
            loop, task = self._loop, self._task
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # its loop has closed: the flow is over
                loop.call_soon_threadsafe(task.cancel)

    def __call__(self, flow: Callable[[], Coroutine[Any, Any, T]]) -> T:
        outcome: list[tuple[bool, Any]] = []
        done = threading.Event()

        async def main() -> T:
            with self._lock:
                self._loop, self._task = asyncio.get_running_loop(), asyncio.current_task()
                if self._cancelled_at is not None:
                    raise asyncio.CancelledError()
            return await flow()

        def work() -> None:
            try:
                outcome.append((True, asyncio.run(main())))
            except BaseException as exc:  # handed to the waiting thread, which raises it
                outcome.append((False, exc))
            finally:
                done.set()

        # The caller's context (the run's settings, credentials, Prefect server) goes with the flow.
        context = contextvars.copy_context()
        threading.Thread(target=context.run, args=(work,), name="judgebench-run", daemon=True).start()
        try:
            self._wait(done)
        except KeyboardInterrupt:
            self.cancel()
            stopped = self._wait_interrupted(done)
            raise RunInterrupted(
                self.interrupted if stopped else f"{self.interrupted} (the run is still stopping in the background)"
            ) from None
        ok, value = outcome[0]
        if not ok:
            raise value
        return value

    def _wait(self, done: threading.Event) -> None:
        """Until the flow ends; KeyboardInterrupt (or a stop request, `stop_requested`) ends the wait."""
        stop = stop_requested.get()
        while not done.wait(POLL_SECONDS):
            if stop is not None and stop.is_set():
                raise KeyboardInterrupt
            with self._lock:
                since = self._cancelled_at
            if since is not None and time.monotonic() - since > CANCEL_GRACE_SECONDS:
                raise TimeoutError(f"the run did not stop within {CANCEL_GRACE_SECONDS:g} s of its cancellation")

    def _wait_interrupted(self, done: threading.Event) -> bool:
        """Whether the cancelled flow stopped within the grace; a second Ctrl-C stops waiting."""
        try:
            return done.wait(self.grace)
        except KeyboardInterrupt:
            return done.is_set()


__all__ = [
    "FlowThread",
    "RunHost",
    "RunInterrupted",
    "judge_run",
    "watched_run",
    "stop_requested",
]

"""`RunContext`: the state of one run (or of one night's runs side by side), created by whoever starts it.

It is made of parts by concern, each a small dataclass with its own methods: `RunCalls` (`run.calls`: what
the run's calls share, `calls.state.CallState`'s learned request rules, rejections, limits per endpoint and
Vertex tokens, and the judge and caller per spec and event loop, `Runtime`), `RunProgress` (`run.progress`:
the hooks a console registers), `NightShare` (`run.night`: a night's budget, what its cells make once, a
cell's callbacks into the night's schedule) and `core.run_setup.RunSetUp` (`run.setup`: what whoever started
the run did for it once, log redaction and the retirement notice, so the flow does only the rest). The flow
(flows/judgebench_flow.py) uses the one in force (`current_run`: the CLI's, which carries its progress bar,
or the nightly flow's, which its cells share) or makes its own; the shard task finds it the same way, in
process. On a Dask worker the run's context lives on the worker (a worker plugin the flow registers for the
run, `WORKER_PLUGIN`), shared by the worker's shard tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import weakref
from collections.abc import Awaitable, Callable, Hashable, Iterator
from typing import Any, TypeVar

from judgebench_flows.calls.caller import CallStats, ChatCaller
from judgebench_flows.calls.heard import ShardHeard
from judgebench_flows.calls.state import CallState
from judgebench_flows.core.pricing import NightSpend
from judgebench_flows.core.records import JudgmentRecord
from judgebench_flows.core.run_setup import RunSetUp
from judgebench_flows.data.night_budget import NightBudget
from judgebench_flows.judges.procedure import Judge

ProgressHook = Callable[[int, int, int], None]
"""(shard index, judgments just done, judgments the shard plans): counted once per judgment of a shard,
however often the shard is retried; `RunProgress.settle` then sets a finished shard's exact count."""
SettleHook = Callable[[int, int], None]
TotalHook = Callable[[int], None]
LinkHook = Callable[[str], None]
"""(a line naming the flow run and its page in Prefect's UI), said once when the flow run starts."""
# The name of the worker plugin holding a run's context on its Dask workers (flows/dask_shards.py).
WORKER_PLUGIN = "judgebench-run-{run_id}"


T = TypeVar("T")


@dataclasses.dataclass(eq=False)
class Shared:
    """Something the night's cells make once and share (`NightShare.once`): set when made, or when its
    maker failed (`made` False: the next to need it makes it itself)."""

    done: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    made: bool = False
    value: Any = None


@dataclasses.dataclass(eq=False)
class EarlyJudgment:
    """One pair judged ahead of its shard (`head_start`), and what its calls heard (served model, cache
    sources), which the shard that takes it counts as its own."""

    task: asyncio.Task[list[JudgmentRecord]]
    heard: ShardHeard


@dataclasses.dataclass
class Runtime:
    judge: Judge
    caller: ChatCaller
    # Pairs judged ahead of their shards while Prefect started (`head_start`), by pair id: the shard that
    # reaches one awaits it instead of judging it.
    early: dict[str, EarlyJudgment] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(eq=False)
class RunCalls:
    """What the run's calls share: the endpoint state (`calls.state.CallState`: learned request rules,
    rejections, limits per endpoint, Vertex tokens), the judges and callers built for it, and what its
    shards on Dask workers heard. A night's cells share one (`RunContext.for_cell`)."""

    state: CallState = dataclasses.field(default_factory=CallState)
    # The Prefect global limits (concurrency, rpm) the run takes its slots from instead of its own
    # endpoint-and-model ones (`global_limits.limit_names`): a pool's cell holds its endpoint's, shared
    # by every cell on it on any worker. None: its own.
    held_limits: tuple[str, str] | None = None
    # The judges built for the run's specs (`shards.judge_of`), each once.
    judges: dict[str, Judge] = dataclasses.field(default_factory=dict)
    # Per event loop (an endpoint client and a semaphore belong to the loop that made them), per spec.
    runtimes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Runtime]] = dataclasses.field(
        default_factory=weakref.WeakKeyDictionary
    )
    # What the endpoint said to shards judged on Dask workers, per run id (their clients count it there).
    heard_on_workers: dict[str, CallStats] = dataclasses.field(default_factory=dict)

    async def close_runtimes(self, spec_key: str | None = None) -> CallStats:
        """Close this loop's endpoint clients (their connections belong to the loop that is about to end),
        or only those of one spec (`spec_key`: a run ending while others go on in the same loop); returns
        what they sent, summed."""
        total = CallStats()
        loop = asyncio.get_running_loop()
        if spec_key is None:
            closing = list(self.runtimes.pop(loop, {}).values())
        else:
            runtime = self.runtimes.get(loop, {}).pop(spec_key, None)
            closing = [runtime] if runtime is not None else []
        for runtime in closing:
            await runtime.caller.aclose()
            total.add(runtime.caller.stats)
        return total


@dataclasses.dataclass(eq=False)
class RunProgress:
    """Who follows the run's progress (a door's progress bar, a notebook's): hooks it registers, told as
    judgments are made, shards settle, the total is known and the flow run's page is named."""

    tick_hooks: list[ProgressHook] = dataclasses.field(default_factory=list)
    settle_hooks: list[SettleHook] = dataclasses.field(default_factory=list)
    total_hooks: list[TotalHook] = dataclasses.field(default_factory=list)
    link_hooks: list[LinkHook] = dataclasses.field(default_factory=list)

    def add_hook(self, tick: ProgressHook, settle: SettleHook | None = None) -> None:
        """`tick` told of each judgment of a shard, `settle` of a finished shard's exact count."""
        self.tick_hooks.append(tick)
        if settle is not None:
            self.settle_hooks.append(settle)

    def add_total_hook(self, hook: TotalHook) -> None:
        """Called once with the number of judgments a run will make (known only after the data is read)."""
        self.total_hooks.append(hook)

    def add_link_hook(self, hook: LinkHook) -> None:
        """Called with the line that names the flow run and links its page in Prefect's UI."""
        self.link_hooks.append(hook)

    def announce_link(self, line: str) -> None:
        for hook in self.link_hooks:
            hook(line)

    def settle(self, shard_index: int, judgments: int) -> None:
        """A shard is finished with this many judgments (judged here, on a Dask worker, or from Prefect's
        cache, where no judgment ticked): the progress bar counts exactly these for it."""
        for hook in self.settle_hooks:
            hook(shard_index, judgments)

    def announce_total(self, judgments: int) -> None:
        for hook in self.total_hooks:
            hook(judgments)


@dataclasses.dataclass(eq=False)
class NightShare:
    """A run's share of its night: the night's budget, what the night's cells make once and share, and
    the cell's own callbacks into the night's schedule. A run on its own has an empty one."""

    # A night's budget (--max-cost of the matrix), which every cell's spend counts toward; None: no such.
    spend: NightSpend | None = None
    # A pool night's budget in the results database (a cell run's): the run reserves its worst case there
    # before its first call and counts its spend against that reservation (`spend`).
    budget: NightBudget | None = None
    # Told when the run starts judging, its data read (`RunContext.announce_total`): the nightly flow starts
    # its synchronous cells once its batch cells are that far, so their batches go out first.
    on_judging: Callable[[], None] | None = None
    # Told when the run's calls are done (before it aggregates and publishes): a night's cell gives its
    # place to the next cell while it writes its results.
    on_judged: Callable[[], None] | None = None
    # Awaited just before the run's first call: a night's cell, started ahead, waits there for its place
    # among the cells in flight (flows/cell_schedule.py).
    on_calling: Callable[[], Awaitable[None]] | None = None
    # What the night's cells share, made once (`once`): a night's clone check and pair index per data file.
    shared: dict[Hashable, Shared] = dataclasses.field(default_factory=dict)

    def judging(self) -> None:
        """The run starts judging (its data read): whoever waits for that (`on_judging`) hears it."""
        if self.on_judging is not None:
            self.on_judging()

    async def calling(self) -> None:
        """The run is about to send its first call: whoever gives it room to (`on_calling`) is waited for."""
        if self.on_calling is not None:
            await self.on_calling()

    def judged(self) -> None:
        """The run's calls are done: whoever waits for that (`on_judged`) hears it."""
        if self.on_judged is not None:
            self.on_judged()

    async def once(self, key: Hashable, make: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
        """What `make` makes, made once for `key` in this night (its cells side by side share one clone
        check and one pair index of a data file): the value, and whether it came from another cell. A
        maker that fails shares nothing: the next cell that needs it makes it itself."""
        shared = self.shared.get(key)
        if shared is not None:
            await shared.done.wait()
            if shared.made:
                return shared.value, True
        shared = self.shared[key] = Shared()
        try:
            shared.value = await make()
            shared.made = True
            return shared.value, False
        finally:
            if not shared.made:
                del self.shared[key]
            shared.done.set()

    def for_cell(
        self,
        on_judging: Callable[[], None] | None = None,
        on_judged: Callable[[], None] | None = None,
        on_calling: Callable[[], Awaitable[None]] | None = None,
    ) -> NightShare:
        """The night's share as one of its cells has it: the night's budgets and shared data, the cell's own
        `on_judging`, `on_judged` and `on_calling`."""
        return dataclasses.replace(self, on_judging=on_judging, on_judged=on_judged, on_calling=on_calling)


@dataclasses.dataclass(eq=False)
class RunContext:
    """One run's state (see the module docstring), in parts by concern; each run started afresh gets a new
    one. A function that needs one part takes that part."""

    calls: RunCalls = dataclasses.field(default_factory=RunCalls)
    progress: RunProgress = dataclasses.field(default_factory=RunProgress)
    night: NightShare = dataclasses.field(default_factory=NightShare)
    # What whoever started the run did for it once (`core.run_setup`): the flow does only the rest.
    setup: RunSetUp = dataclasses.field(default_factory=RunSetUp)

    def announce_total(self, judgments: int) -> None:
        """The run's judgments are counted (its data read): its total hooks hear the number, and whoever
        waits for it to judge (`NightShare.on_judging`) hears that it does."""
        self.progress.announce_total(judgments)
        self.night.judging()

    def for_cell(
        self,
        on_judging: Callable[[], None] | None = None,
        on_judged: Callable[[], None] | None = None,
        on_calling: Callable[[], Awaitable[None]] | None = None,
    ) -> RunContext:
        """A night's context as one of its cells runs in it: the night's calls, limits, budget, hooks,
        judges, shared data and set-up (each model's retirement notice said once for the night), its own
        `on_judging`, `on_judged` and `on_calling`."""
        return dataclasses.replace(self, night=self.night.for_cell(on_judging, on_judged, on_calling))


current_run: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar("current_run", default=None)
"""The run in force: set by whoever starts a run (`running`), read by the flow and its shard tasks."""


@contextlib.contextmanager
def running(run: RunContext | None = None) -> Iterator[RunContext]:
    """`run` in force for the code inside; without one, the run already in force (the CLI's, a night's),
    else a new one: a run started afresh starts clean."""
    run = run or current_run.get() or RunContext()
    token = current_run.set(run)
    try:
        yield run
    finally:
        current_run.reset(token)


def run_here(run_id: str | None = None) -> RunContext:
    """The context of the run this code judges for: the one in force, else on a Dask worker the run's
    (`WORKER_PLUGIN`), else a new one (a shard judged outside any run)."""
    run = current_run.get()
    if run is not None:
        return run
    on_worker = _worker_run(run_id) if run_id else None
    return on_worker if on_worker is not None else RunContext()


def _worker_run(run_id: str) -> RunContext | None:
    """The run's context on this Dask worker, if this is one and the flow registered it there."""
    try:
        from distributed import get_worker

        worker: Any = get_worker()
    except (ImportError, ValueError):  # no Dask here, or not in a worker's task
        return None
    plugin = worker.plugins.get(WORKER_PLUGIN.format(run_id=run_id))
    run = getattr(plugin, "run", None)
    return run if isinstance(run, RunContext) else None

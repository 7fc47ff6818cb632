"""Progress counts judgments done out of judgments planned; unexpected errors exit 3 with one line."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from judgebench_flows.calls.retry import RetryPolicy
from judgebench_flows.cli import main as cli
from judgebench_flows.core.records import Pair
from judgebench_flows.judges import get_judge
from judgebench_flows.judging.run_context import RunContext, Runtime
from judgebench_flows.judging.shards import judge_pairs
from judgebench_flows.runtime.progress import JudgmentCounter
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._helpers import chat_caller


@pytest.fixture(autouse=True)
def quiet_variables_put_back() -> Iterator[None]:
    """`cli.main` sets Prefect's quiet logging variables for its process (`runtime.quiet.quiet_prefect`: a
    command's process ends with it); called here in the test's process, they are put back after each test."""
    from judgebench_flows.runtime.quiet import QUIET_ENV

    before = {name: os.environ.get(name) for name in QUIET_ENV}
    yield
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


PAIRS = [
    Pair(
        pair_id=f"p{i}",
        source="mmlu-pro-math",
        question=f"{i}+{i}?",
        response_A=str(2 * i),
        response_B="x",
        label="A>B",
    )
    for i in range(5)
]


def test_counter_counts_each_judgment_once_across_retries_and_cached_shards() -> None:
    shown: list[int] = []
    counter = JudgmentCounter(shown.append)
    for _ in range(10):  # shard 0: 10 judgments, some failed
        counter.advance(0, 1, 10)
    for _ in range(10):  # ...and its retry judges them all again
        counter.advance(0, 1, 10)
    assert counter.done == 10
    counter.settle(0, 10)
    counter.advance(0, 1, 10)  # a late tick after the shard settled changes nothing
    counter.settle(1, 10)  # shard 1 served whole from Prefect's cache: no tick at all
    assert counter.done == 20 and shown[-1] == 20


def test_judging_ticks_per_shard_and_a_failed_shard_retried_stays_within_its_plan() -> None:
    shown: list[int] = []
    counter = JudgmentCounter(shown.append)
    run = RunContext()
    run.progress.add_hook(counter.advance, counter.settle)
    with FakeOpenAIServer("I cannot decide", fail_first=1, fail_kind="500") as server:

        async def go():
            caller = chat_caller(
                base_url=server.base_url,
                model="m",
                api_key="sk-test",
                retry=RetryPolicy(max_retries=0, initial_wait=0.01, max_wait=0.01),
            )
            runtime = Runtime(get_judge("vanilla"), caller)
            try:
                hooks = run.progress.tick_hooks
                first = await judge_pairs(PAIRS, runtime, (0, 1), 3, hooks)  # every call fails (500)
                again = await judge_pairs(PAIRS, runtime, (0, 1), 3, hooks)  # the shard's retry
                return first, again
            finally:
                await caller.aclose()

        first, again = asyncio.run(go())
        sent = server.requests
    # The retry finds each call's budget spent (--max-retries 0: one attempt): failed again, nothing sent.
    assert {r.status for r in first} == {"failed"} and {r.status for r in again} == {"failed"}
    assert sent == len(first)
    assert counter.done == 10, "a retried shard's judgments are not counted twice"
    run.progress.settle(3, len(again))
    run.progress.settle(4, 10)  # a cached shard
    assert counter.done == 20


def test_unexpected_error_exits_3_with_one_line_and_the_traceback_in_a_log(monkeypatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setenv("JUDGEBENCH_CACHE_DIR", str(tmp_path))

    def broken(args):
        raise KeyError("surprise")

    monkeypatch.setattr(cli, "command_history", broken)
    assert cli.main(["history"]) == cli.EXIT_BUG == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("unexpected error: KeyError: 'surprise'") and "Traceback" not in err
    assert "Traceback" in (tmp_path / "last-error.log").read_text()


def _known_endings() -> list[tuple[Exception, int, str]]:
    """Each known ending, its exit code and its line exactly as the command printed them before the
    mapping moved into the error classes (README, Exit codes)."""
    from judgebench_flows.core.errors import (
        BatchRefused,
        EndpointUnreachable,
        FatalEndpointError,
        InfrastructureLost,
        PathNotWritable,
        RunFailed,
        UserError,
    )
    from judgebench_flows.core.pricing import BudgetReached
    from judgebench_flows.data.outage import DatabaseLost
    from judgebench_flows.runtime.prefect_server import PrefectServerError

    return [
        (UserError("--x: bad"), 2, "error: --x: bad"),
        (FatalEndpointError("the key was refused"), 2, "error: the key was refused"),
        (RunFailed("8 of 10 failed"), 4, "run failed: 8 of 10 failed"),
        (PrefectServerError("the server went"), 5, "error: the server went"),
        (InfrastructureLost("gone"), 5, "error: gone; run the same command again to resume"),
        (DatabaseLost("db gone"), 5, "error: db gone; run the same command again to resume"),
        (BudgetReached("spent $1.00", spent=1.0), 6, "stopped: spent $1.00"),
        (BatchRefused("refused"), 7, "error: refused"),
        (BatchRefused("unknown model", our_input=True), 2, "error: unknown model"),
        (
            PathNotWritable("--output-dir", "/x", "No space left on device"),
            8,
            "error: --output-dir: cannot write to '/x' (No space left on device); answers received are kept: "
            "free space and run the same command again",
        ),
        (EndpointUnreachable("no answer"), 9, "error: no answer"),
    ]


@pytest.mark.parametrize("exc, code, line", _known_endings(), ids=lambda value: type(value).__name__)
def test_each_known_ending_carries_its_exit_code_and_line(exc, code, line, monkeypatch, capsys) -> None:
    import pickle

    def ends(args):
        raise exc

    monkeypatch.setattr(cli, "command_history", ends)
    monkeypatch.setattr(cli, "for_terminal", lambda text: text)  # unwrapped, as on a pipe
    assert cli.main(["history"]) == code
    assert capsys.readouterr().err == line + "\n"
    again = pickle.loads(pickle.dumps(exc))  # as Prefect and Dask carry it across processes
    assert (again.exit_code, again.line()) == (code, line)


def test_run_failed_is_exit_4_and_documented() -> None:
    assert cli.EXIT_RUN_FAILED == 4 and "4 the run measured too little" in cli.__doc__
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert "| 4 |" in readme and "--max-failed-fraction" in readme  # the exit-code table


@pytest.mark.parametrize("option, value", [("--reasoning-effort", "extreme"), ("--request-style", "magic")])
def test_request_options_are_checked_before_anything_runs(option: str, value: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run", "--model", "m", option, value])
    assert exit_.value.code == 2 and option in capsys.readouterr().err


def test_last_error_log_goes_to_the_runs_cache_dir(monkeypatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setenv("JUDGEBENCH_CACHE_DIR", str(tmp_path / "default"))

    def broken(args):
        raise KeyError("surprise")

    monkeypatch.setattr(cli, "command_run", broken)
    assert cli.main(["run", "--model", "m", "--cache-dir", str(tmp_path / "mine")]) == cli.EXIT_BUG
    assert str(tmp_path / "mine" / "last-error.log") in capsys.readouterr().err
    assert "Traceback" in (tmp_path / "mine" / "last-error.log").read_text()
    assert not (tmp_path / "default").exists()


def test_the_commands_sigterm_handler_lasts_as_long_as_the_command(monkeypatch, capsys) -> None:
    """main() in a long-lived process (a test, a notebook) puts the SIGTERM handler it replaced back when the
    command ends, and a SIGTERM during the command still ends it with 143 and one line."""
    import os
    import signal

    def mine(signum, frame):
        raise AssertionError("the process's own handler ran during the command")

    def stopped(args):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("SIGTERM did not end the command")

    previous = signal.signal(signal.SIGTERM, mine)
    try:
        monkeypatch.setattr(cli, "command_history", stopped)
        for _ in range(2):  # the second command's SIGTERM is its own, not taken for the first's
            assert cli.main(["history"]) == cli.EXIT_TERMINATED == 143
            assert capsys.readouterr().err.startswith("stopped by SIGTERM")
            assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, previous)

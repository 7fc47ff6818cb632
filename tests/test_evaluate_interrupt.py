"""Ctrl-C in a script and a notebook's stop button stop `evaluate()` within seconds, keep what was paid
and say how to resume; the same call again sends only the calls never answered.

Before: a run of 80 calls (2 in flight, 2 s each) interrupted in a Jupyter kernel at 6.6 s went on for
78 s and paid every call (the cell waited on the flow's worker thread, which nothing stopped).

Real parts: `evaluate()` in a subprocess against the session's Prefect server and the bundled
OpenAI-compatible endpoint (in this process, each answer 2 s late), a real SIGINT to the subprocess. The
"kernel" mode calls evaluate() inside a running event loop whose SIGINT raises KeyboardInterrupt in the
loop's thread, as an IPython kernel's interrupt does; with nbclient and ipykernel installed a real kernel
is interrupted too (`KernelManager.interrupt_kernel`, what the stop button sends).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._runs import GPT4O_PATH
from tests.conftest import CANARY_KEY, requires_shared

VERDICT = "My final verdict is [[A>B]]"
PAIRS = 20  # 40 calls
CONCURRENCY = 2
LATENCY = 2.0  # seconds each answer takes: the run would take 40 s
ANSWERED_FIRST = 4  # answered before the interrupt (2 more in flight)
START_SECONDS = 300  # a subprocess importing Prefect on a loaded 2-core machine, the data read
ENDS_WITHIN = 10.0  # from SIGINT to the process's exit (the in-flight calls cancelled, the run recorded)

SCRIPT = """
import asyncio, json, sys
import judgebench_flows

OPTIONS = json.loads(sys.argv[2])


def call():
    return judgebench_flows.evaluate(**OPTIONS)


async def cell():  # as a kernel runs a cell: inside its event loop
    return call()


try:
    if sys.argv[1] == "script":
        evaluation = call()
    elif sys.argv[1] == "await":  # asyncio.run's Ctrl-C cancels the awaiting task, which stops the run
        evaluation = asyncio.run(judgebench_flows.evaluate_async(**OPTIONS))
    else:  # run_until_complete keeps Python's SIGINT handler: KeyboardInterrupt here, as in a kernel
        evaluation = asyncio.new_event_loop().run_until_complete(cell())
except KeyboardInterrupt as exc:
    print(json.dumps({"raised": type(exc).__name__, "message": str(exc)}))
    sys.exit(130)
print(json.dumps({"judgments": evaluation.usage.judgments, "accuracy": evaluation.overall_accuracy.accuracy}))
"""


def rows(db: Path, query: str) -> list[tuple]:
    with sqlite3.connect(db) as connection:
        return connection.execute(query).fetchall()


def options(base_url: str, tmp_path: Path, data: Path) -> dict[str, object]:
    return {
        "model": "judge",
        "base_url": base_url,
        "data_path": str(data),
        "concurrency": CONCURRENCY,
        "db_url": f"sqlite:///{tmp_path / 'r.db'}",
        "result_path": str(tmp_path / "r.json"),
        "output_dir": str(tmp_path / "r"),
        "report": False,
    }


def start(tmp_path: Path, mode: str, opts: dict[str, object]) -> subprocess.Popen[str]:
    """The script in a subprocess, its output in files (a pipe nobody reads while it runs could fill)."""
    script = tmp_path / "evaluate_interrupted.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = {**os.environ, "OPENAI_API_KEY": CANARY_KEY, "JUDGEBENCH_CACHE_DIR": str(tmp_path / "cache")}
    with (tmp_path / "out.txt").open("w") as out, (tmp_path / "err.txt").open("w") as err:
        return subprocess.Popen(
            [sys.executable, str(script), mode, json.dumps(opts)],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=err,
            preexec_fn=_as_from_a_shell,
        )


def _as_from_a_shell() -> None:
    """The script starts with Ctrl-C's default action, as from a shell: an ignored SIGINT is inherited
    across exec and Python then keeps ignoring it, so a test process that ignores it (set by some library
    earlier in the session) would make the script deaf to the very signal under test."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def said(tmp_path: Path) -> tuple[str, str]:
    """What the last subprocess wrote: standard output, standard error."""
    return (tmp_path / "out.txt").read_text(), (tmp_path / "err.txt").read_text()


def wait_for_answers(endpoint: FakeOpenAIServer, run: subprocess.Popen[str], n: int, tmp_path: Path) -> None:
    deadline = time.monotonic() + START_SECONDS
    while endpoint.snapshot()["answered"] < n:
        assert run.poll() is None, said(tmp_path)[1][-3000:]
        assert time.monotonic() < deadline, "the run never started judging"
        time.sleep(0.05)


def wait_until_received(endpoint: FakeOpenAIServer, db: Path, tmp_path: Path) -> None:
    """Until the run holds in its call cache every answer the endpoint has sent: an answer the endpoint
    sent is not yet one the run received (a loaded machine reads it later), and only those received can
    be kept at Ctrl-C. The next answers come `LATENCY` later, so the interrupt falls between them."""
    deadline = time.monotonic() + 60
    while True:
        try:
            held = rows(db, "select count(*) from call_cache")[0][0]
        except sqlite3.OperationalError:  # not created yet, or locked by the run's write
            held = 0
        if held >= endpoint.snapshot()["answered"]:
            return
        assert time.monotonic() < deadline, f"the run never stored the answers it was sent ({held} stored)"
        time.sleep(0.05)


def _signal_masks(pid: int) -> str:
    """The process's ignored and caught signals as /proc shows them (bit 2 of SigIgn: SIGINT ignored)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return "no /proc status"
    return ", ".join(line for line in lines if line.startswith(("SigIgn", "SigCgt")))


def last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


@requires_shared
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["script", "kernel", "await"])
def test_ctrl_c_stops_evaluate_within_seconds_and_the_same_call_resumes(tmp_path, prefect_server, mode) -> None:
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(GPT4O_PATH.read_text().splitlines(keepends=True)[:PAIRS]))
    with FakeOpenAIServer(VERDICT, latency=LATENCY) as endpoint:
        opts = options(endpoint.base_url, tmp_path, data)
        port = endpoint.port
        run = start(tmp_path, mode, opts)
        try:
            wait_for_answers(endpoint, run, ANSWERED_FIRST, tmp_path)
            wait_until_received(endpoint, tmp_path / "r.db", tmp_path)
            answered_before = endpoint.answered_keys()
            interrupted = time.monotonic()
            os.kill(run.pid, signal.SIGINT)
            try:
                run.wait(timeout=30)
            except subprocess.TimeoutExpired:
                masks = _signal_masks(run.pid)
                run.kill()
                run.wait()
                pytest.fail(f"evaluate() did not end within 30 s of Ctrl-C ({masks}): {said(tmp_path)[1][-3000:]}")
            took = time.monotonic() - interrupted
            stdout, stderr = said(tmp_path)
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
        time.sleep(LATENCY + 0.5)  # anything still sent would have been answered by now
        sent = endpoint.snapshot()["requests"]
    print(f"{mode}: stopped {took:.1f} s after SIGINT; {sent} of {2 * PAIRS} calls sent")
    assert run.returncode == 130, stderr[-3000:]
    assert took < ENDS_WITHIN, f"evaluate() took {took:.1f} s to stop after Ctrl-C"
    outcome = last_json(stdout)
    if mode == "await":  # the awaiting task is cancelled, as asyncio does it: the caller's KeyboardInterrupt
        assert outcome["raised"] == "KeyboardInterrupt", outcome
    else:
        assert outcome["raised"] == "RunInterrupted", outcome
        assert "call evaluate() again with the same arguments to resume" in outcome["message"], outcome
    assert "Traceback" not in stderr, stderr[-3000:]
    # The calls in flight were cancelled: the endpoint saw those answered, those in flight, and no more.
    assert sent <= len(answered_before) + 2 * CONCURRENCY, (sent, len(answered_before))
    assert sent < 2 * PAIRS / 2
    db = tmp_path / "r.db"
    assert [status for (status,) in rows(db, "select status from runs")] == ["interrupted"]
    cached = rows(db, "select count(*) from call_cache")[0][0]
    assert cached >= len(answered_before) >= ANSWERED_FIRST, (cached, len(answered_before))

    with FakeOpenAIServer(VERDICT, port=port) as again:  # the same endpoint, answering at once
        run = start(tmp_path, "script", opts)
        run.wait(timeout=START_SECONDS)
        stdout, stderr = said(tmp_path)
        assert run.returncode == 0, stderr[-3000:]
        assert last_json(stdout)["judgments"] == 2 * PAIRS
        paid_again = set(again.answered_keys()) & set(answered_before)
        assert not paid_again, f"{len(paid_again)} calls answered before Ctrl-C were sent again"
        assert again.snapshot()["requests"] == 2 * PAIRS - cached


@requires_shared
@pytest.mark.slow
def test_a_kernels_stop_button_stops_evaluate_and_the_next_cell_resumes(tmp_path, prefect_server) -> None:
    """A real IPython kernel (ipykernel, when installed): a cell calling evaluate(), the kernel interrupted
    as Jupyter's stop button does (`interrupt_kernel`: SIGINT), then the same call in the next cell."""
    pytest.importorskip("ipykernel", reason="no ipykernel: the subprocess tests above stand in for a kernel")
    manager = pytest.importorskip("jupyter_client.manager", reason="no jupyter_client")
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(GPT4O_PATH.read_text().splitlines(keepends=True)[:PAIRS]))
    env = {**os.environ, "OPENAI_API_KEY": CANARY_KEY, "JUDGEBENCH_CACHE_DIR": str(tmp_path / "cache")}
    with FakeOpenAIServer(VERDICT, latency=LATENCY) as endpoint:
        opts = options(endpoint.base_url, tmp_path, data)
        km, kc = manager.start_new_kernel(
            kernel_name="python3", env=env, cwd=str(tmp_path), startup_timeout=START_SECONDS
        )
        try:
            kc.execute(f"import json, judgebench_flows\nOPTIONS = json.loads({json.dumps(json.dumps(opts))})")
            assert kc.get_shell_msg(timeout=START_SECONDS)["content"]["status"] == "ok"
            kc.execute("evaluation = judgebench_flows.evaluate(**OPTIONS)")
            deadline = time.monotonic() + START_SECONDS
            while endpoint.snapshot()["answered"] < ANSWERED_FIRST:
                assert time.monotonic() < deadline, "the cell never started judging"
                time.sleep(0.05)
            answered_before = endpoint.answered_keys()
            interrupted = time.monotonic()
            km.interrupt_kernel()  # what the stop button sends
            reply = kc.get_shell_msg(timeout=30)["content"]
            took = time.monotonic() - interrupted
            time.sleep(LATENCY + 0.5)
            sent = endpoint.snapshot()["requests"]
            assert reply["status"] == "error" and reply["ename"] == "RunInterrupted", reply
            assert "call evaluate() again with the same arguments to resume" in reply["evalue"], reply
            assert took < ENDS_WITHIN, f"the cell took {took:.1f} s to return after the interrupt"
            assert sent <= len(answered_before) + 2 * CONCURRENCY, (sent, len(answered_before))
            cached = rows(tmp_path / "r.db", "select count(*) from call_cache")[0][0]
            assert cached >= len(answered_before)

            endpoint.configure(latency=0.0)
            before_again = endpoint.answered_keys()
            kc.execute("evaluation = judgebench_flows.evaluate(**OPTIONS)\nevaluation.usage.judgments")
            reply = kc.get_shell_msg(timeout=START_SECONDS)["content"]
            assert reply["status"] == "ok", reply
            paid = endpoint.answered_keys() - before_again
            assert not set(paid) & set(answered_before), "calls answered before the interrupt were sent again"
            assert endpoint.snapshot()["requests"] - sent == 2 * PAIRS - cached
            print(f"kernel: stopped {took:.1f} s after the interrupt; {sent} of {2 * PAIRS} calls sent; resumed")
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)

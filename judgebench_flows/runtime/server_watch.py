"""End a run whose Prefect server stopped during it: within seconds, with one line and exit 5, not a hang.

With its server gone, a run's judging goes on (task runs report through events, which wait), but every
API call of the flow (artifacts, its final state) is retried by Prefect's client for over a minute each,
and a server that hangs instead of refusing holds each call for minutes. Measured before this watch: a
`kill -9` of the Prefect server mid-run ended the run 70-100 s later with exit 3 and tracebacks, after
judging on to the end (README, Exit codes).

A thread watches the server for as long as the run judges: the process of Prefect's background server
(runtime/prefect_server) and, for any server, whether it answers. A background server whose process ended
is lost at once; a server that has not answered for `--server-lost-timeout` seconds (default
$JUDGEBENCH_SERVER_LOST_TIMEOUT, else 120: a loaded machine's server may be slow, or restarting) is lost
too, and one that answers again within that time lets the run go on (its slots of a global limit are
healed, `global_limits`).

The watch only decides; the main thread ends the run. When the server is lost the thread cancels the run
as a stop request does: SIGTERM to the main thread, which wakes it from any blocking call. The run's own
shutdown path then writes the answers its callers hold to the call cache (the shards' clients are closed
on the way out) and records the run stopped; the run path (runtime/run.py) marks it `failed` with the
reason and the command exits 5 with one line. A re-run of the same command pays only for the calls never
answered. The main thread's wait for that is bounded too: a run still going `CANCEL_GRACE_SECONDS` later
(stuck in a call to the lost server) is woken once more, by SIGALRM, whose handler (in the main thread,
installed by `start`) records the run failed, says the line and ends the process with exit 5.

`evaluate()` runs its flow in a worker thread and must never end the process (a notebook's kernel): its
watch is given `cancel`, which cancels the flow's task in that thread; its wait is bounded by the caller.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from judgebench_flows.core.errors import EXIT_SERVER  # the Prefect server could not start or stopped

LOST_TIMEOUT_ENV = "JUDGEBENCH_SERVER_LOST_TIMEOUT"
DEFAULT_LOST_TIMEOUT = 120.0
POLL_SECONDS = 0.5  # how often the server's process is checked (a /proc read)
HEALTH_EVERY_SECONDS = 5.0  # how often the server is asked whether it answers
HEALTH_TIMEOUT_SECONDS = 10.0
CANCEL_GRACE_SECONDS = 20.0  # after the run is cancelled: its Prefect client may wait on the lost server
# What a proxy in front of a stopped server answers: not the server answering.
GATEWAY_ERRORS = (502, 503, 504)
RESUME = "the calls answered so far are cached: run the same command again to resume"
_ENDED = "the Prefect server stopped during the run (its process ended)"


def seconds_from_env(name: str, default: float) -> float:
    try:
        return max(0.0, float(os.environ.get(name, default)))
    except ValueError:
        return default


def lost_timeout() -> float:
    return seconds_from_env(LOST_TIMEOUT_ENV, DEFAULT_LOST_TIMEOUT)


def alive(pid: int | None) -> bool:
    """Running and not a zombie (a zombie is read through /proc where there is one)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def answers(api_url: str, timeout: float = HEALTH_TIMEOUT_SECONDS) -> bool:
    """Whether the server behind `api_url` answers: any HTTP answer but a gateway's error counts (Prefect
    Cloud answers its `/health` path with 404 or 401, which is still an answer)."""
    try:
        with urllib.request.urlopen(f"{api_url.rstrip('/')}/health", timeout=timeout):
            return True
    except urllib.error.HTTPError as exc:
        return exc.code not in GATEWAY_ERRORS
    except (OSError, ValueError):
        return False


def _where(api_url: str) -> str:
    """scheme://host:port of a server, without any user:password or path."""
    parts = urlsplit(api_url)
    return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")


class ServerWatch:
    """The thread described in the module docstring, and the main thread's alarm that bounds the cancellation."""

    def __init__(
        self,
        api_url: str,
        server_pid: int | None,
        db_url: str | None,
        timeout: float | None = None,
        cancel: Callable[[], None] | None = None,
    ) -> None:
        """`cancel`: how the run is cancelled when its server is lost, for a run whose flow is not in the main
        thread (`evaluate()`, runtime/run.py's `FlowThread`, which bounds its own wait); without it SIGTERM
        to the main thread, and SIGALRM's last bound (the command's)."""
        self.api_url = api_url
        self.cancel = cancel
        self.server_pid = server_pid
        self.db_url = db_url
        self.timeout = lost_timeout() if timeout is None else timeout
        self.lost: str | None = None  # why the run was cancelled (the server is gone), for runtime/run.py
        self._disarmed = threading.Event()
        self._lock = threading.Lock()  # a cancellation is sent only while the run is still watched
        self._alarm_taken = False
        self._previous_alarm: Any = None
        self._thread = threading.Thread(target=self._watch, name="judgebench-server-watch", daemon=True)

    def start(self) -> ServerWatch:
        """Start watching; called from the main thread, which alone can take SIGALRM's handler (elsewhere the
        cancellation has no last bound)."""
        if self.cancel is None and threading.current_thread() is threading.main_thread():
            self._previous_alarm = signal.signal(signal.SIGALRM, self._overdue)
            self._alarm_taken = True
        self._thread.start()
        return self

    def disarm(self) -> None:
        """The run is over (or its server is being stopped on purpose): watch no more."""
        with self._lock:
            self._disarmed.set()
        if self._alarm_taken and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGALRM, signal.SIG_DFL if self._previous_alarm is None else self._previous_alarm)
            self._alarm_taken = False

    def gone(self) -> str | None:
        """Why the server is gone, asked once now (its process ended, or it does not answer); None if it answers."""
        if self.server_pid is not None and not alive(self.server_pid):
            return _ENDED
        if answers(self.api_url, timeout=5.0):
            return None
        return f"{self._name()} stopped answering during the run"

    def _name(self) -> str:
        return f"the Prefect server at {_where(self.api_url)}"

    def _watch(self) -> None:
        last_answer = time.monotonic()
        next_ask = last_answer + HEALTH_EVERY_SECONDS
        while not self._disarmed.wait(POLL_SECONDS):
            if self.server_pid is not None and not alive(self.server_pid):
                self._lost(_ENDED)
                return
            now = time.monotonic()
            if now < next_ask:
                continue
            if answers(self.api_url):
                last_answer = time.monotonic()
            elif time.monotonic() - last_answer > self.timeout:
                self._lost(
                    f"{self._name()} stopped answering during the run "
                    f"(no answer for {self.timeout:g} s, --server-lost-timeout)"
                )
                return
            next_ask = time.monotonic() + HEALTH_EVERY_SECONDS

    def _lost(self, what: str) -> None:
        """Cancel the run; wake the main thread's alarm if it has not ended `CANCEL_GRACE_SECONDS` later."""
        if not self._signal_main(signal.SIGTERM, what):  # the run ended meanwhile: its own outcome stands
            return
        if self.cancel is None and not self._disarmed.wait(CANCEL_GRACE_SECONDS):
            self._signal_main(signal.SIGALRM, what)

    def _signal_main(self, signum: int, what: str) -> bool:
        with self._lock:
            if self._disarmed.is_set():
                return False
            self.lost = what
            if self.cancel is not None:
                self.cancel()
            else:
                signal.pthread_kill(threading.main_thread().ident or 0, signum)
            return True

    def _overdue(self, signum: int, frame: object) -> None:
        """SIGALRM's handler, in the main thread: the cancelled run is stuck in a call to the lost server, so
        the main thread ends the process here, as the run path would have: the run failed, one line, exit 5."""
        what = self.lost
        if what is None or self._disarmed.is_set():  # not ours, or the run ended meanwhile
            return
        self._disarmed.set()
        mark_run_failed(self.db_url, what)
        if sys.stderr.isatty():
            sys.stderr.write("\x1b[?25h\n")  # a progress bar hides the cursor until it stops
        sys.stderr.write(f"error: {what}; {RESUME} (see README, Exit codes)\n")
        sys.stderr.flush()
        os._exit(EXIT_SERVER)


def mark_run_failed(db_url: str | None, message: str) -> None:
    """This process's runs still "running" (or "interrupted" by the cancellation) in the results database
    become `failed` with `message`."""
    if not db_url:
        return
    try:
        from judgebench_flows.data import db

        db.fail_this_process_runs(db.open_database(db_url), message)
    except Exception:  # the next run's `mark_crashed` still catches the row once this process is gone
        return


__all__ = [
    "DEFAULT_LOST_TIMEOUT",
    "LOST_TIMEOUT_ENV",
    "ServerWatch",
    "alive",
    "answers",
    "lost_timeout",
    "seconds_from_env",
]

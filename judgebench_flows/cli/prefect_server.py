"""The Prefect server a run reports to: the one configured, else Prefect's own background server.

With PREFECT_API_URL (or a profile naming a server) that server is used as it is. Without one, a run
uses the background server of its PREFECT_HOME: the one `prefect server start --background` starts,
answering on PREFECT_SERVER_API_HOST:PREFECT_SERVER_API_PORT (127.0.0.1:4200 by default). When none
answers there, the run starts it with exactly that command and waits for it; it then stays up for the
next runs (a second run does not boot a second server) until `prefect server stop`. Prefect owns its
lifecycle: its pid file, its command, its settings. A lock file in PREFECT_HOME keeps two runs starting
at once from starting two servers.

Prefect's ephemeral server (a temporary one per process) was measured too: it boots again on every run,
which on a busy 2-core machine is most of a small run's time (docs/performance.md).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from judgebench_flows.cli.server_watch import alive, answers, seconds_from_env

START_TIMEOUT_ENV = "JUDGEBENCH_SERVER_START_TIMEOUT"
# A first boot with a fresh PREFECT_HOME (creating and migrating Prefect's database) on a loaded small
# machine takes tens of seconds: the ceiling is minutes, and a server process that exits fails at once.
DEFAULT_START_TIMEOUT = 600.0
SERVER_LOG = "prefect-server.log"  # the background server's output in PREFECT_HOME (its log lines, errors)
PID_FILE = "server.pid"  # where `prefect server start --background` records its server (`prefect server stop` reads it)
LOCK_FILE = "judgebench-server.lock"


class PrefectServerError(Exception):
    """The Prefect server could not start, or stopped during the run: not bad input (exit 5, not 2)."""


@dataclass(frozen=True)
class PrefectServer:
    """The server a run reports to, and the process to watch when it is Prefect's background server."""

    api_url: str
    pid: int | None = None  # of the background server; None for a configured server


def use_prefect_server() -> PrefectServer:
    """The configured server, or this PREFECT_HOME's background server (started now if none answers).
    Exported as PREFECT_API_URL for subprocesses; `pointed_at` points this process's Prefect at it."""
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    if settings.api.url:
        return PrefectServer(settings.api.url)
    home = Path(settings.home).expanduser()
    home.mkdir(parents=True, exist_ok=True)
    api_url = f"http://{settings.server.api.host}:{settings.server.api.port}/api"
    with _locked(home / LOCK_FILE):
        if not answers(api_url, timeout=2.0):
            _start_background_server(home, settings.server.api.host, settings.server.api.port)
            _wait_until_answering(api_url, home)
    os.environ["PREFECT_API_URL"] = api_url  # for subprocesses (a local Dask cluster's workers)
    return PrefectServer(api_url, _background_pid(home))


@contextlib.contextmanager
def pointed_at(server: PrefectServer) -> Iterator[None]:
    """This process's Prefect talks to `server` inside the block (Prefect's settings are fixed at import),
    its logging set up as its settings say (cli/quiet.py points them at cli/logging.yml)."""
    from prefect.logging.configuration import ensure_logging_setup
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: server.api_url}):
        ensure_logging_setup()
        yield


def _background_pid(home: Path) -> int | None:
    try:
        return int((home / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def _prefect(*args: str, log: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Prefect's own CLI, with this interpreter and environment. With `log`, its output goes to that file,
    not a pipe: a background server inherits the descriptors and outlives this process. That server runs
    without Prefect's telemetry unless the user set PREFECT_SERVER_ANALYTICS_ENABLED: on a machine that
    cannot resolve Prefect's telemetry host, Prefect 3.9.1's background server exits about 20 s after
    starting (seen on a machine without DNS; runs then ended with exit 5)."""
    env = {**os.environ, "PREFECT_CLI_COLORS": "false", "PREFECT_CLI_WRAP_LINES": "false"}
    if log is not None:
        env.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    command = [sys.executable, "-m", "prefect", *args]
    if log is None:
        return subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env)
    with open(log, "a", encoding="utf-8") as out:
        done = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env)
    said = log.read_text(encoding="utf-8", errors="replace")[-2000:]
    return subprocess.CompletedProcess(done.args, done.returncode, said, "")


def _start_background_server(home: Path, host: str, port: int) -> None:
    """`prefect server start --background`; a pid file left by a server that died is cleared first with
    `prefect server stop` (Prefect refuses to start while it exists)."""
    pid = _background_pid(home)
    if pid is not None and alive(pid):
        return  # booting (started by hand, or by a run killed while waiting): wait for it
    if (home / PID_FILE).exists():
        _prefect("server", "stop")
    done = _prefect("server", "start", "--background", "--host", host, "--port", str(port), log=home / SERVER_LOG)
    if done.returncode != 0:
        said = " ".join((done.stdout + done.stderr).split())[-300:]
        raise PrefectServerError(f"`prefect server start --background` failed: {said}; {ADVICE}")


def _wait_until_answering(api_url: str, home: Path) -> None:
    ceiling = seconds_from_env(START_TIMEOUT_ENV, DEFAULT_START_TIMEOUT)
    started = time.monotonic()
    while not answers(api_url, timeout=2.0):
        pid = _background_pid(home)
        if pid is None or not alive(pid):
            raise PrefectServerError(f"the Prefect server in {home} exited while starting; {ADVICE}")
        if time.monotonic() - started > ceiling:
            raise PrefectServerError(
                f"the Prefect server in {home} did not answer within {ceiling:g} s ({START_TIMEOUT_ENV}); {ADVICE}"
            )
        time.sleep(0.2)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One run at a time finds or starts the server (where file locks exist)."""
    try:
        import fcntl
    except ImportError:  # Windows: two runs starting at once may both try; Prefect refuses the second
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


ADVICE = (
    "run `prefect server start` to see why, or set PREFECT_API_URL to a running server; the same command "
    "then resumes (see README, Exit codes)"
)

__all__ = ["PrefectServer", "PrefectServerError", "pointed_at", "use_prefect_server"]

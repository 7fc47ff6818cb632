"""Read Prefect's settings and start its temporary API server in a helper process, before this one
imports Prefect.

Without PREFECT_API_URL, Prefect starts a temporary server when a flow begins: it first imports its whole
server package into this process (seconds of CPU, fighting the run for the interpreter), then waits
seconds for the server to boot. `judgebench run` instead starts a helper process at once. The helper reads
Prefect's settings and, if no server is configured, becomes that same server: the command and environment
Prefect itself uses. This process then points Prefect at it (PREFECT_API_URL, set before Prefect is
imported here), judges meanwhile, and stops the server at exit; the server also dies with this process if
it is killed. With a server configured, the helper only reports where Prefect keeps task results.
By default the server is kept for later runs instead (local_server: the helper supervises it, the next
run with the same PREFECT_HOME attaches, it stops after JUDGEBENCH_SERVER_KEEPALIVE idle seconds).
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from judgebench_flows.cli import local_server, preload, server_watch

# Scheduling priority of the temporary server below the run's, when the machine has cores to spare
# (local_server.NICE_MIN_CORES): it boots while the run already judges. On a few busy cores a niced boot
# starves for minutes (README, Performance), so there it keeps the run's priority.
SERVER_NICENESS = 10


class PrefectServerError(Exception):
    """The temporary Prefect server could not start: not bad input (exit 5, not 2)."""


@dataclass(frozen=True)
class PrefectSettings:
    """What a run needs from Prefect's settings before this process imports Prefect."""

    api_url: str | None  # of the temporary server started for this run; None when a server is configured
    result_storage: Path | None  # local directory of task results; None when a storage block holds them
    startup_timeout: float = 20.0
    server_pid: int | None = None  # the process to watch while the server boots
    shared: bool = False  # a server kept for later runs (local_server): not this run's to stop


def _read_settings() -> tuple[PrefectSettings, bool]:
    """This process's Prefect settings, and whether they ask for a temporary server."""
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    storage = None if settings.results.default_storage_block else Path(settings.results.local_storage_path)
    wants_server = not settings.api.url and settings.server.ephemeral.enabled
    return PrefectSettings(None, storage, float(settings.server.ephemeral.startup_timeout_seconds)), wants_server


class PrefectStart:
    """Prefect's settings as the helper process read them, and the temporary server it became, if any."""

    def __init__(self, helper: subprocess.Popen[str] | None, known: PrefectSettings | None = None) -> None:
        self._helper = helper
        self._settings = known
        self._ready = False  # wait_ready returned: the server answered
        self._guarded = False  # the run asked to be watched (guard_run) and has not ended
        self._db_url: str | None = None  # its results database, where a lost server marks the run failed
        self._watch: server_watch.ServerWatch | None = None
        self._watch_lock = threading.Lock()
        if helper is not None:
            atexit.register(self.stop)

    def settings(self) -> PrefectSettings:
        """Waits for the helper to read Prefect's settings, and points this process at its server. Call
        before anything here imports Prefect."""
        if self._settings is None:
            assert self._helper is not None and self._helper.stdout is not None
            line = self._helper.stdout.readline()
            try:
                told = json.loads(line)
                self._settings = PrefectSettings(
                    told["api_url"],
                    Path(told["result_storage"]) if told["result_storage"] else None,
                    told["startup_timeout"],
                    told.get("server_pid"),
                    bool(told.get("shared")),
                )
            except (ValueError, KeyError, TypeError):  # the helper could not read the settings: Prefect will say why
                self._settings = PrefectSettings(None, None)
            if self._settings.api_url:
                _point_prefect_at(self._settings.api_url)
        return self._settings

    def wait_ready(self) -> None:
        """Returns once the temporary server answers (at once when a server is configured); from then on a
        guarded run (`guard_run`) is watched: a server that stops ends it with exit 5 (server_watch)."""
        self._wait_ready()
        with self._watch_lock:
            self._ready = True
        self._start_watch()

    def guard_run(self, db_url: str | None) -> None:
        """While the run judges, watch its Prefect server once it answers (server_watch): a server that stops
        ends the run within seconds with one line and exit 5, its "running" row in `db_url` marked failed."""
        with self._watch_lock:
            self._guarded, self._db_url = True, db_url
        self._start_watch()

    def end_guard(self) -> None:
        """The run is over: a server stopping now (a temporary one at exit) is no longer the run's end."""
        with self._watch_lock:
            self._guarded = False
            if self._watch is not None:
                self._watch.disarm()
                self._watch = None

    def server_lost(self, error: BaseException) -> PrefectServerError | None:
        """The run ended with `error` while its Prefect server does not answer (a configured server's death
        outlasts Prefect's own retries, which then fail the flow): that, as exit 5 with the way to resume."""
        from judgebench_flows.core.errors import UserError

        with self._watch_lock:
            watch = self._watch
        if watch is None or isinstance(error, UserError):
            return None
        lost = watch.gone()
        return PrefectServerError(f"{lost}; {server_watch.RESUME}") if lost else None

    def _start_watch(self) -> None:
        with self._watch_lock:
            if not self._guarded or not self._ready or self._watch is not None:
                return
            settings = self.settings()
            pid = None
            if settings.api_url:  # a temporary server: ours (the helper became it) or a kept one
                pid = settings.server_pid or (self._helper.pid if self._helper is not None else None)
            self._watch = server_watch.ServerWatch(settings.api_url, pid, self._db_url).start()

    def _wait_ready(self) -> None:
        """Returns once the temporary server answers (at once when a server is configured).

        Waits as long as the server is alive and making progress (using CPU), up to a ceiling of minutes:
        a first boot on a busy machine takes tens of seconds, and a fixed short wait failed runs whose
        server was merely slow. A server that exits, stops progressing or passes the ceiling is a
        PrefectServerError (exit 5)."""
        settings = self.settings()
        if not settings.api_url or self._helper is None:
            return
        pid = settings.server_pid or self._helper.pid
        ceiling = local_server.start_timeout(settings.startup_timeout)
        started = last_progress = time.monotonic()
        ticks = local_server.cpu_ticks(pid)
        while True:
            if local_server.healthy(settings.api_url):
                return
            now = time.monotonic()
            if not local_server.alive(pid):
                code = self._helper.poll()
                raise PrefectServerError(
                    "the temporary Prefect server exited while starting" + (f" (code {code})" if code else "") + "; "
                    f"{_SERVER_ADVICE}"
                )
            seen = local_server.cpu_ticks(pid)
            if seen is None or seen != ticks:
                ticks, last_progress = seen, now
            if now - last_progress > local_server.STALL_SECONDS:
                raise PrefectServerError(
                    f"the temporary Prefect server stopped making progress while starting "
                    f"({now - started:.0f} s); {_SERVER_ADVICE}"
                )
            if now - started > ceiling:
                raise PrefectServerError(
                    f"the temporary Prefect server did not answer within {ceiling:g} s "
                    f"({local_server.START_TIMEOUT_ENV}); {_SERVER_ADVICE}"
                )
            time.sleep(0.1)

    def stop(self) -> None:
        """Tell the temporary server to stop, without waiting for it: its own shutdown (Prefect's services
        flushing what they hold) takes a quarter of a second that the run's user would otherwise wait
        for. It runs at exit, after Prefect's own exit handlers have sent their last logs and events."""
        self.end_guard()
        if self._helper is not None and self._helper.poll() is None and not (self._settings and self._settings.shared):
            self._helper.terminate()


_SERVER_ADVICE = (
    "its log is temporary-server.log in PREFECT_HOME. Run the same command again, or start a server "
    "(`prefect server start`) and set PREFECT_API_URL to it (see README, Exit codes)"
)


def start_prefect() -> PrefectStart:
    """Start the helper (it reads settings while this process starts up); see the module docstring."""
    if "prefect" in sys.modules and not preload.in_child():
        return PrefectStart(None, _read_settings()[0])  # imported by a test or a notebook: its settings are fixed
    from judgebench_flows.cli import fast_attach

    told = fast_attach.attach(os.getpid())  # a kept server for unchanged settings: no helper, no Prefect import
    if told is not None:
        _point_prefect_at(told["api_url"])
        return PrefectStart(
            None,
            PrefectSettings(
                told["api_url"],
                Path(told["result_storage"]) if told["result_storage"] else None,
                told["startup_timeout"],
                told["server_pid"],
                shared=True,
            ),
        )
    helper = subprocess.Popen(
        [sys.executable, "-m", "judgebench_flows.cli.prefect_server", str(os.getpid())],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    )
    return PrefectStart(helper)


def _point_prefect_at(api_url: str) -> None:
    os.environ["PREFECT_API_URL"] = api_url
    if preload.in_child():  # Prefect was imported before this process knew its server
        preload.refresh_prefect_settings()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _die_with(parent: int) -> None:
    """Ask Linux to stop this process (and the server it becomes) when the run's process ends, even by
    SIGKILL, so no temporary server outlives its run. Elsewhere the run's exit handler stops it."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the run ended before the request took effect
        os._exit(0)


def _helper(parent: int) -> None:
    from judgebench_flows.cli import fast_attach

    fingerprint = fast_attach.fingerprint()  # before Prefect is imported, as the run takes it
    try:
        settings, wants_server = _read_settings()
    except Exception:  # invalid settings: the run falls back to Prefect, which reports them properly
        print("{}", flush=True)
        return
    port = _free_port() if wants_server else None
    told = {
        "api_url": f"http://127.0.0.1:{port}/api" if port else None,
        "result_storage": str(settings.result_storage) if settings.result_storage else None,
        "startup_timeout": settings.startup_timeout,
    }
    keep = local_server.keepalive() if port else 0.0
    if not keep:
        print(json.dumps(told), flush=True)
    if port is None:  # no server wanted (and then nothing is kept either)
        return
    import prefect
    from prefect.settings import get_current_settings

    current = get_current_settings()
    home = Path(current.home).expanduser()
    home.mkdir(parents=True, exist_ok=True)
    # Prefect's own temporary-server command and environment (prefect.server.api.server.SubprocessASGIServer).
    env = {
        **os.environ,
        "PREFECT_UI_ENABLED": "0",
        "PREFECT__SERVER_EPHEMERAL": "1",
        "PREFECT__SERVER_FINAL": "1",
        **current.to_environment_variables(exclude_unset=True),
    }
    argv = [
        sys.executable,
        "-m",
        "uvicorn",
        "--app-dir",
        str(prefect.__module_path__.parent),
        "--factory",
        "prefect.server.api.server:create_app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "error",
        "--lifespan",
        "on",
    ]
    if keep:  # kept for the next runs: attach to a running one, or start it and watch over it
        fast_attach.remember(fingerprint, told, home, local_server.server_key(home, env, prefect.__version__))
        local_server.attach_or_start(
            home,
            parent,
            env,
            argv,
            port,
            prefect.__version__,
            told,
            local_server.start_timeout(settings.startup_timeout),
        )
        return
    _die_with(parent)
    # The server's own log goes to a file, not the run's terminal: stopping it after a run can make Prefect's
    # server services log tracebacks about events they had yet to flush, which are noise to a user.
    log = os.open(home / "temporary-server.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    if local_server.lower_priority_ok():  # the run's judging comes first, when there are cores to spare
        try:
            os.nice(SERVER_NICENESS)
        except OSError:
            pass
    os.execve(sys.executable, argv, env)


if __name__ == "__main__":
    _helper(int(sys.argv[1]))

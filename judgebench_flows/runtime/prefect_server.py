"""The Prefect server a run reports to: the one configured, else Prefect's own background server.

Below both doors of a run (the `judgebench` command and `evaluate()`); `python -m
judgebench_flows.cli.prefect_server` prints its address from the command line.

With PREFECT_API_URL (or a profile naming a server) that server is used as it is. Without one, a run
uses the background server of its PREFECT_HOME: the one in Prefect's pid file there (`prefect server
stop` stops it), answering on PREFECT_SERVER_API_HOST:PREFECT_SERVER_API_PORT (127.0.0.1:4200 by
default). When none answers there, the run starts Prefect's `prefect server start` detached, its output
in a log file (not `--background`: see _start_background_server), records it in that pid file and waits
for it; it then stays up for the next runs (a second run does not boot a second server) until
`prefect server stop`. A lock file in PREFECT_HOME keeps two runs starting at once from starting two
servers.

Prefect's ephemeral server (a temporary one per process) was measured too: it boots again on every run,
which on a busy 2-core machine is most of a small run's time (docs/performance.md).

A port is shared by every user of a machine, PREFECT_HOME is not: a server answering on the configured
port is used only if it reports (Prefect's `/admin/settings`) this PREFECT_HOME as its home. When
another user's server (or any other program) holds the port, the run starts this home's own server on
a free port, remembers that port in PREFECT_HOME (PORT_FILE) for the next runs and says so in one
line: its flow runs, logs and artifacts never go to a stranger's server.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from judgebench_flows.core.errors import EXIT_SERVER, KnownError
from judgebench_flows.core.text import wrapped
from judgebench_flows.runtime.server_watch import alive, answers, seconds_from_env

START_TIMEOUT_ENV = "JUDGEBENCH_SERVER_START_TIMEOUT"
# A first boot with a fresh PREFECT_HOME (creating and migrating Prefect's database) on a loaded small
# machine takes tens of seconds: the ceiling is minutes, and a server process that exits fails at once.
DEFAULT_START_TIMEOUT = 600.0
SERVER_LOG = "prefect-server.log"  # the background server's output in PREFECT_HOME (its log lines, errors)
PID_FILE = "server.pid"  # Prefect's pid file of its background server (`prefect server stop` reads it)
LOCK_FILE = "judgebench-server.lock"
# The port this home's server moved to when the configured one was held by another server:
# "CONFIGURED CHOSEN", so a run with another configured port (PREFECT_SERVER_API_PORT) is not redirected.
PORT_FILE = "judgebench-server-port"
ALIVE_EVERY_SECONDS = 10.0  # how often a first boot says it is still starting


class PrefectServerError(KnownError):
    """The Prefect server could not start, or stopped during the run: not bad input (exit 5, not 2)."""

    exit_code = EXIT_SERVER


@dataclass(frozen=True)
class PrefectServer:
    """The server a run reports to, and the process to watch when it is Prefect's background server."""

    api_url: str
    pid: int | None = None  # of the background server; None for a configured server


def use_prefect_server() -> PrefectServer:
    """The configured server, or this PREFECT_HOME's background server (started now if none answers;
    on a free port of its own if another home's server holds the configured one). The environment is left
    alone: `pointed_at` points this process's Prefect, and the subprocesses started in its block, at it."""
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    if settings.api.url:
        return PrefectServer(settings.api.url)
    home = Path(settings.home).expanduser()
    home.mkdir(parents=True, exist_ok=True)
    host, configured = settings.server.api.host, settings.server.api.port
    with _locked(home / LOCK_FILE):
        port = _remembered_port(home, configured) or configured
        api_url = _api_url(host, port)
        if _home_server_answers(host, port, api_url, home):
            _check_ui(api_url, home)  # this home's server, running: the common case
        elif alive(_background_pid(home)):
            _wait_until_answering(api_url, home)  # booting (started by hand, or by a run killed while waiting)
            if not _says_it_serves_home(api_url, home):
                raise PrefectServerError(
                    f"port {port} answers for a Prefect server that is not this PREFECT_HOME's ({home}) while "
                    "this home's own server is starting: set PREFECT_API_URL to the server to use, or "
                    "PREFECT_SERVER_API_PORT to a free port"
                )
        else:
            if _taken(host, port):
                port = _move_to_free_port(home, host, configured, taken=port)
                api_url = _api_url(host, port)
            _start_background_server(home, host, port)
            _wait_until_answering(api_url, home, say_alive=True)
    return PrefectServer(api_url, _background_pid(home))


def serves_home(api_url: str, home: Path) -> bool:
    """Whether the Prefect server behind `api_url` is the one of `home`: it reports its settings through
    Prefect's public `GET /admin/settings`. Anything else (another home, another program) is not ours."""
    return _home_answer(api_url, home) is True


def _home_answer(api_url: str, home: Path) -> bool | None:
    """True or False as the server behind `api_url` says its home; None when it gave no answer in time
    (a server still booting on a busy machine answers /health before its settings)."""
    request = urllib.request.Request(f"{api_url.rstrip('/')}/admin/settings", headers=_auth_headers())
    try:
        with urllib.request.urlopen(request, timeout=5.0) as answer:
            theirs = json.loads(answer.read()).get("home")
    except urllib.error.HTTPError as exc:
        return None if exc.code >= 500 else False  # a 404 or 401: an answer, and not this home's settings
    except (OSError, ValueError, AttributeError):
        return None
    return isinstance(theirs, str) and _same_path(Path(theirs).expanduser(), home)


def _home_server_answers(host: str, port: int, api_url: str, home: Path) -> bool:
    """Whether this home's server answers on host:port. A busy machine's server can be slow to answer: a
    held port is asked again with a longer timeout, and a server that answers without giving its settings in
    time is asked again (up to BUSY_ANSWER_SECONDS), so this home's own server is not taken for a stranger's
    and a second server of this home started beside it (on another port, outliving the run that started it)."""
    if not answers(api_url, timeout=2.0) and not (_taken(host, port) and answers(api_url, timeout=HEALTH_TIMEOUT)):
        return False
    return _says_it_serves_home(api_url, home, within=BUSY_ANSWER_SECONDS)


HEALTH_TIMEOUT = 10.0  # a held port's second chance to answer /health
BUSY_ANSWER_SECONDS = 60.0  # how long a server that answers /health is asked for its settings


def _says_it_serves_home(api_url: str, home: Path, within: float | None = None) -> bool:
    """`serves_home` of a server this home is booting, asked again while it gives no answer in time (a
    5 s timeout under load is not a stranger's server), up to `within` seconds (default: the start timeout)."""
    limit = seconds_from_env(START_TIMEOUT_ENV, DEFAULT_START_TIMEOUT) if within is None else within
    ceiling = time.monotonic() + limit
    while (said := _home_answer(api_url, home)) is None and time.monotonic() < ceiling:
        time.sleep(1.0)
    return said is True


def _auth_headers() -> dict[str, str]:
    """Prefect's client authentication, for a server started with an auth string (as Prefect's client sends it)."""
    import base64

    from prefect.settings import get_current_settings

    secret = get_current_settings().api.auth_string
    if secret is None:
        return {}
    return {"Authorization": "Basic " + base64.b64encode(secret.get_secret_value().encode()).decode()}


def _same_path(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def _api_url(host: str, port: int) -> str:
    return f"http://{host}:{port}/api"


def _taken(host: str, port: int) -> bool:
    """Whether something already listens on host:port (a server of another home, or any program)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def _remembered_port(home: Path, configured: int) -> int | None:
    try:
        wanted, chosen = (int(word) for word in (home / PORT_FILE).read_text().split())
    except (OSError, ValueError):
        return None
    return chosen if wanted == configured else None


def _say(text: str) -> None:
    """A notice on stderr, wrapped to the terminal (a path in it makes it longer than 80 columns)."""
    print(wrapped(text), file=sys.stderr, flush=True)


def _move_to_free_port(home: Path, host: str, configured: int, taken: int) -> int:
    """A free port for this home's own server, remembered in PREFECT_HOME, said in one line."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        port = int(sock.getsockname()[1])
    (home / PORT_FILE).write_text(f"{configured} {port}\n")
    _say(
        f"note: port {taken} is held by a server that is not this PREFECT_HOME's ({home}); starting its own on "
        f"port {port} (remembered in {home / PORT_FILE}); set PREFECT_API_URL to use a server of your choice, "
        "or PREFECT_SERVER_API_PORT to pick the port"
    )
    return port


@contextlib.contextmanager
def pointed_at(server: PrefectServer) -> Iterator[None]:
    """This process's Prefect talks to `server` inside the block (Prefect's settings are fixed at import),
    its logging set up as its settings say (runtime/quiet.py points them at runtime/logging.yml), and so do
    the subprocesses started in it (a local Dask cluster's workers copy os.environ): PREFECT_API_URL names
    `server` for the block only (`_exported`), so a notebook's next `evaluate()` and the user's own code
    find the variable as it was (the user's own, or none), not a server that may since have moved."""
    from prefect.logging.configuration import ensure_logging_setup
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with _exported(server.api_url), temporary_settings(updates={PREFECT_API_URL: server.api_url}):
        ensure_logging_setup()
        yield


class _Export:
    """PREFECT_API_URL as it was before the first of the blocks in force, and each block's URL in order."""

    def __init__(self) -> None:
        self.before = os.environ.get(API_URL_VARIABLE)
        self.blocks: list[tuple[object, str]] = []


_export: _Export | None = None
_export_lock = threading.Lock()


@contextlib.contextmanager
def _exported(api_url: str) -> Iterator[None]:
    """PREFECT_API_URL set to `api_url` inside the block, as before it after. os.environ is the process's:
    blocks that overlap (`evaluate_async`) end in any order, so the variable names the latest block still
    in force, and what was there before the first is put back when the last one ends."""
    global _export
    token = object()
    with _export_lock:
        if _export is None:
            _export = _Export()
        _export.blocks.append((token, api_url))
        os.environ[API_URL_VARIABLE] = api_url
    try:
        yield
    finally:
        with _export_lock:
            export, _export = _export, None
            if export is not None:
                export.blocks = [(t, url) for t, url in export.blocks if t is not token]
                if export.blocks:  # another block still in force: its URL, the saved value kept for the last
                    _export, os.environ[API_URL_VARIABLE] = export, export.blocks[-1][1]
                elif export.before is None:
                    os.environ.pop(API_URL_VARIABLE, None)
                else:
                    os.environ[API_URL_VARIABLE] = export.before


API_URL_VARIABLE = "PREFECT_API_URL"


def _background_pid(home: Path) -> int | None:
    try:
        return int((home / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def server_env(host: str, port: int) -> dict[str, str]:
    """What a background server of this project is started with beside the user's environment: its own
    address as Prefect's settings (`prefect server start --port` alone leaves PREFECT_SERVER_API_PORT at
    4200, and Prefect's UI then talks to whatever answers on 4200: another home's server), the UI's API
    URL (PREFECT_SERVER_UI_API_URL) naming this server unless the user set one, and Prefect's telemetry
    off unless the user set PREFECT_SERVER_ANALYTICS_ENABLED: on a machine that cannot resolve Prefect's
    telemetry host, its failure is logged about 20 s after starting (seen on a machine without DNS), and
    a server whose output has nowhere to go dies of it (`--background`). Its log stream on (LOG_STREAM),
    unless the user set it: without it, `prefect deployment run ... --watch` prints a run's events but none of its log lines.
    Its task run recorder batched (TASK_RUN_RECORDER), unless the user set it: fewer writers for a night's
    subflow runs to meet on SQLite."""
    env = {"PREFECT_SERVER_API_HOST": host, "PREFECT_SERVER_API_PORT": str(port)}
    if not any(os.environ.get(name) for name in UI_API_URL_VARIABLES):
        env["PREFECT_SERVER_UI_API_URL"] = _api_url(host, port)
    defaults = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", **dict.fromkeys(LOG_STREAM, "true"), **TASK_RUN_RECORDER}
    env.update({name: value for name, value in defaults.items() if name not in os.environ})
    return env


# Prefect's server streams flow runs' logs to `--watch` (and other subscribers) only with both on.
LOG_STREAM = ("PREFECT_SERVER_LOGS_STREAM_OUT_ENABLED", "PREFECT_SERVER_LOGS_STREAM_PUBLISHING_ENABLED")


# Prefect's task run recorder writes the task runs and states its clients report as events, by default one
# event a transaction (batch size 1): on SQLite, every write meets the night's subflow run creations, which
# read before they write in a deferred transaction, so SQLite answers them "database is locked" at once
# (its busy timeout does not apply to a read transaction turning writer), the server 503 and Prefect's client
# retries 2, 4, 8 ... s later. Up to 100 events a transaction, at least once a second: the task runs show up
# in the UI at most a second later (docs/performance.md, the nightly matrix on SQLite, 2026-12-01).
TASK_RUN_RECORDER = {
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE": "100",
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL": "1",
}


# Prefect 3's setting for the API its UI talks to, and its older name (both read by Prefect's settings).
UI_API_URL_VARIABLES = ("PREFECT_SERVER_UI_API_URL", "PREFECT_UI_API_URL")


def ui_api_url(api_url: str) -> str | None:
    """The API the UI of the server behind `api_url` talks to (Prefect's public `GET /ui-settings`)."""
    request = urllib.request.Request(f"{api_url.removesuffix('/').removesuffix('/api')}/ui-settings")
    try:
        with urllib.request.urlopen(request, timeout=5.0) as answer:
            said = json.loads(answer.read()).get("api_url")
    except (OSError, ValueError, AttributeError):
        return None
    return said if isinstance(said, str) else None


def _check_ui(api_url: str, home: Path) -> None:
    """A note when this home's running server (started by hand, or by an earlier version) serves a UI
    that talks to another API: its pages would show another server's runs."""
    theirs = ui_api_url(api_url)
    if theirs is not None and theirs.rstrip("/") != api_url.rstrip("/"):
        _say(
            f"note: the UI of this PREFECT_HOME's server ({home}) talks to {theirs}, not to {api_url}: it shows "
            "another server's runs; `prefect server stop`, and the next run starts it again with its UI on "
            "its own API"
        )


def _prefect_command(*args: str) -> tuple[list[str], dict[str, str]]:
    """Prefect's own CLI with this interpreter, and the environment it runs in (plain, unwrapped output)."""
    environment = {**os.environ, "PREFECT_CLI_COLORS": "false", "PREFECT_CLI_WRAP_LINES": "false"}
    return [sys.executable, "-m", "prefect", *args], environment


def _prefect(*args: str) -> subprocess.CompletedProcess[str]:
    """Prefect's own CLI, run to its end."""
    command, environment = _prefect_command(*args)
    return subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=environment)


def _start_background_server(home: Path, host: str, port: int) -> None:
    """Prefect's `prefect server start`, detached, its output in SERVER_LOG, its pid in Prefect's pid file
    (so `prefect server stop` stops it); a pid file left by a server that died is cleared first with
    `prefect server stop`. Not `--background`: Prefect 3.9.1 gives that server pipes to the CLI process,
    which exits at once, and the first warning the server logs after (a malformed request, a slow loop on
    a busy machine, telemetry failing offline) meets the closed pipe: rich's console then raises
    SystemExit and the server is gone (tests/test_server_start.py shows it)."""
    if (home / PID_FILE).exists():
        _prefect("server", "stop")
    _say(
        f"starting Prefect's server for {home} on {host}:{port} (once: a first boot creates its database, "
        "tens of seconds; it stays up for the next runs until `prefect server stop`)",
    )
    command, environment = _prefect_command("server", "start", "--host", host, "--port", str(port))
    # A launcher that exits once the server runs: the server is no child of this run (never its zombie).
    launched = subprocess.run(
        [sys.executable, "-c", LAUNCHER, str(home / SERVER_LOG), *command],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env={**environment, **server_env(host, port)},
    )
    if launched.returncode != 0 or not launched.stdout.strip().isdigit():
        said = " ".join((launched.stdout + launched.stderr).split())[-300:]
        raise PrefectServerError(f"`prefect server start` could not be started: {said}; {ADVICE}")
    (home / PID_FILE).write_text(launched.stdout.strip())


# Starts argv[2:] in a session of its own, its output appended to the file argv[1]; prints its pid.
LAUNCHER = (
    "import subprocess, sys\n"
    "with open(sys.argv[1], 'ab') as log:\n"
    "    print(subprocess.Popen(sys.argv[2:], stdin=subprocess.DEVNULL, stdout=log, stderr=log,"
    " start_new_session=True).pid)"
)


def _wait_until_answering(api_url: str, home: Path, say_alive: bool = False) -> None:
    """Until the server answers; with `say_alive`, a line every ALIVE_EVERY_SECONDS that its process
    lives, and one when it answers, so a first boot is not tens of silent seconds."""
    ceiling = seconds_from_env(START_TIMEOUT_ENV, DEFAULT_START_TIMEOUT)
    started = time.monotonic()
    said = started
    while not answers(api_url, timeout=2.0):
        pid = _background_pid(home)
        if pid is None or not alive(pid):
            raise PrefectServerError(f"the Prefect server in {home} exited while starting; {ADVICE}")
        now = time.monotonic()
        if now - started > ceiling:
            raise PrefectServerError(
                f"the Prefect server in {home} did not answer within {ceiling:g} s ({START_TIMEOUT_ENV}); {ADVICE}"
            )
        if say_alive and now - said >= ALIVE_EVERY_SECONDS:
            print(f"  still starting (pid {pid}, {now - started:.0f} s)", file=sys.stderr, flush=True)
            said = now
        time.sleep(0.2)
    if say_alive:
        ui = api_url.removesuffix("/api")
        _say(f"Prefect's server is up after {time.monotonic() - started:.0f} s: {ui}")


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


__all__ = ["PrefectServer", "PrefectServerError", "pointed_at", "serves_home", "use_prefect_server"]

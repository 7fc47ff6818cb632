"""Run a command in a child forked from a process that has already imported what a run imports.

A fully cached re-run of the 350-pair file took 1.8 s on an idle machine and 3.5 s beside two busy
processes, about 60% of it imports (openai's type modules, SQLAlchemy and SQLModel, Prefect and the flow
module): the same work on every run, and a user iterating on a judge with `--max-samples 20` pays it each
time. So a `judgebench run` leaves a preloaded process behind, as it leaves its Prefect server: it imports
what the run imported, once, then waits on a Unix socket. The next `judgebench` command with the same
code and settings hands over its arguments, environment, working directory and its standard streams
(the file descriptors themselves, so the terminal, pipes and redirections are the caller's); the
preloaded process forks, and the child runs `main` as the command itself would have. The caller exits
with the child's exit code.

What keeps a child equal to a fresh process:
- Same code and settings, or no preloaded process: the socket is named by a key over the interpreter and
  its flags, the installed packages, this package's source files, HOME, the working directory, the
  PYTHON* and locale variables, and Prefect's settings as fast_attach fingerprints them (the PREFECT_*
  variables but per-run result storage and logging, and the files Prefect reads). Any change is another
  key, so a cold start that leaves a new preloaded process (at most MAX_PROCESSES per user, the least
  recently used stopped first); one whose code or packages changed under it exits.
- The child takes the caller's environment, working directory, umask and sys.path, and re-reads Prefect's
  settings from them (result storage and logging may differ per run).
- It dies with its caller: it watches the connection and kills itself when the caller is gone (`kill -9`
  included), as a cold run dies with its process; SIGINT, SIGTERM and SIGHUP to the caller reach it.
- Only the caller's user: the socket's folder is private (0700) and the peer's uid is checked.
- fork() is only safe without threads: the preloaded process starts none, and refuses to serve if an
  import started one.
It stops after JUDGEBENCH_PRELOAD_KEEPALIVE idle seconds (default 600; 0 turns preloading off).

Nothing here imports Prefect; the client side imports only the standard library and fast_attach.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path

KEEPALIVE_ENV = "JUDGEBENCH_PRELOAD_KEEPALIVE"
DEFAULT_KEEPALIVE = 600.0
# Environment variables that change how the interpreter starts or decodes, besides PYTHON*.
START_ENV = ("HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR")
# How often an idle preloaded process checks that its code and packages are unchanged.
CHECK_SECONDS = 5.0
MAX_MESSAGE = 4 << 20
# Preloaded processes per user at most (one per key: working directory, settings, code).
MAX_PROCESSES = 2
# Modules never preloaded: the program itself, and what runs our tests.
SKIP_PREFIXES = ("__main__", "__mp_main__", "_pytest", "pytest", "judgebench_flows.testing")

_child = False  # set in a forked child: Prefect is already imported, but its settings are the caller's
_caller: socket.socket | None = None  # in a child: the connection its caller waits on for the exit code
_lock_fd: int | None = None  # held for the preloaded process's life: one per key
_logging_env: dict[str, str] = {}  # PREFECT_LOGGING_* as Prefect's logging was set up in the preloaded process


def in_child() -> bool:
    return _child


def exit_now(code: int) -> None:
    """End this process at once with `code` (os._exit), telling the caller first when this is a preloaded
    child: its caller exits with the child's code, and a child gone without one reads as a crash (3)."""
    if _caller is not None:
        with contextlib.suppress(OSError):
            _send(_caller, {"exit": code})
    sys.stderr.flush()
    os._exit(code)


def _supported() -> bool:
    return (
        hasattr(os, "fork") and hasattr(socket, "AF_UNIX") and hasattr(socket, "send_fds") and sys.platform == "linux"
    )


def keepalive() -> float:
    from judgebench_flows.cli.local_server import seconds_from_env

    return seconds_from_env(KEEPALIVE_ENV, DEFAULT_KEEPALIVE) if _supported() else 0.0


# --- the key -------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _package_roots() -> tuple[Path, ...]:
    """Folders of this package's source (an editable install maps flows/, tasks/, ... from the checkout)."""
    import importlib.util

    import judgebench_flows

    roots = {Path(judgebench_flows.__file__).resolve().parent}
    for name in ("flows", "tasks", "judges", "templates", "deployments"):
        with contextlib.suppress(ImportError, ValueError):
            spec = importlib.util.find_spec(f"judgebench_flows.{name}")
            if spec is not None and spec.submodule_search_locations:
                roots.update(Path(p).resolve() for p in spec.submodule_search_locations)
    return tuple(sorted(roots))


def code_stamp() -> str:
    """This package's source files and the installed packages, by modification time: cheap (a stat per
    file) and changed by any edit, install or upgrade."""
    parts: list[str] = []
    for root in _package_roots():
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                if name.endswith((".py", ".j2", ".jinja", ".txt", ".json", ".yaml")):
                    with contextlib.suppress(OSError):
                        parts.append(f"{dirpath}/{name}:{os.stat(os.path.join(dirpath, name)).st_mtime_ns}")
    for key in ("purelib", "platlib"):
        path = sysconfig.get_paths()[key]
        with contextlib.suppress(OSError):
            parts.append(f"{path}:{os.stat(path).st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def key() -> str | None:
    """Everything a preloaded process must share with this command, hashed; None when it cannot be told."""
    from judgebench_flows.cli import fast_attach

    # The PREFECT_* variables but result storage and logging (which may differ per run: a child re-reads
    # them), Prefect's settings files, the interpreter and Prefect's install.
    prefect_settings = fast_attach.fingerprint()
    if prefect_settings is None:
        return None
    parts = {
        "prefect_settings": prefect_settings,
        "python": [sys.executable, sys.version, repr(sys.flags), sys.warnoptions, sorted(sys._xoptions.items())],
        "env": sorted((k, v) for k, v in os.environ.items() if k.startswith("PYTHON") or k in START_ENV),
        "cwd": os.getcwd(),
        "uid": os.getuid(),
        "code": code_stamp(),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


def _folder() -> Path:
    """Private to this user; under the temporary directory, as Unix socket paths are short (108 bytes)."""
    base = Path(os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir())
    return base / f"judgebench-flows-{os.getuid()}"


def _private_folder() -> Path | None:
    folder = _folder()
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        info = folder.stat()
    except OSError:
        return None
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        return None  # someone else's, or opened up: do not trust it
    return folder


# --- messages: a 4-byte length, then JSON ----------------------------------------------------------------


def _send(sock: socket.socket, message: dict, fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    payload = struct.pack("!I", len(data)) + data
    if fds:
        socket.send_fds(sock, [payload], fds)
    else:
        sock.sendall(payload)


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks = b""
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise EOFError
        chunks += chunk
    return chunks


def _recv(sock: socket.socket) -> dict:
    (size,) = struct.unpack("!I", _recv_exact(sock, 4))
    if size > MAX_MESSAGE:
        raise EOFError
    return json.loads(_recv_exact(sock, size))


# --- the caller --------------------------------------------------------------------------------------------

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def command_key() -> str | None:
    """This command's key, taken before `main` changes the environment; None when preloading is off."""
    if not keepalive():
        return None
    try:
        return key()
    except Exception:  # noqa: BLE001 - never stop a command over its fast path
        return None


def run_preloaded(argv: list[str], found: str | None) -> int | None:
    """Run this command in a preloaded child and return its exit code; None when there is no preloaded
    process for this command's key (the caller then runs it itself)."""
    folder = _private_folder() if found else None
    if found is None or folder is None:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(folder / f"{found}.sock"))
        request = {
            "key": found,
            "argv": argv,
            "argv0": sys.argv[0],
            "env": dict(os.environ),
            "cwd": os.getcwd(),
            "path": sys.path,
            "umask": _umask(),
        }
        _send(sock, request, [0, 1, 2])
        started = _recv(sock)
    except (OSError, EOFError, ValueError):
        sock.close()
        return None
    if "pid" not in started:  # refused (a key it does not serve): run cold
        sock.close()
        return None
    child = int(started["pid"])

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(OSError):
            os.kill(child, signum)

    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, forward)
    try:
        while True:
            try:
                return int(_recv(sock)["exit"])
            except InterruptedError:
                continue
    except (OSError, EOFError, ValueError, KeyError, TypeError):
        print("unexpected error: the preloaded judgebench process ended without an exit code", file=sys.stderr)
        return 3
    finally:
        sock.close()


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def leave_preloaded(argv: list[str], found: str | None, env: dict[str, str]) -> None:
    """After a cold `run`: start a preloaded process for the next command, unless one is there or starting.

    It starts with the environment this command started with (`env`, before `main` changed it) and imports
    what this process imported: modules of the standard library, the installed packages and this
    package, never the user's own judge files, which must be read afresh by each run."""
    if found is None or not argv or argv[0] != "run":
        return
    try:
        folder = _private_folder()
        if folder is None or _lock_held(folder / f"{found}.lock"):
            return
        _make_room()
        listing = folder / f"{found}.{os.getpid()}.modules"
        listing.write_text("\n".join(_preloadable_modules()))
        subprocess.Popen(
            [sys.executable, "-m", "judgebench_flows.cli.preload", found, str(listing)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=_own_environment(env),
            start_new_session=True,
            close_fds=True,
        )
    except Exception:  # noqa: BLE001 - the next command is merely slower
        return


def _make_room() -> None:
    """Keep at most MAX_PROCESSES preloaded processes per user (about 150 MB each): stop those used least
    recently, so commands whose settings change every time do not pile them up."""
    alive = sorted(records(), key=lambda r: float(r.get("used", 0)))
    for record in alive[: max(0, len(alive) - MAX_PROCESSES + 1)]:
        stop(key=record["key"])


def _own_environment(env: dict[str, str]) -> dict[str, str]:
    """What the preloaded process itself starts with: what its key and imports depend on, and no API keys
    (each child gets its caller's whole environment)."""
    return {
        k: v
        for k, v in env.items()
        if k.startswith(("PYTHON", "PREFECT_", "JUDGEBENCH_", "LC_", "VIRTUAL_ENV")) or k in (*START_ENV, "PATH", "TZ")
    }


def _preloadable(name: str, installed: tuple[str, ...], ours: tuple[str, ...]) -> bool:
    """Whether module `name` may be preloaded: it comes from the standard library or the installed packages
    (`installed`), or is this package's own and comes from its source (`ours`); folders end with a separator."""
    if name.startswith(SKIP_PREFIXES):
        return False
    origin = getattr(sys.modules.get(name), "__file__", None)
    if not origin:
        return "." not in name or name.split(".")[0] in sys.modules  # built-ins, namespace packages
    return os.path.realpath(origin).startswith(ours if name.startswith("judgebench_flows") else installed)


def _preloadable_modules() -> list[str]:
    paths = sysconfig.get_paths()
    installed = tuple(os.path.realpath(paths[k]) + os.sep for k in ("stdlib", "platstdlib", "purelib", "platlib"))
    ours = tuple(f"{root}{os.sep}" for root in _package_roots())
    return [name for name in list(sys.modules) if _preloadable(name, installed, ours)]


def _lock_held(path: Path) -> bool:
    import fcntl

    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return True
    os.close(fd)  # releases it: the preloaded process takes it for its life
    return False


# --- the preloaded process -------------------------------------------------------------------------------


class Record:
    """`<key>.json` beside the socket: which process serves it, for whom, and how many commands it forked.
    Lets a benchmark or a test stop what it started (`stop`) and see that a command was served."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.served = 0

    def write(self, served: int, ready: bool = True) -> None:
        self.served = served
        data = {
            "pid": os.getpid(),
            "ready": ready,
            "served": served,
            "used": time.time(),
            "prefect_home": os.environ.get("PREFECT_HOME"),
            "cwd": os.getcwd(),
        }
        partial = self.path.with_name(f"{self.path.name}.tmp")
        with contextlib.suppress(OSError):
            partial.write_text(json.dumps(data))
            partial.replace(self.path)

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()


def _is_preloaded_process(pid: int) -> bool:
    try:
        return b"judgebench_flows.cli.preload" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def records() -> list[dict]:
    """The preloaded processes of this user that are alive (starting or serving), each with its record's
    fields and its key; records left by a process killed outright are removed."""
    found = []
    for path in sorted(_folder().glob("*.json")):
        try:
            record = json.loads(path.read_text())
            pid = int(record["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if _is_preloaded_process(pid):  # not a reused pid either
            found.append({**record, "key": path.stem})
        else:
            with contextlib.suppress(OSError):
                path.unlink()
    return found


def stop(**fields: str) -> int:
    """Stop this user's preloaded processes whose records hold `fields` (e.g. `prefect_home=...`, `cwd=...`;
    all of them without); how many were told to stop."""
    stopped = 0
    for record in records():
        if all(record.get(name) == value for name, value in fields.items()):
            with contextlib.suppress(OSError):
                os.kill(int(record["pid"]), signal.SIGTERM)
                stopped += 1
    return stopped


def serve(expected: str, listing: Path) -> int:
    """Import, then fork a child per command until idle for the keep-alive time or the code changed."""
    import fcntl

    try:
        names = listing.read_text().split()
    except OSError:
        names = []
    with contextlib.suppress(OSError):
        listing.unlink()
    folder = _private_folder()
    if folder is None:
        return 0
    global _lock_fd
    lock = folder / f"{expected}.lock"
    _lock_fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(_lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another one serves (or is starting) for this key
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # through `finally`: what it leaves goes
    record = Record(folder / f"{expected}.json")
    path = folder / f"{expected}.sock"
    try:
        record.write(served=0, ready=False)  # importing: `stop` finds it already
        return _serve(expected, names, path, record)
    finally:
        for left in (path, lock):  # a lock file taken between these lines only lets a second one start
            with contextlib.suppress(OSError):
                left.unlink()
        record.remove()


def _serve(expected: str, names: list[str], path: Path, record: Record) -> int:
    global _logging_env
    stamp = code_stamp()
    if key() != expected:
        return 0  # the code or settings changed since the command that started this one
    from judgebench_flows.cli.main import quiet_prefect

    quiet_prefect(verbose=False)  # Prefect sets its logging up as it is imported: as most commands want it
    _logging_env = _prefect_logging_env()
    _import_all(names)
    if threading.active_count() != 1 or code_stamp() != stamp:
        return 0  # an import started a thread (fork would be unsafe), or the code changed meanwhile
    gc.collect()
    gc.freeze()  # children do not copy pages just to run the collector over what is preloaded
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    os.chmod(path, 0o600)
    server.listen(16)
    server.settimeout(CHECK_SECONDS)
    signal.signal(signal.SIGCHLD, lambda *_: _reap())
    record.write(served=0)
    idle_since = time.monotonic()
    while True:
        try:
            conn, _ = server.accept()
        except TimeoutError:
            _reap()
            if time.monotonic() - idle_since > keepalive() or code_stamp() != stamp:
                return 0
            continue
        except InterruptedError:
            continue
        if _accept(conn, expected, server):
            record.write(served=record.served + 1)
        idle_since = time.monotonic()


def _import_all(names: list[str]) -> None:
    import importlib

    for required in ("judgebench_flows.cli.main",):
        importlib.import_module(required)
    for name in names:
        if name in sys.modules:
            continue
        try:
            importlib.import_module(name)
        except BaseException:  # noqa: BLE001 - a module that does not import alone is simply not preloaded
            continue


def _reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _accept(conn: socket.socket, expected: str, server: socket.socket) -> bool:
    """Fork a child for one command of this user; whether one was started. This process never reads a
    command's arguments or environment (they may hold credentials): the child does."""
    try:
        uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[1]
        if uid != os.getuid():
            return False
        pid = os.fork()
        if pid == 0:
            try:
                server.close()
                if _lock_fd is not None:
                    os.close(_lock_fd)
                _child_main(conn, expected)
            finally:
                os._exit(3)
        return True
    except OSError:
        return False
    finally:
        conn.close()


def _read_request(conn: socket.socket) -> tuple[dict, list[int]]:
    conn.settimeout(10)
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)  # the descriptors come with the first bytes
    while len(data) < 4:
        data += _recv_exact(conn, 4 - len(data))
    (size,) = struct.unpack("!I", data[:4])
    if size > MAX_MESSAGE:
        raise EOFError
    data = data[4:]
    if len(data) < size:
        data += _recv_exact(conn, size - len(data))
    conn.settimeout(None)
    return json.loads(data), fds


def _child_main(conn: socket.socket, expected: str) -> None:
    """In the forked child: become the caller's process, run the command, send its exit code."""
    global _child, _caller
    try:
        request, fds = _read_request(conn)
    except (OSError, EOFError, ValueError, struct.error):
        os._exit(3)
    if request.get("key") != expected or len(fds) != 3:
        with contextlib.suppress(OSError):
            _send(conn, {"refused": True})
        os._exit(0)
    _child = True
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as in a command started cold
    os.setsid()  # signals the caller forwards reach this child only
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    os.umask(int(request["umask"]))
    sys.path[:] = request["path"]
    sys.argv = [request["argv0"], *request["argv"]]
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.reconfigure(line_buffering=stream.isatty() or stream is sys.stderr)  # type: ignore[union-attr]
    _send(conn, {"pid": os.getpid()})
    _caller = conn
    threading.Thread(target=_die_with_caller, args=(conn,), daemon=True).start()
    refresh_prefect_settings()
    if "judgebench_flows.cli.console" in sys.modules:
        sys.modules["judgebench_flows.cli.console"].attach_streams()
    from judgebench_flows.cli import main as cli

    exit_now(cli.run_command(request["argv"]))


def _die_with_caller(conn: socket.socket) -> None:
    """The caller sends nothing after its request: the connection closing means it is gone."""
    with contextlib.suppress(OSError):
        while conn.recv(1):
            pass
    os.kill(os.getpid(), signal.SIGKILL)


def refresh_prefect_settings() -> None:
    """Prefect read its settings from the environment when it was imported; a child (and a child that
    was pointed at a server) has other variables now."""
    if "prefect.context" in sys.modules:
        sys.modules["prefect.context"].refresh_global_settings_context()


def _prefect_logging_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith("PREFECT_LOGGING_")}


def refresh_prefect_logging() -> None:
    """In a child: set Prefect's logging up again when its variables differ from those it was set up
    with in the preloaded process (--verbose, a logging level of the caller's)."""
    if _child and _prefect_logging_env() != _logging_env and "prefect.logging.configuration" in sys.modules:
        refresh_prefect_settings()
        sys.modules["prefect.logging.configuration"].setup_logging(incremental=False)


def main(argv: list[str]) -> int:
    expected, listing = argv
    return serve(expected, Path(listing))


__all__ = [
    "records",
    "stop",
    "command_key",
    "in_child",
    "leave_preloaded",
    "refresh_prefect_logging",
    "refresh_prefect_settings",
    "run_preloaded",
]

if __name__ == "__main__":  # run as the module's importable self: its state is what `in_child` reads
    from judgebench_flows.cli import preload

    os._exit(preload.main(sys.argv[1:]))

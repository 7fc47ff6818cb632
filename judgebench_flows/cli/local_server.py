"""A temporary Prefect server that stays up for a while after its run, so the next run attaches to it.

Booting Prefect's server costs seconds of CPU (a fresh PREFECT_HOME also creates and migrates its
database): on a busy 2-core machine 20-45 s, several times a 10-pair run's judging. A user iterating on a
judge with `--max-samples 20` pays that on every run. So the first run's helper process becomes a small
supervisor of the server instead of the server itself: it records the server in PREFECT_HOME, and stops
it once no run has used it for `JUDGEBENCH_SERVER_KEEPALIVE` seconds (default 600; 0 restores "the server
stops with its run"). Later runs with the same PREFECT_HOME and the same server settings attach to it.

- Two runs at once: a lock file serialises "find or start"; both use the one server.
- Stale records: a record whose supervisor or server is gone, or whose server stopped answering after its
  boot time, is replaced by a new server.
- Different PREFECT_HOME or server settings (database URL, ...): a separate record, a separate server.
- Runs hold a lease (a file named by their pid); the supervisor counts live leases, so a run killed with
  SIGKILL releases its lease by dying. A supervisor killed with SIGKILL takes its server with it (Linux).

Nothing here imports Prefect: the helper reads Prefect's settings and passes them in.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

KEEPALIVE_ENV = "JUDGEBENCH_SERVER_KEEPALIVE"
DEFAULT_KEEPALIVE = 600.0
START_TIMEOUT_ENV = "JUDGEBENCH_SERVER_START_TIMEOUT"
# A first boot with a fresh PREFECT_HOME on a loaded small machine takes tens of seconds (README,
# Performance): the ceiling is minutes, and progress (CPU used, the port answering) decides first.
DEFAULT_START_TIMEOUT = 600.0
# A server that is alive but used no CPU for this long while not answering is stuck, not slow.
STALL_SECONDS = 120.0
# Below this many cores the server keeps the run's priority: at nice 10 beside two busy processes on
# 2 cores its boot took 12 times longer, which the run waits for anyway.
NICE_MIN_CORES = 4


def seconds_from_env(name: str, default: float) -> float:
    try:
        return max(0.0, float(os.environ.get(name, default)))
    except ValueError:
        return default


def keepalive() -> float:
    return seconds_from_env(KEEPALIVE_ENV, DEFAULT_KEEPALIVE) if _has_flock() else 0.0


def start_timeout(prefect_timeout: float = 0.0) -> float:
    """The ceiling on a boot: ours, or Prefect's own setting when a user raised it above ours."""
    return max(seconds_from_env(START_TIMEOUT_ENV, DEFAULT_START_TIMEOUT), prefect_timeout)


def lower_priority_ok() -> bool:
    return (os.cpu_count() or 1) >= NICE_MIN_CORES


def _has_flock() -> bool:
    try:
        import fcntl  # noqa: F401
    except ImportError:
        return False
    return True


def alive(pid: int | None) -> bool:
    """Running and not a zombie."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def cpu_ticks(pid: int) -> int | None:
    """CPU time used so far by a process (Linux), None where it cannot be read: a boot's sign of progress."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return None


def healthy(api_url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=timeout) as response:
            return response.status == 200
    except OSError:
        return False


def server_key(home: Path, server_env: dict[str, str], version: str) -> str:
    """Runs share a server only when it is the one they would have started themselves."""
    relevant = {
        k: v for k, v in server_env.items() if k.startswith(("PREFECT_SERVER", "PREFECT_API_DATABASE", "PREFECT_HOME"))
    }
    text = json.dumps([str(home), version, sys.executable, sorted(relevant.items())])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Slot:
    """Where one shared server is recorded: PREFECT_HOME/judgebench-server/<key>.{json,lock,leases/}."""

    def __init__(self, home: Path, key: str) -> None:
        self.dir = home / "judgebench-server"
        self.record = self.dir / f"{key}.json"
        self.lock_path = self.dir / f"{key}.lock"
        self.leases = self.dir / f"{key}.leases"

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        import fcntl

        self.leases.mkdir(parents=True, exist_ok=True)
        with open(self.lock_path, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def read(self) -> dict | None:
        try:
            return json.loads(self.record.read_text())
        except (OSError, ValueError):
            return None

    def write(self, record: dict) -> None:
        partial = self.record.with_suffix(".tmp")
        partial.write_text(json.dumps(record))
        partial.replace(self.record)

    def forget(self, supervisor: int) -> None:
        record = self.read()
        if record is not None and record.get("supervisor_pid") == supervisor:
            self.record.unlink(missing_ok=True)

    def lease(self, pid: int) -> None:
        (self.leases / str(pid)).touch()

    def live_leases(self) -> int:
        count = 0
        if not self.leases.is_dir():  # PREFECT_HOME removed: nobody can attach any more
            return 0
        for entry in self.leases.iterdir():
            if entry.name.isdigit() and alive(int(entry.name)):
                count += 1
            else:
                entry.unlink(missing_ok=True)
        return count


def _usable(record: dict, boot_limit: float) -> bool:
    """A recorded server a run may attach to: alive, and answering or still within its boot time."""
    if not (alive(record.get("supervisor_pid")) and alive(record.get("server_pid"))):
        return False
    if healthy(record["api_url"], timeout=5):
        return True
    return time.time() - float(record.get("started", 0)) < boot_limit


def attach_or_start(
    home: Path,
    parent: int,
    server_env: dict[str, str],
    server_argv: list[str],
    port: int,
    version: str,
    told: dict,
    boot_limit: float,
) -> None:
    """In the helper process: tell the run (one JSON line on stdout) which server to use, then exit if it
    attaches to a running one, or become the new server's supervisor."""
    slot = Slot(home, server_key(home, server_env, version))
    with slot.locked():
        record = slot.read()
        if record is not None and _usable(record, boot_limit):
            slot.lease(parent)
            print(
                json.dumps({**told, "api_url": record["api_url"], "server_pid": record["server_pid"], "shared": True}),
                flush=True,
            )
            return
        if record is not None:  # stale: stop what is left of it
            with contextlib.suppress(OSError, TypeError):
                os.kill(int(record["supervisor_pid"]), signal.SIGTERM)
            slot.record.unlink(missing_ok=True)
        os.setsid()  # out of the run's process group: Ctrl-C on the run is not meant for the shared server
        log = os.open(home / "temporary-server.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        server = subprocess.Popen(
            server_argv, env=server_env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, preexec_fn=_server_preexec
        )
        api_url = f"http://127.0.0.1:{port}/api"
        slot.write(
            {"api_url": api_url, "server_pid": server.pid, "supervisor_pid": os.getpid(), "started": time.time()}
        )
        slot.lease(parent)
        print(json.dumps({**told, "api_url": api_url, "server_pid": server.pid, "shared": True}), flush=True)
    os.dup2(log, 1)
    os.dup2(log, 2)
    _supervise(slot, server, keepalive())


def _server_preexec() -> None:
    """In the server process before exec: dies with its supervisor (Linux), lower priority only with cores to spare."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if lower_priority_ok():
        with contextlib.suppress(OSError):
            os.nice(10)


def _supervise(slot: Slot, server: subprocess.Popen, idle_limit: float) -> None:
    supervisor = os.getpid()
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    idle_since = time.monotonic()
    while not stopping and slot.dir.is_dir():
        if server.poll() is not None:
            with slot.locked():
                slot.forget(supervisor)
            os._exit(server.returncode or 0)
        if slot.live_leases():
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since >= idle_limit:
            with slot.locked():
                if slot.live_leases() == 0:  # no run attached since: nobody can attach once the record is gone
                    slot.forget(supervisor)
                    break
        time.sleep(0.5)
    if slot.dir.is_dir():
        with slot.locked():
            slot.forget(supervisor)
    server.terminate()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
    os._exit(0)


__all__ = [
    "DEFAULT_KEEPALIVE",
    "KEEPALIVE_ENV",
    "START_TIMEOUT_ENV",
    "Slot",
    "alive",
    "attach_or_start",
    "cpu_ticks",
    "healthy",
    "keepalive",
    "lower_priority_ok",
    "start_timeout",
]

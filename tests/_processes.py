"""The processes a test session left behind, found by the PREFECT_HOME they were started with (Linux /proc)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

GRACE_SECONDS = 10.0  # after SIGTERM, before SIGKILL


def _home_of(pid: int) -> Path | None:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        if "Z" in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1][:3]:
            return None  # a zombie: already ended
    except OSError:
        return None
    for entry in environ:
        if entry.startswith(b"PREFECT_HOME="):
            return Path(os.fsdecode(entry.removeprefix(b"PREFECT_HOME=")))
    return None


def _own_helper(pid: int) -> bool:
    """This interpreter's multiprocessing resource tracker (started for a local Dask cluster's workers):
    it ends with this process, nothing a test left."""
    try:
        parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        args = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError, IndexError):
        return False
    return parent == os.getpid() and b"multiprocessing.resource_tracker" in args


def processes_of_homes_under(root: Path) -> list[int]:
    """Live processes but this one (and its own helpers) whose PREFECT_HOME lies under `root`."""
    if not Path("/proc/self/environ").exists():
        return []
    root = root.resolve()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        home = _home_of(int(entry.name))
        if home is not None and (home == root or root in home.resolve().parents) and not _own_helper(int(entry.name)):
            found.append(int(entry.name))
    return found


def described(pid: int) -> str:
    """`pid (its command line)`, for the line that names what a test left running."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return str(pid)
    return f"{pid} ({' '.join(os.fsdecode(arg) for arg in args if arg)[:120]})"


def stop_processes_of_homes_under(root: Path) -> list[int]:
    """SIGTERM to each process `processes_of_homes_under(root)`, SIGKILL to any still running after the
    grace; the pids it found."""
    found = processes_of_homes_under(root)
    return stop(found)


def stop(found: list[int]) -> list[int]:
    """SIGTERM to each of `found`, SIGKILL to any still running after GRACE_SECONDS; `found`."""
    for pid in found:
        with_signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    while (left := [pid for pid in found if _home_of(pid) is not None]) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        with_signal(pid, signal.SIGKILL)
    return found


def with_signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass

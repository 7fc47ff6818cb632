"""Attach to a kept Prefect server without a helper process, when nothing that decides Prefect's settings
changed since a helper last read them.

Reading Prefect's settings imports all of Prefect (`prefect.settings` runs `prefect/__init__`): about
0.7 s of CPU idle and seconds on a busy 2-core machine, paid by the helper process on every run although
the run imports Prefect again itself, and the run waited for it before its flow could start. The helper
therefore leaves what it read (result storage, start-up timeout, which kept server these settings use)
under a fingerprint of everything Prefect reads its settings from: the PREFECT_* environment variables,
the profiles file, `.env`, `prefect.toml` and `pyproject.toml` in the working directory, the interpreter
and the installed Prefect. A later run with the same fingerprint whose recorded server is alive and
answering takes its lease itself, with no helper; anything else (a changed setting, no record, a server
that stopped) goes the helper's way as before.

Nothing here imports Prefect.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import sys
from pathlib import Path

from judgebench_flows.cli import local_server

# The files Prefect 3 reads settings from, besides the environment and the profiles file.
SETTINGS_FILES = (".env", "prefect.toml", "pyproject.toml")
# Prefect's names for the local result storage directory (read as given, no `~` expansion). A run may set
# one per run (the benchmark does), so it is read here rather than part of the fingerprint.
STORAGE_ENV = ("PREFECT_RESULTS_LOCAL_STORAGE_PATH", "PREFECT_LOCAL_STORAGE_PATH")
# Settings that change neither the result storage nor which server a run uses (--verbose sets them).
IRRELEVANT_ENV_PREFIXES = ("PREFECT_LOGGING_",)


def _storage_env() -> str | None:
    """The one variable naming the result storage, when exactly one of Prefect's names is set."""
    named = [k for k in os.environ if k.upper() in STORAGE_ENV]
    return named[0] if len(named) == 1 and named[0] in STORAGE_ENV else None


def guessed_home() -> Path:
    """Where remembered settings are kept: PREFECT_HOME as the environment gives it (a home set in a
    profile or `.env` is covered by the fingerprint, and recorded as the real home)."""
    return Path(os.environ.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()


def _file_digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def fingerprint() -> str | None:
    """Everything Prefect's settings are read from, hashed; None when it cannot be told (no Prefect found)."""
    spec = importlib.util.find_spec("prefect")
    if spec is None or not spec.origin:
        return None
    try:
        installed = os.stat(spec.origin).st_mtime_ns
    except OSError:
        return None
    profiles = Path(os.environ.get("PREFECT_PROFILES_PATH") or guessed_home() / "profiles.toml").expanduser()
    cwd = Path.cwd()
    skipped = _storage_env()
    parts = {
        "env": sorted(
            (k, v)
            for k, v in os.environ.items()
            if k.upper().startswith("PREFECT_") and k != skipped and not k.upper().startswith(IRRELEVANT_ENV_PREFIXES)
        ),
        "storage_env": skipped,
        "profiles": [str(profiles), _file_digest(profiles)],
        "files": [[name, _file_digest(cwd / name)] for name in SETTINGS_FILES],
        "cwd": str(cwd),
        "python": sys.executable,
        "prefect": [spec.origin, installed],
        "keepalive": local_server.keepalive(),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24]


def _memo_path(key: str) -> Path:
    # A folder of their own: server records are the *.json files of judgebench-server/.
    return guessed_home() / "judgebench-server" / "settings" / f"{key}.json"


def remember(key: str | None, told: dict, home: Path, slot_key: str) -> None:
    """In the helper: what it read from Prefect's settings, for later runs with the same `fingerprint`
    (taken before Prefect was imported, as the run takes it)."""
    if key is None:
        return
    memo = {
        "told": {k: told[k] for k in ("result_storage", "startup_timeout")},
        "home": str(home),
        "slot_key": slot_key,
    }
    storage_env = _storage_env()
    if (
        storage_env
        and told["result_storage"] is not None
        and told["result_storage"] == str(Path(os.environ[storage_env]))
    ):
        memo["storage_env"] = storage_env  # the storage follows that variable
    elif storage_env:
        return  # set, yet not what Prefect used (e.g. a storage block): let the helper read it every time
    path = _memo_path(key)
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        partial.write_text(json.dumps(memo))
        partial.replace(path)


def attach(run_pid: int) -> dict | None:
    """In the run: the helper's answer (as `PrefectStart.settings` reads it) when a kept server for these
    settings is alive and answering, with the run's lease taken; None to ask a helper instead."""
    if os.environ.get("PREFECT_API_URL") or not local_server.keepalive():
        return None
    key = fingerprint()
    if key is None:
        return None
    try:
        memo = json.loads(_memo_path(key).read_text())
        slot = local_server.Slot(Path(memo["home"]), str(memo["slot_key"]))
        told = dict(memo["told"])
        if memo.get("storage_env"):
            told["result_storage"] = str(Path(os.environ[memo["storage_env"]]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not slot.record.exists():
        return None
    with slot.locked():
        record = slot.read()
        if not record or not (
            local_server.alive(record.get("supervisor_pid")) and local_server.alive(record.get("server_pid"))
        ):
            return None
        if not local_server.healthy(record["api_url"], timeout=5):  # booting or stuck: the helper's way decides
            return None
        slot.lease(run_pid)
    return {**told, "api_url": record["api_url"], "server_pid": record["server_pid"], "shared": True}


__all__ = ["attach", "fingerprint", "remember"]

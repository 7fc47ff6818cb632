"""Output paths checked before the first call, and output file names the filesystem always accepts.

A run writes its results only after every call is paid for; an output directory that is a file, a result
path under a file or a name too long for the filesystem must therefore be found before it starts.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from pydantic import JsonValue

from judgebench_flows.core.errors import PathNotWritable, UserError
from judgebench_flows.data import storage

# Most filesystems allow 255 bytes per name; leave room for the temporary prefix/suffix of atomic writes.
MAX_NAME_BYTES = 200


def short_name(name: str, suffix: str = "") -> str:
    """`name + suffix`, or when that is too long for a file name, a readable prefix of `name` plus a hash
    of all of it (two long names that share the prefix still get different files)."""
    if len((name + suffix).encode()) <= MAX_NAME_BYTES:
        return name + suffix
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    room = MAX_NAME_BYTES - len(suffix.encode()) - len(digest) - 1
    prefix = name.encode()[:room].decode("utf-8", errors="ignore")
    return f"{prefix}-{digest}{suffix}"


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(".")


PROBE_BYTES = 4096  # a block: creating an empty file succeeds on a full disk, writing a block does not


def _probe_writable(option: str, directory: Path, shown: str) -> None:
    """Create, write, sync and remove a file in `directory`: permission bits alone do not tell (root,
    read-only mounts), nor does an empty file (a full disk). `PathNotWritable` (exit 8) otherwise."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".judgebench-probe-", dir=directory)
    except OSError as exc:
        raise PathNotWritable.of(option, shown, exc) from None
    try:
        os.write(fd, b"\0" * PROBE_BYTES)
        os.fsync(fd)
    except OSError as exc:
        raise PathNotWritable.of(option, shown, exc) from None
    finally:
        os.close(fd)
        os.unlink(probe)


def check_directory(option: str, path: str) -> None:
    """`path` is, or can be made, a writable directory: nothing on the way to it is a file. A URL: its
    store takes a probe object there (known scheme, bucket there, credentials accepted)."""
    if storage.is_url(path):
        storage.probe_writable(option, _before_run_field(path))
        return
    target = Path(path).expanduser()
    existing = _nearest_existing(target)
    if not existing.is_dir():
        what = "is a file" if existing == target else f"is under '{existing}', which is a file"
        raise UserError(f"{option}: '{path}' {what}, not a directory")
    _probe_writable(option, existing, path)


def check_file(option: str, path: str) -> None:
    """`path` can be written as a file: not a directory, and its directory can be made and written."""
    if storage.is_url(path):
        if not storage.name(path):
            raise UserError(f"{option}: '{storage.shown(path)}' is not a usable object name")
        check_directory(option, storage.parent(path))
        return
    target = Path(path).expanduser()
    if target.is_dir():
        raise UserError(f"{option}: '{path}' is a directory, not a file")
    if not target.name or len(target.name.encode()) > 255:
        raise UserError(f"{option}: '{path}' is not a usable file name")
    check_directory(option, str(target.parent))


RUN_ID_FIELD = "{run_id}"  # in --result-path / --output-dir: replaced by the run's id
LATEST = "latest"  # beside the run folders: a link (an object naming it, in a store) to the newest good run's
RESULTS_FILE = "results.json"  # a run's results, from the CLI and deployments alike
OLD_RESULTS_FILE = "judgebench.json"  # the CLI's name before 0.1 (issue 45): still read
FAILED_MARK = "FAILED"  # in a failed run's folder: the reason, one line (its results.json says so too)
SEARCHED_RUNS = 50  # how many of the newest run folders are searched for a flow run's results


def run_folders_root(path: str) -> str:
    """Where a layout's run folders are: `s3://b/nightly/cell/{run_id}` -> `s3://b/nightly/cell`."""
    return _before_run_field(path)


def _before_run_field(path: str) -> str:
    """The part of a layout that exists before any run: `s3://b/runs/{run_id}/x` -> `s3://b/runs`."""
    return path.split(RUN_ID_FIELD, 1)[0].rstrip("/") or path


def for_run(path: str, run_id: str) -> str:
    """`path` with `{run_id}` replaced: each run writes its own folder, never a past run's files."""
    return path.replace(RUN_ID_FIELD, run_id)


def read_results(path: str | Path) -> dict[str, JsonValue] | None:
    """A results file (a path or an object-store URL), or None when it cannot be read; a run folder's
    `results.json` written by an earlier version under its old name (`judgebench.json`) is read too."""
    candidates = [str(path)]
    if storage.name(str(path)) == RESULTS_FILE:
        candidates.append(storage.join(storage.parent(str(path)), OLD_RESULTS_FILE))
    for candidate in candidates:
        try:
            return json.loads(storage.read_text(candidate))
        except (OSError, ValueError):
            continue
    return None


def latest_results(result_path: str) -> dict[str, JsonValue] | None:
    """The results.json of the newest run of a per-run layout that finished with results (through
    `latest`), or None when none can be read."""
    try:
        return read_results(resolve_latest(result_path))
    except (OSError, ValueError):  # no `latest` pointer object yet
        return None


def published_files(result_path: str) -> Iterator[str]:
    """The results.json files the runs of a per-run layout may have published, finished or failed, newest
    first (the newest SEARCHED_RUNS folders; `result_path` itself without `{run_id}`). Reading and checking
    them is `scoring.run_results.published_results`: this layer does not know results.json's model."""
    if RUN_ID_FIELD not in result_path:
        yield result_path
        return
    pattern = for_run(result_path, "*")
    patterns = [pattern, storage.join(storage.parent(pattern), OLD_RESULTS_FILE)]
    if storage.name(pattern) != RESULTS_FILE:
        patterns = patterns[:1]
    if storage.is_url(pattern):  # an object store: no modification order to trust, every folder is read
        fs, _ = storage.filesystem(pattern)
        prefix = storage.scheme_of(pattern) + "://"
        paths: list[str] = [prefix + key for p in patterns for key in fs.glob(storage.filesystem(p)[1])]
    else:
        paths = sorted((p for one in patterns for p in glob.glob(one)), key=_modified, reverse=True)
    yield from [p for p in paths if storage.name(storage.parent(p)) != LATEST][:SEARCHED_RUNS]


def mark_failed(folder: str | Path, reason: str) -> None:
    """A failed run's folder says so at a glance (`FAILED`, with the reason); `latest` never points at it."""
    try:
        storage.write_text(storage.join(folder, FAILED_MARK), " ".join(reason.split()) + "\n")
    except OSError:
        pass  # its results.json says `"status": "failed"` too


def _modified(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def resolve_latest(layout: str) -> str:
    """`layout` (a path with `{run_id}`) for the newest run: through the `latest` link on a filesystem,
    through the `latest` pointer object's content (the run folder's name) in an object store."""
    if not storage.is_url(layout) or RUN_ID_FIELD not in layout:
        return for_run(layout, LATEST)
    segments = layout.split("/")
    named = next(i for i, segment in enumerate(segments) if RUN_ID_FIELD in segment)
    pointer = "/".join([*segments[:named], LATEST])
    segments[named] = storage.read_text(pointer).strip()
    return for_run("/".join(segments), LATEST)


def point_latest(layout: str, run_id: str) -> str | Path | None:
    """Where the output directory is named by run id (`results/{run_id}`), make `results/latest` a
    relative link to this run's folder (replaced atomically); in an object store, an object holding the
    folder's name. Returns where `latest` is, or None where the layout names no run folder or the
    filesystem has no links (nothing is lost: the run's folder is complete)."""
    if storage.is_url(layout):
        segments = layout.rstrip("/").split("/")
        at = next((i for i, segment in enumerate(segments) if RUN_ID_FIELD in segment), None)
        if at is None:
            return None
        return storage.write_text("/".join([*segments[:at], LATEST]), for_run(segments[at], run_id) + "\n")
    parts = Path(layout).parts
    named = next((i for i, part in enumerate(parts) if RUN_ID_FIELD in part), None)
    if named is None:
        return None
    link = Path(*parts[:named], LATEST)
    fresh = link.with_name(f".{LATEST}-{run_id}")
    try:
        fresh.unlink(missing_ok=True)
        os.symlink(for_run(parts[named], run_id), fresh, target_is_directory=True)
        os.replace(fresh, link)
    except OSError:
        return None
    return link


__all__ = [
    "FAILED_MARK",
    "LATEST",
    "OLD_RESULTS_FILE",
    "RESULTS_FILE",
    "MAX_NAME_BYTES",
    "RUN_ID_FIELD",
    "check_directory",
    "check_file",
    "for_run",
    "latest_results",
    "mark_failed",
    "published_files",
    "read_results",
    "point_latest",
    "resolve_latest",
    "run_folders_root",
    "short_name",
]

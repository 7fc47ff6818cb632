"""Fetch the benchmark with a real `git clone`, pinned to a ref, cached between runs.

Only http(s), ssh (including scp-like `user@host:path`), git, file URLs and local paths are accepted, and
the URL always goes after `--`: a URL that looks like an option or uses `ext::` could otherwise make git
run commands. Credentials in a URL are never written anywhere: `public_url` strips them.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard
from urllib.parse import unquote, urlsplit

from judgebench_flows.core.config_defaults import DEFAULT_REF
from judgebench_flows.core.config_defaults import (
    DEFAULT_REPO_URL as DEFAULT_REPO_URL,  # re-exported: callers know it as the dataset's default
)
from judgebench_flows.core.credentials import public_url
from judgebench_flows.core.credentials import resolve as resolve_credentials
from judgebench_flows.core.errors import UserError

DEFAULT_CACHE_DIR = Path(os.environ.get("JUDGEBENCH_CACHE_DIR", Path.home() / ".cache" / "judgebench-flows"))
GIT_TIMEOUT_S = 600

_SCHEMES = ("https://", "http://", "ssh://", "git://", "file://")
_SCP_LIKE = re.compile(r"^[\w.-]+@[\w.-]+:[^/].*$|^[\w.-]+@[\w.-]+:/.*$")
_FULL_SHA = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
class Checkout:
    path: Path
    commit: str
    repo_url: str  # without credentials

    @property
    def templates_dir(self) -> Path:
        """Where JudgeBench keeps its judge prompt templates."""
        return self.path / "utils" / "templates"


def is_pinned(ref: str | None) -> TypeGuard[str]:
    """A full commit id: its checkout never changes, so a cached clone is reused without the network."""
    return bool(ref and _FULL_SHA.match(ref))


def check_repo_url(url: str) -> str:
    """Accept a URL git can clone safely; reject option-looking and transport-helper URLs."""
    url = url.strip()
    if not url or url.startswith("-"):
        raise UserError(f"--repo-url '{public_url(url)}' is not a repository URL")
    if "::" in url.split("/", 1)[0] or url.lower().startswith("ext:"):
        raise UserError(f"--repo-url '{public_url(url)}' uses a git transport helper, which is not allowed")
    if url.lower().startswith(_SCHEMES) or _SCP_LIKE.match(url):
        return url
    if "://" in url:
        raise UserError(
            f"--repo-url '{public_url(url)}': only http(s), ssh, git and file URLs or local paths are accepted"
        )
    path = Path(url).expanduser()
    if not path.exists():
        raise UserError(f"--repo-url: no repository at local path '{url}'")
    if path.is_dir() and not _is_repository(path):
        raise UserError(
            f"--repo-url: '{url}' is a folder but not a git repository: make it one "
            f"(cd {url} && git init -q && git add -A && git commit -qm JudgeBench) and pass --ref HEAD, "
            f"or judge one of its files with --data-path {url}/data/FILE.jsonl --templates-dir {url}/utils/templates"
        )
    return str(path.resolve())


def _is_repository(path: Path) -> bool:
    """A work tree's top or a bare repository: what `git clone PATH` takes (a folder inside a work tree is not)."""
    return (path / ".git").exists() or ((path / "HEAD").is_file() and (path / "objects").is_dir())


def _git(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "LC_ALL": "C"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=GIT_TIMEOUT_S)


def _last_line(result: subprocess.CompletedProcess[str], url: str) -> str:
    lines = [line for line in (result.stderr or result.stdout).splitlines() if line.strip()]
    fatal = [line for line in lines if line.startswith("fatal:")]  # git's reason; later lines are hints
    text = (fatal or lines)[-1] if lines else f"git exited with {result.returncode}"
    return text.replace(url, public_url(url))


def _head(path: Path) -> str | None:
    result = _git("rev-parse", "HEAD", cwd=path)
    return result.stdout.strip() if result.returncode == 0 else None


def _forget_credentials(url: str, target: Path) -> None:
    """`git clone` saves the URL it was given as remote.origin.url, in the cache for good; keep only the
    credential-free form there (a pinned `git fetch` stores no remote and anonymizes FETCH_HEAD itself)."""
    if public_url(url) != url:
        _git("remote", "set-url", "origin", public_url(url), cwd=target)


def _clone_into(url: str, ref: str | None, target: Path) -> None:
    """Shallow where the ref allows: a branch or tag with --depth 1, a commit by a shallow fetch of it."""
    shown = public_url(url)
    if ref and re.fullmatch(r"[0-9a-fA-F]{7,40}", ref):
        _git("init", "-q", str(target))
        if len(ref) == 40 and _git("fetch", "-q", "--depth", "1", "--", url, ref, cwd=target).returncode == 0:
            if _git("checkout", "-q", "--detach", "FETCH_HEAD", cwd=target).returncode == 0:
                return
        shutil.rmtree(target)
        result = _git("clone", "-q", "--no-checkout", "--", url, str(target))
        if result.returncode != 0:
            raise UserError(f"cannot clone {shown}: {_last_line(result, url)}")
        _forget_credentials(url, target)
        result = _git("checkout", "-q", "--detach", ref, cwd=target)
        if result.returncode != 0:
            raise UserError(f"ref '{ref}' not found in {shown}{_local_hint(url)}")
        return
    args = ["clone", "-q", "--depth", "1"] + (["--branch", ref] if ref else []) + ["--", url, str(target)]
    result = _git(*args)
    if result.returncode != 0:
        message = _last_line(result, url)
        if ref and "not found in upstream" in message:  # not a branch or tag name: HEAD~1, a remote's HEAD
            shutil.rmtree(target, ignore_errors=True)
            result = _git("clone", "-q", "--no-checkout", "--", url, str(target))
            if result.returncode != 0:
                raise UserError(f"cannot clone {shown}: {_last_line(result, url)}")
            _forget_credentials(url, target)
            if _git("checkout", "-q", "--detach", ref, cwd=target).returncode != 0:
                raise UserError(f"ref '{ref}' not found in {shown}")
            return
        raise UserError(f"cannot clone {shown}: {message}")
    _forget_credentials(url, target)


def _local_source(url: str) -> Path | None:
    """The directory of a repository on this machine (a file:// URL or a path), else None."""
    if url.lower().startswith("file://"):
        return Path(unquote(urlsplit(url).path))
    if "://" not in url and not _SCP_LIKE.match(url) and Path(url).exists():
        return Path(url)
    return None


def _local_hint(url: str) -> str:
    """For a repository on this machine, what its HEAD is: a copy committed by hand lacks the pinned commit."""
    source = _local_source(url)
    head = _head(source) if source is not None and source.is_dir() else None
    return f" (its HEAD is {head[:12]}: --ref HEAD judges that)" if head else ""


def _resolve_local_ref(url: str, ref: str) -> str:
    """Any revision git understands (HEAD, HEAD~1, a short SHA, a tag, a branch) of a repository on this
    machine, as the full commit id it names now: a clone cannot ask for `HEAD~1`, and a moving ref such
    as HEAD must not be served from the clone of an older commit. Remote refs are left to the clone."""
    source = _local_source(url)
    if source is None or not source.is_dir():  # not there: the clone says so
        return ref
    result = _git("rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}", cwd=source)
    commit = result.stdout.strip()
    if result.returncode != 0 or not _FULL_SHA.match(commit):
        raise UserError(f"ref '{ref}' not found in {public_url(url)}")
    return commit


def fetch_repository(url: str, ref: str | None = DEFAULT_REF, cache_dir: str | Path | None = None) -> Checkout:
    """Clone `url` at `ref` into the cache; a pinned commit already there is reused without the network."""
    url = check_repo_url(url)
    if ref is not None and (not ref.strip() or ref.startswith("-")):
        raise UserError(f"--ref '{ref}' is not a git ref")
    if ref is not None and not is_pinned(ref):
        ref = _resolve_local_ref(url, ref)
    root = Path(cache_dir or DEFAULT_CACHE_DIR) / "repos"
    root.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(f"{url}\0{ref or ''}".encode()).hexdigest()[:20]
    target = root / key
    if is_pinned(ref) and target.is_dir() and _head(target) == ref:
        return Checkout(target, ref, public_url(url))
    staging = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=root))
    try:
        clone_dir = staging / "repo"
        _clone_into(resolve_credentials(url), ref, clone_dir)
        commit = _head(clone_dir)
        if commit is None:
            raise UserError(f"cloned {public_url(url)} but found no commit at '{ref or 'HEAD'}'")
        # Swap in atomically so a concurrent run never sees a half-written checkout.
        old = root / f"{key}.old.{os.getpid()}"
        if target.exists():
            target.rename(old)
        clone_dir.rename(target)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Checkout(target, commit, public_url(url))


def data_file_in(checkout: Checkout, data_file: str) -> Path:
    """The data file inside the checkout (under data/ or at the given relative path), or a clear error."""
    candidates = [checkout.path / data_file, checkout.path / "data" / data_file]
    for candidate in candidates:
        resolved = candidate.resolve()
        if resolved.is_file() and checkout.path.resolve() in resolved.parents:
            return resolved
    available = (
        sorted(p.name for p in (checkout.path / "data").glob("*.jsonl")) if (checkout.path / "data").is_dir() else []
    )
    raise UserError(
        f"data file '{data_file}' not found in {checkout.repo_url} at {checkout.commit[:12]} (available: {', '.join(available) or 'none'})"
    )

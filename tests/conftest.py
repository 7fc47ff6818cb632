"""Shared fixtures: a real JudgeBench git repository, a real OpenAI-compatible server, a real Prefect server.

Nothing here is a mock. `judgebench_repo` copies the JudgeBench data (tests/_benchmark_data.py says where
it comes from: JUDGEBENCH_TEST_DATA, ../shared/judgebench, or a pinned clone) into a temporary git repository
that the flow clones like any remote; `oracle_server` answers every prompt with the labelled verdict in
the judge's own format; `prefect_server` starts one temporary Prefect API for the whole session and
exports PREFECT_API_URL so CLI subprocesses use it too (instead of each booting its own).
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import tempfile
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from judgebench_flows.testing.oracle import VERDICTS, oracle_responder, shown_pair  # noqa: F401 - the tests import them from here
from tests._benchmark_data import (
    BESIDE_REPO,
    ENV_VAR,
    GPT4O_FILE,
    LLMBAR_ENV_VAR,
    LLMBAR_FILE,
    LLMBAR_MISSING,
    MISSING_DATA,
    find_benchmark_data,
    find_llmbar_data,
)

SHARED = find_benchmark_data() or BESIDE_REPO
CLAUDE_FILE = "dataset=judgebench,response_model=claude-3-5-sonnet-20240620.jsonl"
CANARY_KEY = "sk-canary-5f3e9a1b7c2d4e6f8a0b"


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# A run without PREFECT_API_URL uses (or starts) Prefect's background server on this port: never on
# Prefect's default 4200, which other servers on the machine use (tests/_runs.py gives each test its own).
os.environ.setdefault("PREFECT_SERVER_API_PORT", str(_free_port()))

# Tokenizers and models come from local folders only: a name that is not one is an error at once, not
# Hugging Face Hub lookups retried for tens of seconds (or a download) on a machine with a network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def shared_data_available() -> bool:
    return (SHARED / "data" / GPT4O_FILE).is_file()


# The one reason every test that needs the benchmark skips with: how to supply it.
NO_DATA_REASON = (
    f"{ENV_VAR}={os.environ[ENV_VAR]} has no data/{GPT4O_FILE}: point it at a JudgeBench checkout"
    if os.environ.get(ENV_VAR, "none") != "none" and not shared_data_available()
    else MISSING_DATA
)
requires_shared = pytest.mark.skipif(not shared_data_available(), reason=NO_DATA_REASON)

LLMBAR = find_llmbar_data()


def llmbar_data_available() -> bool:
    return (LLMBAR / LLMBAR_FILE).is_file()


NO_LLMBAR_REASON = (
    f"{LLMBAR_ENV_VAR}={os.environ[LLMBAR_ENV_VAR]} has no {LLMBAR_FILE}: point it at an LLMBar checkout"
    if os.environ.get(LLMBAR_ENV_VAR, "none") != "none" and not llmbar_data_available()
    else LLMBAR_MISSING
)
requires_llmbar = pytest.mark.skipif(not llmbar_data_available(), reason=NO_LLMBAR_REASON)


def git(*args: str, cwd: Path) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def make_repo(path: Path, files: dict[str, str] | None = None, copy_shared: bool = True) -> str:
    """A git repository at `path` (JudgeBench's layout); returns its commit SHA."""
    import shutil

    if copy_shared:
        shutil.copytree(SHARED, path, ignore=shutil.ignore_patterns(".git"))
    path.mkdir(parents=True, exist_ok=True)
    for name, text in (files or {}).items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git("init", "-q", "-b", "main", cwd=path)
    git("add", "-A", cwd=path)
    git("commit", "-q", "-m", "data", cwd=path)
    return git("rev-parse", "HEAD", cwd=path)


@pytest.fixture(scope="session")
def judgebench_repo(tmp_path_factory) -> tuple[str, str]:
    """(file:// URL, commit) of a git copy of the JudgeBench data (SHARED)."""
    if not shared_data_available():
        pytest.skip(NO_DATA_REASON)
    path = tmp_path_factory.mktemp("remote") / "JudgeBench"
    sha = make_repo(path)
    return f"file://{path}", sha


def load_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="session")
def gpt4o_pairs() -> list[dict]:
    if not shared_data_available():
        pytest.skip(NO_DATA_REASON)
    return load_jsonl(SHARED / "data" / GPT4O_FILE)


@pytest.fixture()
def fake_server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer("My final verdict is [[A>B]]") as server:
        yield server


@pytest.fixture(scope="session", autouse=True)
def no_process_left_behind(tmp_path_factory) -> Iterator[None]:
    """Every process still running at the session's end whose PREFECT_HOME the session created (under its
    temporary directory) is stopped: a Prefect background server a run started in a test's home outlives the
    test that forgot it, and a newcomer's test run would leave it behind (hundreds of MB, busy at times).
    Torn down last (set up first), after the session's own Prefect server has stopped; says what it stopped."""
    root = tmp_path_factory.getbasetemp()
    yield
    from tests._processes import described, processes_of_homes_under, stop

    left = processes_of_homes_under(root)
    if left:  # in the warnings summary: a test left them, and should stop what it starts
        said = "; ".join(described(pid) for pid in left)
        stop(left)
        warnings.warn(f"stopped {len(left)} process(es) that tests left running: {said}", stacklevel=1)


@pytest.fixture(autouse=True)
def process_state_put_back(request) -> Iterator[None]:
    """Prefect's logging variables and Ctrl-C's handler as they were before each test: a test that leaves
    one changed (the quiet settings of `runtime.quiet`, a level; an ignored SIGINT, which subprocesses
    inherit) changes what later tests' subprocesses do (a whole-suite run once hid every INFO line a later
    test counted). The test that left one is named in the warnings."""
    before = {k: v for k, v in os.environ.items() if k.startswith("PREFECT_LOGGING_")}
    interrupt = signal.getsignal(signal.SIGINT)
    yield
    if (
        interrupt is not None and signal.getsignal(signal.SIGINT) is not interrupt
    ):  # subprocesses inherit an ignored one
        signal.signal(signal.SIGINT, interrupt)
        warnings.warn(f"{request.node.nodeid} left SIGINT's handler changed: put back", stacklevel=1)
    after = {k: v for k, v in os.environ.items() if k.startswith("PREFECT_LOGGING_")}
    if after != before:
        for key in after.keys() - before.keys():
            del os.environ[key]
        os.environ.update(before)
        changed = sorted(k for k in after.keys() | before.keys() if after.get(k) != before.get(k))
        warnings.warn(f"{request.node.nodeid} left {', '.join(changed)} changed: put back", stacklevel=1)


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory) -> Iterator[str]:
    """One temporary Prefect API server for the session; its URL is exported for subprocesses."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    home = tmp_path_factory.mktemp("prefect-home")
    os.environ["PREFECT_HOME"] = str(home)
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    with prefect_test_harness(server_startup_timeout=600):  # a first boot on a busy 2-core machine: tens of seconds
        url = PREFECT_API_URL.value()
        os.environ["PREFECT_API_URL"] = url
        try:
            yield url
        finally:
            os.environ.pop("PREFECT_API_URL", None)


@pytest.fixture(scope="module")
def release_prefect_workers() -> Iterator[None]:
    """Flows run in this process bind Prefect's event and log workers to the session's server; stop them
    after the module, so a later module that starts a server of its own gets workers bound to that one."""
    yield
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for worker in (EventsWorker, APILogWorker):
        worker.drain_all(timeout=10)


@pytest.fixture()
def run_cli(tmp_path, prefect_server) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run `judgebench ...` as a user would, in a subprocess, against the session's Prefect server."""

    def run(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        full_env = {
            **os.environ,
            "OPENAI_API_KEY": CANARY_KEY,
            "JUDGEBENCH_CACHE_DIR": str(tmp_path / "cache"),
            **(env or {}),
        }
        return subprocess.run(
            [sys.executable, "-m", "judgebench_flows.cli.main", *args],
            cwd=tmp_path,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run


def pytest_addoption(parser) -> None:
    parser.addoption(
        "--file-order",
        default="long-first",
        help="order of the test files: long-first (default), reversed (of long-first), or shuffle:SEED; "
        "each file's tests keep their order. A test that passes only in one order depends on another's leftovers.",
    )


def pytest_collection_modifyitems(config, items) -> None:
    """A test that needs a Prefect server runs whole flows: it belongs to the full suite, not the quick
    loop (`pytest -m "not slow"`), whether or not its author remembered the mark."""
    for item in items:
        if "prefect_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
    _long_files_first(items)
    _file_order(items, config.getoption("--file-order"))


def _file_order(items: list[pytest.Item], order: str) -> None:
    """`--file-order reversed` or `shuffle:SEED`: the files in another order, each file's tests in theirs."""
    if order == "long-first":
        return
    files = list(dict.fromkeys(item.path for item in items))
    if order == "reversed":
        files.reverse()
    elif order.startswith("shuffle:") and order.removeprefix("shuffle:").isdigit():
        import random

        random.Random(int(order.removeprefix("shuffle:"))).shuffle(files)
    else:
        raise pytest.UsageError(f"--file-order {order}: expected long-first, reversed or shuffle:SEED")
    rank = {path: n for n, path in enumerate(files)}
    items.sort(key=lambda item: rank[item.path])


def _long_files_first(items: list[pytest.Item]) -> None:
    """Files with the most slow tests first, each file's tests in their order: the suite's workers
    (pytest-xdist, `--dist loadfile` in pyproject.toml) start on the long files (Prefect servers,
    workers, Dask) and end on short ones, instead of one worker finishing a long file alone."""
    slow = Counter(item.path for item in items if item.get_closest_marker("slow"))
    items.sort(key=lambda item: -slow[item.path])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Every skip for want of the benchmark data reported at one place, so the summary folds them into one
    line that says how to supply it (instead of one line per test file and line)."""
    report = yield
    if report.skipped and isinstance(report.longrepr, tuple) and report.longrepr[2].endswith(NO_DATA_REASON):
        report.longrepr = (str(Path(__file__).with_name("_benchmark_data.py")), 1, f"Skipped: {NO_DATA_REASON}")
    return report


# The machine's PostgreSQL is shared by the suite's workers, and the outage tests stop it
# (tests/test_database_outage.py): a file of them holds this lock exclusively, a file of tests that use
# PostgreSQL holds it shared, each for the whole file (its module fixtures too: a Prefect server on
# PostgreSQL lives across a file's tests), so no outage lands in another worker's test.
PG_LOCK = Path(tempfile.gettempdir()) / "judgebench-tests-postgresql.lock"
_pg_held: list[tuple[int, int]] = []  # (the lock file's descriptor, LOCK_SH or LOCK_EX) while held


def _postgresql_use(item: pytest.Item) -> int | None:
    if item.get_closest_marker("pg_outage"):
        return fcntl.LOCK_EX
    if item.get_closest_marker("postgres") or "postgresql_url" in getattr(item, "fixturenames", ()):
        return fcntl.LOCK_SH
    return None


def _hold_postgresql(mode: int | None) -> None:
    if _pg_held and _pg_held[0][1] == mode:
        return
    while _pg_held:
        fd, _ = _pg_held.pop()
        os.close(fd)  # closing the descriptor releases its lock
    if mode is not None:
        fd = os.open(PG_LOCK, os.O_RDWR | os.O_CREAT, 0o666)
        fcntl.flock(fd, mode)  # waits while another worker's file holds it the other way
        _pg_held.append((fd, mode))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Each test file's use of PostgreSQL held from its first such test to its last test's teardown."""
    uses = _postgresql_use(item)
    if uses is not None and not (_pg_held and _pg_held[0][1] == fcntl.LOCK_EX):  # exclusive covers shared
        _hold_postgresql(uses)
    try:
        return (yield)
    finally:
        if nextitem is None or nextitem.path != item.path:
            _hold_postgresql(None)

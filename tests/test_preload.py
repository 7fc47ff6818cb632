"""A command forked from a preloaded process (cli/preload.py) behaves as the command started cold.

Real processes throughout: `judgebench run` in a subprocess leaves a preloaded process behind, the next
command with the same code and settings is forked from it, and the bundled endpoint counts every call.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from judgebench_flows.cli import preload
from judgebench_flows.cli.local_server import alive
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests.conftest import CANARY_KEY, GPT4O_FILE, SHARED, requires_shared

pytestmark = [
    requires_shared,
    pytest.mark.skipif(not preload._supported(), reason="preloading needs fork and Unix sockets (Linux)"),
]
# A preloaded process imports Prefect, openai and SQLAlchemy: seconds on a busy 2-core machine.
READY_TIMEOUT = 240.0


@pytest.fixture()
def workdir(tmp_path: Path, prefect_server: str):
    pairs = (SHARED / "data" / GPT4O_FILE).read_text().splitlines(keepends=True)[:6]
    (tmp_path / "pairs.jsonl").write_text("".join(pairs))
    yield tmp_path
    preload.stop(cwd=str(tmp_path))


def command(workdir: Path, base_url: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "judgebench_flows.cli.main",
        "run",
        "--model",
        "judge",
        "--data-path",
        str(workdir / "pairs.jsonl"),
        "--base-url",
        base_url,
        "--no-progress",
        "--result-path",
        str(workdir / "results.json"),
        "--output-dir",
        str(workdir / "out"),
        "--db-url",
        f"sqlite:///{workdir}/results.db",
        *extra,
    ]


def environment(workdir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "OPENAI_API_KEY": CANARY_KEY,
        "JUDGEBENCH_CACHE_DIR": str(workdir / "cache"),
        "JUDGEBENCH_PRELOAD_KEEPALIVE": "300",
    }


def run(workdir: Path, base_url: str, *extra: str, preloading: bool = True) -> subprocess.CompletedProcess[str]:
    env = environment(workdir)
    if not preloading:
        env["JUDGEBENCH_PRELOAD_KEEPALIVE"] = "0"
    return subprocess.run(
        command(workdir, base_url, *extra),
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def serving(workdir: Path, timeout: float = READY_TIMEOUT) -> dict:
    """The record of the preloaded process for this working directory, once it serves."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [r for r in preload.records() if r.get("cwd") == str(workdir) and r.get("ready")]
        if found:
            return found[0]
        time.sleep(0.2)
    raise AssertionError(f"no preloaded process for {workdir} within {timeout:g} s")


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} within {timeout:g} s")


def without_run_ids(text: str) -> list[str]:
    return [line for line in text.splitlines() if "against run" not in line and "run id" not in line]


def test_a_command_forked_from_the_preloaded_process_says_what_a_cold_one_says(workdir: Path) -> None:
    with FakeOpenAIServer("My final verdict is [[A>B]]") as server:
        cold = run(workdir, server.base_url)
        assert cold.returncode == 0, cold.stderr
        paid = server.requests
        assert paid == 12
        record = serving(workdir)
        assert record["served"] == 0
        cold_rerun = run(workdir, server.base_url, preloading=False)
        assert cold_rerun.returncode == 0, cold_rerun.stderr
        cold_results = json.loads((workdir / "results.json").read_text())

        warm = run(workdir, server.base_url)
        assert warm.returncode == 0, warm.stderr
        assert serving(workdir)["served"] == 1  # this command was forked, not started cold
        assert server.requests == paid  # every answer came from the cache, as on a cold re-run
        assert "12 from cache" in warm.stdout
        assert without_run_ids(warm.stdout) == without_run_ids(cold_rerun.stdout)
        assert warm.stderr == cold_rerun.stderr
        warm_results = json.loads((workdir / "results.json").read_text())
        assert {k: v for k, v in warm_results.items() if not any(w in k for w in ("run", "time", "regression"))} == {
            k: v for k, v in cold_results.items() if not any(w in k for w in ("run", "time", "regression"))
        }

        bad = run(workdir, server.base_url, "--concurrency", "0")
        assert bad.returncode == 2
        assert bad.stderr.strip().splitlines() == [
            "error: --concurrency: Input should be greater than or equal to 1 (got 0)"
        ]
        assert bad.stdout == ""

        verbose = run(workdir, server.base_url, "--verbose")  # Prefect's logging set up again, at INFO
        assert verbose.returncode == 0, verbose.stderr
        assert "INFO" in verbose.stderr and "Finished in state Completed" in verbose.stderr
        quiet = run(workdir, server.base_url)
        assert quiet.returncode == 0 and "INFO" not in quiet.stderr
        assert serving(workdir)["served"] == 4
        assert CANARY_KEY not in Path(f"/proc/{record['pid']}/environ").read_bytes().decode(errors="replace")


def test_the_forked_child_ends_with_its_caller(workdir: Path) -> None:
    with FakeOpenAIServer("My final verdict is [[A>B]]", latency=60) as server:
        with FakeOpenAIServer("My final verdict is [[A>B]]") as quick:
            assert run(workdir, quick.base_url).returncode == 0  # leaves the preloaded process
        record = serving(workdir)
        for how in (signal.SIGKILL, signal.SIGINT):
            seen = server.requests
            caller = subprocess.Popen(
                command(workdir, server.base_url, "--model", f"slow-{how.name}"),
                cwd=workdir,
                env=environment(workdir),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            wait_until(lambda seen=seen: server.requests > seen, 120, "no call reached the endpoint")
            forked = children(record["pid"])
            assert len(forked) == 1
            caller.send_signal(how)
            _, stderr = caller.communicate(timeout=120)
            if how == signal.SIGINT:  # forwarded: the run stops as a cold one does on Ctrl-C
                assert caller.returncode == 130
                assert "interrupted" in stderr
            wait_until(lambda forked=forked: not alive(forked[0]), 60, "the forked child outlived its caller")


def test_changed_code_is_never_served(workdir: Path) -> None:
    source = Path(preload.__file__)
    before = preload.key()
    stat = source.stat()
    try:
        os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        assert preload.key() != before
    finally:
        os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert preload.key() == before

    with FakeOpenAIServer("My final verdict is [[A>B]]") as server:
        assert run(workdir, server.base_url).returncode == 0
        record = serving(workdir)
        try:
            os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
            wait_until(lambda: not alive(record["pid"]), 60, "the preloaded process kept serving old code")
            assert not list(preload._folder().glob(f"{record['key']}.*"))  # no socket, lock or record left
        finally:
            os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_per_run_result_storage_and_logging_keep_the_key_other_settings_change_it(monkeypatch) -> None:
    monkeypatch.setenv("JUDGEBENCH_PRELOAD_KEEPALIVE", "300")
    monkeypatch.setenv("PREFECT_LOCAL_STORAGE_PATH", "/tmp/run-1/storage")
    base = preload.key()
    monkeypatch.setenv("PREFECT_LOCAL_STORAGE_PATH", "/tmp/run-2/storage")  # a child re-reads these
    monkeypatch.setenv("PREFECT_LOGGING_LEVEL", "DEBUG")
    assert preload.key() == base
    monkeypatch.setenv("PREFECT_API_DATABASE_CONNECTION_URL", "sqlite+aiosqlite:////tmp/other.db")
    assert preload.key() != base
    monkeypatch.delenv("PREFECT_API_DATABASE_CONNECTION_URL")
    monkeypatch.setenv("PYTHONHASHSEED", "1")
    assert preload.key() != base


def test_at_most_two_preloaded_processes_the_least_recently_used_is_stopped(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # a folder of its own: no real preloaded process is touched
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    folder = preload._private_folder()
    assert folder is not None and folder.parent == tmp_path
    sleepers = [
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "judgebench_flows.cli.preload"])
        for _ in range(3)
    ]
    try:
        wait_until(lambda: all(preload._is_preloaded_process(s.pid) for s in sleepers), 30, "sleepers did not start")
        for used, sleeper in zip((300.0, 100.0, 200.0), sleepers, strict=True):
            (folder / f"key{sleeper.pid}.json").write_text(json.dumps({"pid": sleeper.pid, "used": used}))
        (folder / "gone.json").write_text(json.dumps({"pid": 999_999_999, "used": 0}))  # killed outright
        assert sorted(r["pid"] for r in preload.records()) == sorted(s.pid for s in sleepers)
        assert not (folder / "gone.json").exists()
        preload._make_room()  # room for one more: two of three are stopped, least recently used first
        assert sleepers[1].wait(timeout=30) == -signal.SIGTERM
        assert sleepers[2].wait(timeout=30) == -signal.SIGTERM
        assert sleepers[0].poll() is None
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()

"""A disk that fills mid-run (issue 42): under the output folder, or under a SQLite results database, the
run ends with one line naming the path and its option, exit 8, no temporary file of ours left to keep the
disk full, and the answers received kept: the same command, with space freed, pays at most the calls that
were in flight.

Before: exit 3 with `OSError: [Errno 28] No space left on device` naming neither folder nor option, a
300 KB temporary file left behind; on SQLite, shard retries paying again (1,152 requests for 700 calls).
Real parts: a small tmpfs mounted by the test (we run as root; skipped with the reason elsewhere), filled
for real while `judgebench run` judges against the bundled endpoint.
"""

from __future__ import annotations

import errno
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from judgebench_flows.core.errors import PathNotWritable
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._runs import GPT4O_PATH, run_argv
from tests.conftest import CANARY_KEY, requires_shared

VERDICT = "My final verdict is [[A>B]]"
PAIRS = 40  # 80 calls
CONCURRENCY = 4
FULL_AFTER = 30  # calls answered before the disk fills


@pytest.fixture()
def small_disk(tmp_path) -> Iterator[Path]:
    """A 4 MB tmpfs of the test's own, unmounted afterwards."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def fill(disk: Path) -> Path:
    """Fill the disk to its last byte."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for size in (65536, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return filler


def judge_until_full(command: list[str], tmp_path: Path, disk: Path, endpoint: FakeOpenAIServer) -> tuple[int, str]:
    env = {**os.environ, "OPENAI_API_KEY": CANARY_KEY, "JUDGEBENCH_CACHE_DIR": str(tmp_path / "cache")}
    run = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while endpoint.answered < FULL_AFTER:
        assert run.poll() is None, run.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the run never started judging"
        time.sleep(0.02)
    fill(disk)
    _, stderr = run.communicate(timeout=300)
    return run.returncode, stderr


def rerun(command: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPENAI_API_KEY": CANARY_KEY, "JUDGEBENCH_CACHE_DIR": str(tmp_path / "cache")}
    return subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)


def one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr[-3000:]
    return errors[0]


def pairs_file(tmp_path: Path) -> Path:
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(GPT4O_PATH.read_text().splitlines(keepends=True)[:PAIRS]))
    return path


@requires_shared
@pytest.mark.parametrize("where", ["output", "sqlite"])
def test_a_disk_full_mid_run_ends_it_with_exit_8_naming_the_path_and_the_rerun_pays_only_calls_in_flight(
    tmp_path, prefect_server, small_disk, where
):
    out = small_disk / "r" if where == "output" else tmp_path / "r"
    db_url = f"sqlite:///{tmp_path / 'r.db'}" if where == "output" else f"sqlite:///{small_disk / 'r.db'}"
    option = "--output-dir" if where == "output" else "--db-url"
    with FakeOpenAIServer(VERDICT, latency=0.1) as endpoint:
        port = endpoint.port
        command = run_argv(
            endpoint.base_url, out, None, "--concurrency", str(CONCURRENCY), "--shard-size", "5",
            data_path=pairs_file(tmp_path), db_url=db_url,
        )  # fmt: skip
        code, stderr = judge_until_full(command, tmp_path, small_disk, endpoint)
        first = endpoint.answered_keys()
    assert code == 8, stderr[-3000:]
    line = one_error_line(stderr)
    assert option in line and str(small_disk) in line and ("No space left" in line or "full" in line), line
    ours = [
        p.name
        for p in small_disk.rglob("*")
        if p.is_file() and p.name not in ("filler", "r.db", "r.db-wal", "r.db-shm")
    ]
    assert not ours, f"left on the full disk: {ours}"

    (small_disk / "filler").unlink()
    with FakeOpenAIServer(VERDICT, port=port) as again:
        done = rerun(command, tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        paid_again = set(again.answered_keys()) & set(first)
        print(f"measured ({where}): {len(first)} calls answered before exit 8, {len(paid_again)} paid again")
        assert len(paid_again) <= CONCURRENCY, f"{len(paid_again)} calls paid again"
        assert again.answered + len(first) - len(paid_again) == 2 * PAIRS


@requires_shared
@pytest.mark.parametrize("option", ["--output-dir", "--cache-dir", "--db-url"])
def test_a_full_disk_is_found_before_the_first_call_with_exit_8(tmp_path, small_disk, option):
    fill(small_disk)
    paths = {"--output-dir": tmp_path / "out", "--cache-dir": tmp_path / "cache", "--db-url": tmp_path / "r.db"}
    full = {"--output-dir": small_disk / "out", "--cache-dir": small_disk / "cache", "--db-url": small_disk / "r.db"}
    paths[option] = full[option]
    with FakeOpenAIServer(VERDICT) as endpoint:
        command = run_argv(
            endpoint.base_url, paths["--output-dir"], None, "--cache-dir", str(paths["--cache-dir"]),
            data_path=pairs_file(tmp_path), db_url=f"sqlite:///{paths['--db-url']}",
        )  # fmt: skip
        done = rerun(command, tmp_path)
        assert endpoint.requests == 0
    assert done.returncode == 8, done.stderr[-3000:]
    line = one_error_line(done.stderr)
    assert line.startswith(f"error: {option}: cannot write to") and str(small_disk) in line, line


@requires_shared
def test_a_path_that_cannot_be_made_is_not_called_a_full_disk(tmp_path) -> None:
    """Exit 8's advice follows its reason: "free space" for a full disk only; a path the run may not create
    (no such place, no permission) asks for a writable one."""
    with FakeOpenAIServer(VERDICT) as endpoint:
        command = run_argv(
            endpoint.base_url, Path("/proc/judgebench-nowhere/out"), None, data_path=pairs_file(tmp_path),
            db_url=f"sqlite:///{tmp_path / 'r.db'}",
        )  # fmt: skip
        done = rerun(command, tmp_path)
        assert endpoint.requests == 0
    assert done.returncode == 8, done.stderr[-3000:]
    line = one_error_line(done.stderr)
    assert line.startswith("error: --output-dir: cannot write to '/proc/judgebench-nowhere"), line
    assert line.endswith("make it writable or pass another path and run the same command again"), line
    assert "free space" not in line
    assert PathNotWritable("--db-url", "/srv/r.db", "database or disk is full").remedy == "free space"
    assert (
        PathNotWritable.of("--cache-dir", "/x", OSError(errno.ENOSPC, "No space left on device")).remedy == "free space"
    )

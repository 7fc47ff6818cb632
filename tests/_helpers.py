"""Helpers shared by several test modules (fixtures stay in conftest.py)."""

from __future__ import annotations

from pathlib import Path

from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests.conftest import GPT4O_FILE


def run_command(
    repo: tuple[str, str],
    server: FakeOpenAIServer,
    tmp_path: Path,
    *extra: str,
    judge_type: str = "arena_hard",
    model: str = "o1-mini-2024-09-12",
    concurrency: int = 32,
    shard_size: int | None = 50,
    result_path: str = "results/judgebench.json",
) -> list[str]:
    """`judgebench run` arguments for a whole run of the GPT-4o pairs from `repo` (url, commit) against
    `server`, writing under `tmp_path`; `extra` goes last, so it overrides what stands before it.
    `shard_size=None` leaves `--shard-size` out (the CLI's default)."""
    url, sha = repo
    shards = ["--shard-size", str(shard_size)] if shard_size is not None else []
    return [
        "run",
        "--judge-type",
        judge_type,
        "--model",
        model,
        "--repo-url",
        url,
        "--ref",
        sha,
        "--data-file",
        GPT4O_FILE,
        "--base-url",
        server.base_url,
        "--concurrency",
        str(concurrency),
        *shards,
        "--result-path",
        result_path,
        "--output-dir",
        "results/run",
        "--db-url",
        f"sqlite:///{tmp_path}/judgebench.db",
        "--no-progress",
        *extra,
    ]

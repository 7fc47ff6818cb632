"""The leaderboard as a Prefect flow (an artifact in the UI), and the section the nightly summary embeds.

The scoring itself is `judgebench_flows.scoring.leaderboard` (plain Python): `judgebench leaderboard` runs it
directly, because booting a temporary Prefect server would take longer than scoring every published file.
This flow wraps the same call for deployments and for `judgebench leaderboard --flow`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import acreate_markdown_artifact

from judgebench_flows.core.config import DEFAULT_DB_URL
from judgebench_flows.data import storage
from judgebench_flows.data.dataset import DEFAULT_REF, DEFAULT_REPO_URL, public_url
from judgebench_flows.data.outputs import RUN_ID_FIELD
from judgebench_flows.scoring.leaderboard import Leaderboard, LeaderboardSettings, build_leaderboard
from judgebench_flows.scoring.leaderboard_report import write_outputs
from judgebench_flows.scoring.leaderboard_text import markdown

LEADERBOARD_ARTIFACT_KEY = "judgebench-leaderboard"


@flow(name="judgebench-leaderboard", log_prints=False, persist_result=False)
async def leaderboard_flow(
    repo_url: str = DEFAULT_REPO_URL,
    ref: str | None = DEFAULT_REF,
    cache_dir: str | None = None,
    db_url: str = DEFAULT_DB_URL,
    result_path: str = "results/leaderboard.json",
    output_dir: str = "results/leaderboard",
    seed: int = 42,
    bootstrap_resamples: int = 2000,
    prices: str | None = None,
    benchmark: str = "judgebench",
) -> Leaderboard:
    """Score the checkout's published judges and our latest runs on its benchmark; JSON, HTML and a
    markdown artifact."""
    settings = LeaderboardSettings(
        benchmark=benchmark,
        repo_url=repo_url,
        ref=ref,
        cache_dir=cache_dir,
        db_url=db_url,
        seed=seed,
        bootstrap_resamples=bootstrap_resamples,
        prices=prices,
    )
    board = await asyncio.to_thread(build_leaderboard, settings)
    board.outputs = outputs = await asyncio.to_thread(write_outputs, board, result_path, output_dir)
    await acreate_markdown_artifact(
        markdown(board) + f"\n\nHTML: `{outputs['html']}`",
        key=LEADERBOARD_ARTIFACT_KEY,
        description=f"{'LLMBar' if board.benchmark == 'llmbar' else 'JudgeBench'} leaderboard: {len(board.entries)} judges",
    )
    get_run_logger().info("leaderboard of %d judges: %s", len(board.entries), outputs["html"])
    return board


async def nightly_leaderboard_section(configs: Sequence[Any], run_ids: Sequence[str | None]) -> str:
    """Markdown for the nightly summary: the leaderboard with tonight's runs in bold, and where its page is.

    Built from the matrix's shared checkout and database (the first configuration's); a checkout without
    published outputs still lists our runs. Never raises: the summary must be written whatever happens
    here, so a problem becomes one line in it.
    """
    if not configs:
        return ""
    # JudgeBench's board when the night judged it (a night of several benchmarks: its first JudgeBench cell)
    config = next((c for c in configs if getattr(c, "benchmark", "judgebench") == "judgebench"), configs[0])
    try:
        settings = LeaderboardSettings(
            benchmark=getattr(config, "benchmark", "judgebench"),
            repo_url=config.repo_url,
            ref=config.ref,
            cache_dir=config.cache_dir,
            db_url=config.db_url,
            seed=config.seed,
            require_published=False,
            prices=config.prices,
        )
        board = await asyncio.to_thread(build_leaderboard, settings)
        cell_folder = config.output_dir.split(RUN_ID_FIELD)[0].rstrip("/")  # nightly/<cell>/{run_id}: nightly/<cell>
        folder = storage.parent(cell_folder)  # a path or an object-store URL
        outputs = await asyncio.to_thread(write_outputs, board, storage.join(folder, "leaderboard.json"), folder)
    except Exception as exc:  # noqa: BLE001 - reported in the summary instead
        reason = (
            str(exc).replace(config.repo_url, public_url(config.repo_url)).splitlines()[0][:300]
            if str(exc)
            else type(exc).__name__
        )
        return f"\n\n## Leaderboard\n\nnot available: {reason}"
    tonight = [r for r in run_ids if r]
    return f"\n\n## Leaderboard (tonight's runs in bold)\n\n{markdown(board, highlight=tonight)}\n\nHTML: `{outputs['html']}`"


__all__ = ["leaderboard_flow", "nightly_leaderboard_section", "LEADERBOARD_ARTIFACT_KEY"]

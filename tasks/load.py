"""Prefect task: validate the data file and pick the pairs this run judges (a seeded subset if asked).

It returns offsets, not pairs: shards are read from the file when their turn comes, so a 100,000-pair
file costs a list of integers here, not 100,000 objects held for the whole run.
"""

from __future__ import annotations

import asyncio

from prefect import get_run_logger, task

from judgebench_flows.data.loading import PairIndex, select_pairs


@task(name="index-pairs")
async def index_dataset(path: str, max_samples: int | None, seed: int) -> PairIndex:
    """Async, reading in a thread: the flow's event loop keeps serving calls in flight meanwhile."""
    index = await asyncio.to_thread(select_pairs, path, max_samples, seed)
    logger = get_run_logger()
    for row in index.skipped[:20]:
        logger.warning("skipped line %d of %s: %s", row.line, path, row.reason)
    if len(index.skipped) > 20:
        logger.warning("... and %d more skipped lines", len(index.skipped) - 20)
    return index

"""Prefect task: read and validate pairs, then take the seeded subset and shuffle the run asks for."""

from __future__ import annotations

from prefect import get_run_logger, task

from judgebench_flows.loading import LoadedPairs, load_pairs, sample_pairs, shuffle_responses


@task(name="load-pairs")
def load_dataset(path: str, max_samples: int | None, seed: int, shuffle: bool) -> LoadedPairs:
    loaded = load_pairs(path)
    logger = get_run_logger()
    for row in loaded.skipped[:20]:
        logger.warning("skipped line %d of %s: %s", row.line, path, row.reason)
    if len(loaded.skipped) > 20:
        logger.warning("... and %d more skipped lines", len(loaded.skipped) - 20)
    pairs = sample_pairs(loaded.pairs, max_samples, seed)
    if shuffle:
        pairs = shuffle_responses(pairs, seed)
    return LoadedPairs(pairs, loaded.skipped)

"""Score one shard of rows with an external judge, as a retried Prefect task.

A judge raising on a row is not a task failure: judges.external.scoring turns it into that row's
error. So anything that escapes this task is infrastructure (a worker dying, a file system hiccup, a
bug), which is what the two retries are for -- except a UserError (say the judge file vanished mid-run),
which no retry can fix. The judge is loaded by path inside the task, so the task runs in any worker
process. No caching: the judge file's content is not among the inputs, so a cached shard could outlive
an edit to the judge, and scoring is cheap next to a Prefect round trip.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from judgebench_flows.core.errors import UserError
from judgebench_flows.judges.external.config import UserMapping
from judgebench_flows.judges.external.run import judge_shard
from judgebench_flows.judges.external.scoring import RowResult


def retry_unless_user_error(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect retry_condition_fn: retry unexpected errors, never a UserError."""
    try:
        state.result()
    except UserError:
        return False
    except Exception:
        return True
    return True


@task(
    name="score-shard",
    retries=2,
    retry_delay_seconds=1,
    retry_condition_fn=retry_unless_user_error,
    cache_policy=NO_CACHE,
    task_run_name="score-shard-{shard_index}",
)
def score_shard(
    rows: pd.DataFrame, judge_path: str, function: str, config: UserMapping, shard_index: int = 0
) -> list[RowResult]:
    """One RowResult per row of the shard, in order."""
    results = judge_shard(rows, judge_path, function, config)
    statuses = [result.status for result in results]
    get_run_logger().info(
        "Shard %d: %d rows, %d scored, %d NA, %d errors",
        shard_index,
        len(results),
        statuses.count("scored"),
        statuses.count("na"),
        statuses.count("error"),
    )
    return results

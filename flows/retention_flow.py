"""The retention deployment's flow: judgment rows and call-cache answers older than the kept days deleted
(`data.retention`), runs and metrics kept; the same as `judgebench retention`, on a schedule."""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact

from judgebench_flows.core.retention import DEFAULT_KEEP_DAYS, RetentionSettings
from judgebench_flows.data.retention import apply, size_text

RETENTION_ARTIFACT_KEY = "judgebench-retention"


@flow(name="judgebench-retention", log_prints=False)
def judgebench_retention(
    keep_days: int = DEFAULT_KEEP_DAYS, db_url: str | None = None, vacuum: bool = False
) -> dict[str, int | str | None]:
    """Delete judgment rows and call-cache answers older than `keep_days`; runs and metrics are kept.
    `db_url` names the database without its password (the worker's JUDGEBENCH_DB_URL otherwise)."""
    from judgebench_flows.core.config import validated

    settings = validated(RetentionSettings, {"keep_days": keep_days, "db_url": db_url, "vacuum": vacuum})
    pruned, before, after = apply(settings)
    line = f"{pruned.line()}; database {size_text(before)} -> {size_text(after)}"
    get_run_logger().info(line)
    create_markdown_artifact(f"# JudgeBench retention\n\n{line}.", key=RETENTION_ARTIFACT_KEY)
    return {
        "cutoff": pruned.cutoff.isoformat(),
        "runs": pruned.runs,
        "judgments": pruned.judgments,
        "answers": pruned.answers,
        "bytes_before": before,
        "bytes_after": after,
    }


__all__ = ["RETENTION_ARTIFACT_KEY", "judgebench_retention"]

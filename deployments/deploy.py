"""Register the nightly, ad-hoc and retention deployments from Python: as `prefect deploy --all` does.

    python deployments/deploy.py                 # both deployments, pool judgebench-pool
    python deployments/deploy.py --only adhoc

Like prefect.yaml, it builds no image: the flows are loaded from this project directory
(`flow.from_source` with a local path), so each deployment's pull step is `set_working_directory` to
it, and a `process` worker on this machine runs them. The work pool is created if it is missing.
Each deployment has its own work queue, so a worker can be limited to one kind of run
(`--work-queue adhoc`); a worker started without `--work-queue` serves both.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

from prefect import deploy, flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import WorkPoolCreate
from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy
from prefect.deployments.runner import RunnerDeployment
from prefect.exceptions import ObjectNotFound
from prefect.schedules import Cron

PROJECT_DIR = Path(__file__).resolve().parents[1]
WORK_POOL = "judgebench-pool"
NIGHTLY_CRON = "0 2 * * *"
NIGHTLY_TIMEZONE = "UTC"
NIGHTLY_ENTRYPOINT = "flows/nightly.py:nightly_benchmarks"
ADHOC_ENTRYPOINT = "flows/adhoc_flow.py:judgebench_adhoc"
RETENTION_ENTRYPOINT = "flows/retention_flow.py:judgebench_retention"
RETENTION_CRON = "30 5 * * *"  # after the night (02:00 UTC) has finished

# Runs send heartbeats, so a run whose machine died is marked Crashed and rescheduled by the automations
# of `judgebench automations install` (deployments/automations.py); prefect.yaml sets the same.
HEARTBEATS = {"env": {"PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "30"}}

_T = TypeVar("_T")


def _synchronously(value: _T | Coroutine[Any, Any, _T]) -> _T:
    """The value of a Prefect call that is sync or async depending on its caller: called outside an event
    loop (as here) it is the value itself, though its type also allows a coroutine."""
    if isinstance(value, Coroutine):
        value.close()
        raise TypeError("a Prefect call returned a coroutine: deploy from outside an event loop")
    return value


def ensure_work_pool(name: str = WORK_POOL) -> None:
    """Create the `process` work pool with Prefect's default job template, unless it exists."""
    from prefect.workers.process import ProcessWorker

    with get_client(sync_client=True) as client:
        try:
            pool = client.read_work_pool(name)
        except ObjectNotFound:
            client.create_work_pool(
                WorkPoolCreate(
                    name=name, type="process", base_job_template=ProcessWorker.get_default_base_job_template()
                ),
            )
            print(f"created work pool '{name}' (process)")
            return
    if pool.type != "process":
        raise SystemExit(f"work pool '{name}' exists with type '{pool.type}'; these deployments need a 'process' pool")


def _loaded(project_dir: Path | None, entrypoint: str) -> tuple[Any, dict[str, Any]]:
    """A flow and how its deployment finds it: from `project_dir` (the pull step moves each run there),
    or with None from the installed package by its module path (a worker needs only `pip install`,
    no checkout and no path in common with anyone: the team setup, docs/operations-deployments.md)."""
    if project_dir is not None:
        return _synchronously(flow.from_source(source=str(project_dir), entrypoint=entrypoint)), {}
    import importlib

    from prefect.types.entrypoint import EntrypointType

    path, name = entrypoint.rsplit(":", 1)  # flows/nightly.py:f -> judgebench_flows.flows.nightly, f
    module = importlib.import_module("judgebench_flows." + path.removesuffix(".py").replace("/", "."))
    return getattr(module, name), {"entrypoint_type": EntrypointType.MODULE_PATH}


def nightly_deployment(
    project_dir: Path | None = PROJECT_DIR,
    matrix_path: str = "deployments/nightly.yaml",
    cron: str = NIGHTLY_CRON,
    name: str = "nightly",
) -> RunnerDeployment:
    """The nightly matrix deployment; `cron` and `name` make a copy on another schedule (e.g. every minute, to check a worker end to end)."""
    nightly, found = _loaded(project_dir, NIGHTLY_ENTRYPOINT)
    return _synchronously(
        nightly.to_deployment(
            name=name,
            description="Every judge x model x data file of the matrix; fails if any configuration failed or regressed.",
            schedules=[Cron(cron, timezone=NIGHTLY_TIMEZONE)],
            parameters={"matrix_path": matrix_path},
            # a late night must not overlap the next one on the same endpoint: the next one waits for it
            concurrency_limit=ConcurrencyLimitConfig(limit=1, collision_strategy=ConcurrencyLimitStrategy.ENQUEUE),
            work_queue_name="nightly",
            job_variables=HEARTBEATS,
            tags=["judgebench", "nightly"],
            **found,
        )
    )


def adhoc_deployment(project_dir: Path | None = PROJECT_DIR) -> RunnerDeployment:
    adhoc, found = _loaded(project_dir, ADHOC_ENTRYPOINT)
    return _synchronously(
        adhoc.to_deployment(
            name="adhoc",
            description="One JudgeBench configuration on demand: --param model=... [--param judge_type=...]",
            work_queue_name="adhoc",
            job_variables=HEARTBEATS,
            tags=["judgebench", "adhoc"],
            **found,
        )
    )


def retention_deployment(project_dir: Path | None = PROJECT_DIR, keep_days: int | None = None) -> RunnerDeployment:
    """Retention every day after the night: judgment rows and call-cache answers older than `keep_days`
    deleted (the flow's default unless given), runs and metrics kept."""
    retention, found = _loaded(project_dir, RETENTION_ENTRYPOINT)
    return _synchronously(
        retention.to_deployment(
            name="retention",
            description="Judgment rows and call-cache answers older than keep_days deleted; runs and metrics kept.",
            schedules=[Cron(RETENTION_CRON, timezone=NIGHTLY_TIMEZONE)],
            parameters={} if keep_days is None else {"keep_days": keep_days},
            concurrency_limit=ConcurrencyLimitConfig(limit=1, collision_strategy=ConcurrencyLimitStrategy.CANCEL_NEW),
            work_queue_name="maintenance",
            tags=["judgebench", "retention"],
            **found,
        )
    )


def deploy_all(
    project_dir: Path | None = PROJECT_DIR,
    work_pool: str = WORK_POOL,
    only: str | None = None,
    matrix_path: str = "deployments/nightly.yaml",
) -> list[UUID]:
    """Create or update the deployments (idempotent: running it again updates them in place)."""
    ensure_work_pool(work_pool)
    deployments = []
    if only in (None, "nightly"):
        deployments.append(nightly_deployment(project_dir, matrix_path=matrix_path))
    if only in (None, "adhoc"):
        deployments.append(adhoc_deployment(project_dir))
    if only in (None, "retention"):
        deployments.append(retention_deployment(project_dir))
    return _synchronously(
        deploy(
            *deployments,
            work_pool_name=work_pool,
            build=False,
            push=False,
            print_next_steps_message=False,
            ignore_warnings=True,
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Register the JudgeBench deployments on the Prefect API in PREFECT_API_URL."
    )
    parser.add_argument("--work-pool", default=WORK_POOL)
    parser.add_argument(
        "--project-dir", type=Path, default=PROJECT_DIR, help="where workers find this project (default: this checkout)"
    )
    parser.add_argument("--only", choices=["nightly", "adhoc", "retention"], help="register just one of them")
    parser.add_argument(
        "--installed",
        action="store_true",
        help="workers load the flows from the installed package: no checkout on the workers, no path in common",
    )
    parser.add_argument(
        "--matrix-path",
        default="deployments/nightly.yaml",
        help="the nightly matrix the schedule runs: a path on the night's worker or a URL (s3://team/nightly.yaml)",
    )
    args = parser.parse_args(argv)
    project_dir = None if args.installed else args.project_dir.resolve()
    ids = deploy_all(project_dir, args.work_pool, args.only, args.matrix_path)
    print(f"{len(ids)} deployments registered; start a worker with: prefect worker start --pool {args.work_pool}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

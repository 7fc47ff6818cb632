"""Prefect task: clone the benchmark repository at a pinned ref (see judgebench_flows.data.dataset)."""

from __future__ import annotations

import asyncio

from prefect import task

from judgebench_flows.core.errors import UserError
from judgebench_flows.data.dataset import Checkout, fetch_repository

# What git says when the repository is not there at all (a local path, file:// URL, or a server's 404):
# asking again cannot help.
NO_SUCH_REPOSITORY = ("not found", "does not exist", "does not appear to be a git repository", "repository exists")


async def _network_hiccup(task, task_run, state) -> bool:
    """Retry a clone that failed for a passing reason; a bad URL, a repository that does not exist (or any
    local one: no network in between) or an unknown ref fails at once."""
    try:
        await state.aresult()
    except UserError as exc:
        message = str(exc).lower()
        local = message.startswith(("cannot clone file:", "cannot clone /"))  # no network to hiccup
        return "cannot clone" in message and not local and not any(m in message for m in NO_SUCH_REPOSITORY)
    except Exception:
        return True
    return False


@task(name="fetch-dataset", retries=2, retry_delay_seconds=5, retry_condition_fn=_network_hiccup)
async def fetch_dataset(repo_url: str, ref: str | None, cache_dir: str | None) -> Checkout:
    """Async, with git in a thread: the flow's event loop keeps serving calls in flight meanwhile."""
    return await asyncio.to_thread(fetch_repository, repo_url, ref, cache_dir)

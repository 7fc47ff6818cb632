"""Keep Prefect's background workers off the run's terminal; what they say goes to a file in PREFECT_HOME.

After a run a user should see our summary (or our one error line) and nothing else. Prefect's background
services write to the terminal on their own: the log shipper prints `--- Error logging to API ---` when the
server cannot take logs, and the events worker logs `Still processing items: N items remaining` while it
drains at exit. Both are about Prefect's bookkeeping, not the run's result, but the logs that could not be
shipped may matter (they are the run's own logs), so they are written to `judgebench-background.log` in
PREFECT_HOME instead of being dropped. `--verbose` leaves Prefect's behaviour alone.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

LOG_NAME = "judgebench-background.log"
# Loggers of Prefect's background services (QueueService subclasses log under their class name).
BACKGROUND_LOGGERS = ("EventsWorker", "APILogWorker", "prefect._internal.concurrency", "prefect.events.clients")

_lock = threading.Lock()
_installed: Path | None = None


def background_log_path() -> Path:
    from prefect.settings import get_current_settings

    return Path(get_current_settings().home).expanduser() / LOG_NAME


def route_background_output(path: Path | None = None) -> Path:
    """Send Prefect's background-worker messages and unshippable logs to a file; returns its path.
    Call once Prefect may be imported, before the flow starts. Idempotent."""
    global _installed
    with _lock:
        if _installed is not None:
            return _installed
        path = path or background_log_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(path, delay=True, encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        for name in BACKGROUND_LOGGERS:
            logger = logging.getLogger(name)
            logger.handlers = [handler]
            logger.propagate = False
        _keep_unshipped_logs(path)
        _installed = path
        return path


def _keep_unshipped_logs(path: Path) -> None:
    """Prefect's log shipper writes a banner to stderr and drops the batch when the API refuses it; here
    the batch is appended to the file instead, one JSON line per log, with the reason."""
    from prefect.logging.handlers import APILogWorker

    async def handle_batch(self: Any, items: list[dict[str, Any]]) -> None:
        try:
            await self._client.create_logs(items)
        except Exception as exc:  # the server is gone or refused them: keep them, quietly
            try:
                with open(path, "a", encoding="utf-8") as handle:
                    handle.write(f"logs not sent to the Prefect API ({type(exc).__name__}: {exc}):\n")
                    for item in items:
                        handle.write(json.dumps(item, default=str) + "\n")
            except OSError:
                pass

    APILogWorker._handle_batch = handle_batch  # type: ignore[method-assign]  # deliberate patch of Prefect's worker


__all__ = ["BACKGROUND_LOGGERS", "LOG_NAME", "background_log_path", "route_background_output"]

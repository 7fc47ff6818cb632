"""Boot Prefect's temporary API server early, so its start-up overlaps our own checks and the clone.

Without PREFECT_API_URL, Prefect starts a temporary server the moment a flow begins, and that takes
several seconds, most of it in the server's own process. Started from a thread at the top of
`judgebench run`, the same server boots while we import, run the preflight checks and clone; the flow
then finds it running (it is one instance per process).
"""

from __future__ import annotations

import threading
from collections.abc import Callable


def _no_server_configured() -> bool:
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    return not settings.api.url and settings.server.ephemeral.enabled


def boot_temporary_server() -> Callable[[], None]:
    """Start booting it in the background; the returned function waits until it is up (or gave up)."""
    done = threading.Event()

    def boot() -> None:
        try:
            if _no_server_configured():
                from prefect.server.api.server import SubprocessASGIServer

                SubprocessASGIServer().start()
        except Exception:  # the flow will start (and report on) the server itself
            pass
        finally:
            done.set()

    threading.Thread(target=boot, name="prefect-server-boot", daemon=True).start()
    return done.wait

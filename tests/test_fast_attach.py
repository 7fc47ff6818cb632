"""A run attaches to a kept Prefect server without a helper process only while nothing that decides
Prefect's settings changed (real files, a real HTTP health endpoint, real processes; no Prefect server)."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from judgebench_flows.cli import fast_attach
from judgebench_flows.cli.local_server import Slot

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(200 if self.path.endswith("/health") else 404)
        self.end_headers()
        self.wfile.write(b"true")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def kept_server(tmp_path, monkeypatch):
    """A recorded kept server: an answering /health, a live 'supervisor' and 'server' process, and the
    memo a helper leaves after reading the settings of this environment."""
    for name in [k for k in os.environ if k.upper().startswith("PREFECT_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PREFECT_LOCAL_STORAGE_PATH", str(tmp_path / "storage-1"))
    monkeypatch.setenv("JUDGEBENCH_SERVER_KEEPALIVE", "600")
    monkeypatch.chdir(tmp_path)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    home = tmp_path / "home"
    slot = Slot(home, "slotkey")
    slot.dir.mkdir(parents=True)
    slot.write(
        {
            "api_url": f"http://127.0.0.1:{httpd.server_address[1]}/api",
            "server_pid": sleeper.pid,
            "supervisor_pid": os.getpid(),
            "started": 0,
        }
    )
    told = {"api_url": "unused", "result_storage": str(tmp_path / "storage-1"), "startup_timeout": 20.0}
    fast_attach.remember(fast_attach.fingerprint(), told, home, "slotkey")
    yield slot, httpd
    httpd.shutdown()
    sleeper.kill()
    sleeper.wait()


def test_an_unchanged_setup_attaches_and_takes_the_runs_lease(kept_server, tmp_path):
    slot, httpd = kept_server
    runner = os.getpid()
    told = fast_attach.attach(runner)
    assert told is not None
    assert told["api_url"] == f"http://127.0.0.1:{httpd.server_address[1]}/api"
    assert told["shared"] is True and told["result_storage"] == str(tmp_path / "storage-1")
    assert (slot.leases / str(runner)).exists(), "the supervisor would stop the server under a run without a lease"


def test_a_per_run_storage_path_or_log_level_still_attaches(kept_server, tmp_path, monkeypatch):
    monkeypatch.setenv("PREFECT_LOCAL_STORAGE_PATH", str(tmp_path / "storage-2"))
    monkeypatch.setenv("PREFECT_LOGGING_LEVEL", "DEBUG")
    told = fast_attach.attach(os.getpid())
    assert told is not None and told["result_storage"] == str(tmp_path / "storage-2")


@pytest.mark.parametrize("change", ["env", "profile", "dotenv", "keepalive"])
def test_a_changed_setting_goes_the_helpers_way(kept_server, tmp_path, monkeypatch, change):
    if change == "env":
        monkeypatch.setenv("PREFECT_API_DATABASE_CONNECTION_URL", "sqlite+aiosqlite:///other.db")
    elif change == "profile":
        (tmp_path / "home" / "profiles.toml").write_text('active = "x"\n[profiles.x]\nPREFECT_SERVER_API_PORT = 4300\n')
    elif change == "dotenv":
        (tmp_path / ".env").write_text("PREFECT_RESULTS_PERSIST_BY_DEFAULT=true\n")
    else:
        monkeypatch.setenv("JUDGEBENCH_SERVER_KEEPALIVE", "0")
    assert fast_attach.attach(os.getpid()) is None


def test_a_configured_api_url_or_a_server_that_stopped_answering_goes_the_helpers_way(kept_server, monkeypatch):
    slot, httpd = kept_server
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:1/api")
    assert fast_attach.attach(os.getpid()) is None
    monkeypatch.delenv("PREFECT_API_URL")
    httpd.shutdown()
    httpd.server_close()
    assert fast_attach.attach(os.getpid()) is None
    assert not (slot.leases / str(os.getpid())).exists()

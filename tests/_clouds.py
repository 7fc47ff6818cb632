"""Real Google Cloud Storage and Azure Blob Storage APIs on loopback, as tests/_s3.py is S3's: each emulator
in its own process on a free port, and the environment that points the cloud's own credential chain at it.

- GCS: `gcp-storage-emulator` (PyPI, in the test extra); gcsfs finds it through `STORAGE_EMULATOR_HOST`,
  as Google's own clients do, with Google's chain finding no credentials (anonymous, which the emulator
  takes). `refusing_credentials` gives the chain a service-account file whose token endpoint refuses it,
  as Google's refuses a revoked key.
- Azure: Azurite (the npm registry: `npm install --no-save azurite@3.37.0` in the checkout, README's Test
  section), its well-known development account through `AZURE_STORAGE_CONNECTION_STRING`, the variable
  Azure's SDK reads; a wrong account key is refused as Azure refuses one.

`GcsServer.missing()` / `AzuriteServer.missing()` say in one line why an emulator cannot start here (the
tests then skip with it).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

from tests._s3 import free_port, stop

ROOT = Path(__file__).resolve().parents[1]
AZURITE_VERSION = "3.37.0"
# Azurite's documented development account and key (public, the same in every Azurite): a canary here.
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
WRONG_AZURE_KEY = "d3Jvbmcta2V5LWNhbmFyeS13cm9uZy1rZXktY2FuYXJ5LXdyb25nLWtleS1jYW5hcnk="
GCS_PRIVATE_KEY_CANARY = "gcs-private-key-canary-71c0ffee"


def _wait_for_port(port: int, process: subprocess.Popen[bytes], what: str, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start") from None
            time.sleep(0.2)


class _Emulator:
    """A server process on a free port, stopped on exit."""

    what = "emulator"

    def __init__(self, log: Path | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def __enter__(self) -> Any:
        out = self.log.open("wb") if self.log else subprocess.DEVNULL
        self.process = subprocess.Popen(
            self.command(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=tempfile.gettempdir()
        )
        _wait_for_port(self.port, self.process, self.what)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            stop(self.process)

    def objects(self, bucket: str) -> dict[str, bytes]:
        """Every object in the bucket: key -> content."""
        fs = self.filesystem()
        return {key.split("/", 1)[1]: fs.cat_file(key) for key in fs.find(bucket)}

    def make_bucket(self, name: str) -> None:
        self.filesystem().mkdir(name)

    def filesystem(self) -> Any:
        raise NotImplementedError


class GcsServer(_Emulator):
    """`with GcsServer() as gcs:` gcp-storage-emulator on 127.0.0.1, in memory; `gcs.env` points
    Google's clients (gcsfs) at it."""

    what = "gcp-storage-emulator"
    scheme = "gs"

    @staticmethod
    def missing() -> str | None:
        import importlib.util

        for module, package in (("gcp_storage_emulator", "gcp-storage-emulator"), ("gcsfs", "gcsfs")):
            if importlib.util.find_spec(module) is None:
                return f"{package} is not installed (pip install -c constraints.txt -e '.[test]')"
        return None

    def command(self) -> list[str]:
        script = "from gcp_storage_emulator.__main__ import main; main()"
        return [sys.executable, "-c", script, "start", "--host", "127.0.0.1", "--port", str(self.port), "--in-memory"]

    @property
    def env(self) -> dict[str, str]:
        return {
            "STORAGE_EMULATOR_HOST": self.url,
            "GOOGLE_CLOUD_PROJECT": "judgebench-test",
            "GCE_METADATA_HOST": "127.0.0.1:9",  # not on Google's cloud: no metadata-server credentials
            "GCE_METADATA_IP": "127.0.0.1:9",
            "NO_GCE_CHECK": "True",
            # gcsfs's check of a bucket's type speaks gRPC over TLS, which the emulator does not serve
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
        }

    def __enter__(self) -> GcsServer:
        super().__enter__()
        # gcsfs reads the emulator's address at each request: this process's own view of the bucket
        self.previous = os.environ.get("STORAGE_EMULATOR_HOST")
        os.environ["STORAGE_EMULATOR_HOST"] = self.url
        os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")  # read when gcsfs is imported
        return self

    def __exit__(self, *exc: object) -> None:
        if self.previous is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = self.previous
        super().__exit__(*exc)

    def filesystem(self) -> Any:
        import gcsfs

        return gcsfs.GCSFileSystem(token="anon", project="judgebench-test", skip_instance_cache=True)


class AzuriteServer(_Emulator):
    """`with AzuriteServer() as az:` Azurite's blob service on 127.0.0.1; `az.env` points Azure's
    clients (adlfs) at it with its development account."""

    what = "Azurite"
    scheme = "az"

    def __init__(self, log: Path | None = None, key: str = AZURITE_KEY) -> None:
        super().__init__(log)
        self.key = key
        self.folder = tempfile.mkdtemp(prefix="azurite-")

    @staticmethod
    def binary() -> str | None:
        local = ROOT / "node_modules" / ".bin" / "azurite-blob"
        return str(local) if local.exists() else shutil.which("azurite-blob")

    @classmethod
    def missing(cls) -> str | None:
        import importlib.util

        if importlib.util.find_spec("adlfs") is None:
            return "adlfs is not installed (pip install -c constraints.txt -e '.[test]')"
        if cls.binary() is None:
            return f"Azurite is not installed (npm install --no-save azurite@{AZURITE_VERSION})"
        return None

    def command(self) -> list[str]:
        binary = self.binary()
        assert binary is not None
        # --skipApiVersionCheck: the Azure SDK pinned here may speak a newer API version than Azurite knows
        where = ["--blobHost", "127.0.0.1", "--blobPort", str(self.port), "--location", self.folder]
        return [binary, *where, "--skipApiVersionCheck", "--silent"]

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        shutil.rmtree(self.folder, ignore_errors=True)

    def connection_string(self, key: str | None = None) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={key or self.key};"
            f"BlobEndpoint={self.url}/{AZURITE_ACCOUNT};"
        )

    @property
    def env(self) -> dict[str, str]:
        return {
            "AZURE_STORAGE_CONNECTION_STRING": self.connection_string(),
            "AZURE_STORAGE_ACCOUNT_NAME": AZURITE_ACCOUNT,
        }

    def filesystem(self) -> Any:
        import adlfs

        return adlfs.AzureBlobFileSystem(
            connection_string=self.connection_string(AZURITE_KEY), skip_instance_cache=True
        )


class _Refuse(BaseHTTPRequestHandler):
    """Google's token endpoint refusing a service account's key."""

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"error": "invalid_grant", "error_description": "Invalid JWT Signature."}).encode()
        self.send_response(400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class RefusingTokenEndpoint:
    """`with RefusingTokenEndpoint(folder) as refusing:` a service-account file (`refusing.file`) for
    `GOOGLE_APPLICATION_CREDENTIALS` whose token endpoint, on loopback, refuses it."""

    def __init__(self, folder: Path) -> None:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        self.server = HTTPServer(("127.0.0.1", 0), _Refuse)
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode()
        self.private_key = pem
        self.file = folder / "service-account.json"
        self.file.write_text(
            json.dumps(
                {
                    "type": "service_account",
                    "project_id": "judgebench-test",
                    "private_key_id": GCS_PRIVATE_KEY_CANARY,
                    "private_key": pem,
                    "client_email": "judge@judgebench-test.iam.gserviceaccount.com",
                    "client_id": "1",
                    "token_uri": f"http://127.0.0.1:{self.server.server_port}/token",
                }
            )
        )

    def __enter__(self) -> RefusingTokenEndpoint:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


__all__ = ["AzuriteServer", "GcsServer", "RefusingTokenEndpoint"]

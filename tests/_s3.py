"""A real S3 API on loopback: moto's server in its own process on a free port, and the AWS environment
that points the cloud's own credential chain and `AWS_ENDPOINT_URL` at it.

moto accepts any key unless told to check them: `S3Server(authenticated=True)` starts one that refuses
every key it was not given through IAM (all of them here), as a store refusing credentials does.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ACCESS_KEY_ID = "AKIATESTCANARY000001"
SECRET_KEY = "s3-secret-canary-9b8a7c6d5e4f3a2b1c0d"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop(process: subprocess.Popen[bytes]) -> None:
    """A server process ended: SIGTERM, then SIGKILL if it has not exited within 10 s."""
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


class S3Server:
    """`with S3Server() as s3:` moto's S3 on 127.0.0.1; `s3.env` is what a process needs to use it."""

    scheme = "s3"

    def __init__(self, log: Path | None = None, authenticated: bool = False) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.authenticated = authenticated
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.url,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",  # no instance-role lookups on a machine that is not EC2
        }

    def __enter__(self) -> S3Server:
        env = {**os.environ, **({"INITIAL_NO_AUTH_ACTION_COUNT": "0"} if self.authenticated else {})}
        out = self.log.open("wb") if self.log else subprocess.DEVNULL
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{self.url}/moto-api/", timeout=2).close()
                return self
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto's server did not start") from None
                time.sleep(0.2)

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            stop(self.process)

    def filesystem(self):
        """An s3fs filesystem on this server (the tests' own view of the bucket)."""
        import s3fs

        return s3fs.S3FileSystem(
            key=ACCESS_KEY_ID,
            secret=SECRET_KEY,
            client_kwargs={"endpoint_url": self.url},
            skip_instance_cache=True,
            use_listings_cache=False,
        )

    def make_bucket(self, name: str) -> None:
        self.filesystem().mkdir(name)  # no region: us-east-1, which takes no location constraint

    def objects(self, bucket: str) -> dict[str, bytes]:
        """Every object in the bucket: key -> content."""
        fs = self.filesystem()
        return {key.split("/", 1)[1]: fs.cat_file(key) for key in fs.find(bucket)}

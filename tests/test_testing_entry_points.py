"""Every `python -m judgebench_flows.testing.*` entry point answers `--help` with its usage: a module run
with `-m` that prints nothing and exits 0 (as fake_batches did) leaves its user guessing."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import pytest

import judgebench_flows.testing as testing

MODULES = sorted(info.name for info in pkgutil.iter_modules(testing.__path__) if not info.name.startswith("_"))


def test_the_bundled_modules_are_all_found() -> None:
    assert {"fake_openai", "fake_anthropic", "fake_batches", "oracle"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_help_prints_usage(name: str) -> None:
    module = f"judgebench_flows.testing.{name}"
    done = subprocess.run(
        [sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: python -m {module}"), done.stdout or "(nothing printed)"
    assert len(done.stdout.splitlines()) >= 4, done.stdout


SERVERS = {  # each stand-in's command line, on a free port (`--port 0`)
    "fake_openai": [],
    "fake_anthropic": [],
    "fake_azure": ["--deployment", "judge=gpt-4o-2024-08-06"],
    "fake_bedrock": [],
    "fake_batches": [],
    "fake_google": ["--oracle", "PAIRS"],
}


def test_every_server_stand_in_is_listed() -> None:
    assert {name for name in MODULES if name.startswith("fake_")} == set(SERVERS)


def test_each_stand_in_serves_until_sigterm_then_prints_its_counters(tmp_path) -> None:
    """The one command line every stand-in shares (`fake_openai.serve`): its URL first, an HTTP server
    there, and on SIGTERM exit 0 with its counters as JSON on stderr."""
    import json
    import signal
    import urllib.error
    import urllib.request

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"pair_id": "p", "response_A": "a", "response_B": "b", "label": "A>B"}) + "\n")
    env = {"AWS_ACCESS_KEY_ID": "AKIASTANDIN0000001", "AWS_SECRET_ACCESS_KEY": "stand-in-secret"}
    started = {}
    for name, options in SERVERS.items():
        argv = [sys.executable, "-m", f"judgebench_flows.testing.{name}", "--port", "0"]
        argv += [str(pairs) if option == "PAIRS" else option for option in options]
        started[name] = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
            env={**__import__("os").environ, **env},
        )
    try:
        for name, process in started.items():
            url = process.stdout.readline().strip()  # type: ignore[union-attr]
            assert url.startswith("http://127.0.0.1:"), (name, url, process.stderr.read() if not url else "")  # type: ignore[union-attr]
            try:
                urllib.request.urlopen(url, timeout=30).close()
            except urllib.error.HTTPError:
                pass  # an HTTP answer, whatever its status: a server is there
            process.send_signal(signal.SIGTERM)
        for name, process in started.items():
            _, stderr = process.communicate(timeout=60)
            assert process.returncode == 0, (name, stderr[-2000:])
            assert "requests" in json.loads(stderr.strip().splitlines()[-1]), (name, stderr[-2000:])
    finally:
        for process in started.values():
            if process.poll() is None:
                process.kill()
                process.wait()


def test_a_port_in_use_is_one_line_and_exit_2() -> None:
    """A stand-in whose port is taken (8000 is many servers' default) says so in one line and exits: the
    README's wait for its address ends there instead of waiting for a server that never listens."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "judgebench_flows.testing.fake_openai", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr == (
        f"error: --port {port}: cannot listen on 127.0.0.1 (Address already in use); "
        "stop what listens there, or pick another port (--port 0: a free one)\n"
    )

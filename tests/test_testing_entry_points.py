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

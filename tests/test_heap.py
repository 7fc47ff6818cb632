"""A process that ran a flow keeps its start-up objects out of the garbage collector's walks (core/heap.py):
frozen when the flow starts, and everything again at exit, so the interpreter's final collections have
nothing to walk (docs/performance.md, "The process's heap and a batch's first round")."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from judgebench_flows.testing.fake_openai import FakeOpenAIServer

# Loaded by the run's interpreter before anything else (PYTHONPATH): its exit hook is registered first,
# so it runs last, after the package's, and reports what the collector would still walk.
PROBE = """
import atexit, gc, json, os

def _report():
    with open(os.environ["HEAP_REPORT"], "w") as handle:
        json.dump({"frozen": gc.get_freeze_count(), "walked": len(gc.get_objects())}, handle)

atexit.register(_report)
"""


def _pairs(path: Path) -> Path:
    rows = [
        {"pair_id": f"p{i}", "source": "mmlu-pro", "question": f"Q{i}?", "response_A": "a", "response_B": "b"}
        | {"label": "A>B"}
        for i in range(2)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_a_run_leaves_the_collector_nothing_to_walk_at_exit(
    run_cli: Callable[..., object], fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "sitecustomize.py").write_text(PROBE)
    report = tmp_path / "heap.json"
    done = run_cli(
        *("run", "--model", "heap-judge", "--base-url", fake_server.base_url, "--no-progress"),
        *("--data-path", str(_pairs(tmp_path / "pairs.jsonl")), "--db-url", f"sqlite:///{tmp_path}/j.db"),
        *("--output-dir", str(tmp_path / "out")),
        env={
            "PYTHONPATH": os.pathsep.join(filter(None, [str(probe), os.environ.get("PYTHONPATH")])),
            "HEAP_REPORT": str(report),
        },
    )
    assert done.returncode == 0, done.stderr  # type: ignore[attr-defined]
    heap = json.loads(report.read_text())
    assert heap["frozen"] > 100_000, heap  # Prefect, pydantic, SQLAlchemy, openai: their objects frozen
    assert heap["walked"] < 1_000, heap  # only what exit hooks made after the package's freeze

"""What recording the endpoint's identity costs per answer: reading `model` and `system_fingerprint` from
an answer's body (`transport.served_by`) and counting the pair (`CallStats.served`), against reading the
answer alone (`transport.completion_from`). Per run: comparing two runs' provenance (`drift_between`).

    python benchmarks/bench_provenance.py

Run by hand; this is a measurement, not a test. Figures in docs/performance.md.
"""

from __future__ import annotations

import time

from judgebench_flows.calls.caller import CallStats
from judgebench_flows.calls.transport import completion_from, served_by
from judgebench_flows.scoring.provenance import drift_between
from judgebench_flows.scoring.result_types import Provenance, Sent, Served

BODY = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4o-2024-08-06",
    "system_fingerprint": "fp_50cad350e4",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "My final verdict is [[A>B]]"}}],
    "usage": {"prompt_tokens": 2500, "completion_tokens": 300},
}


def per_answer(n: int) -> tuple[float, float]:
    """Microseconds per answer: reading it, and reading it with its identity counted."""
    started = time.perf_counter()
    for _ in range(n):
        completion_from(BODY)
    alone = time.perf_counter() - started
    stats = CallStats()
    started = time.perf_counter()
    for _ in range(n):
        completion = served_by(completion_from(BODY), BODY)
        stats.served[completion.served_model or "", completion.system_fingerprint or ""] += 1
    counted = time.perf_counter() - started
    return 1e6 * alone / n, 1e6 * counted / n


def per_run(n: int) -> float:
    """Milliseconds to compare two runs' provenance."""
    sent = Sent(package_version="0.1.0", provider="openai", endpoint="https://h/v1", model="m", sampling={"t": 0})
    a = Provenance(sent=sent, served=Served(answers=700, models={"m": 700}, system_fingerprints={"fp_1": 700}))
    b = Provenance(sent=sent, served=Served(answers=700, models={"m": 700}, system_fingerprints={"fp_2": 700}))
    started = time.perf_counter()
    for _ in range(n):
        drift_between(a, b, "r" * 32)
    return 1e3 * (time.perf_counter() - started) / n


if __name__ == "__main__":
    alone, counted = per_answer(200_000)
    print(f"reading an answer: {alone:.2f} us; with its identity counted: {counted:.2f} us (+{counted - alone:.2f} us)")
    print(f"comparing two runs' provenance: {per_run(2_000):.3f} ms per run")

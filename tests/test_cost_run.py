"""What runs cost, through the real CLI against a real OpenAI-compatible server on loopback.

The server reports usage as whitespace-separated words (its documented token count), so the test prices
every request it answered on its own and compares with what the run reports. Budgets are checked with
the server's request counters: a refused run sends nothing, a stopped run resumes without any request
being answered twice.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from judgebench_flows.core.config import build_config
from judgebench_flows.judging.estimate import estimate_run
from judgebench_flows.testing.fake_openai import FakeOpenAIServer

INPUT_PER_MTOK, OUTPUT_PER_MTOK = 2.0, 8.0
VERDICT = "My final verdict is [[A>B]]"


class PricedServer:
    """A fake OpenAI server whose answers are recorded with their word counts (the usage it reports)."""

    def __init__(self, answer: str = VERDICT) -> None:
        self.answer = answer
        self.prompt_words = 0
        self.completion_words = 0
        self._lock = threading.Lock()
        self.server = FakeOpenAIServer(self.respond)

    def respond(self, body: dict) -> str:
        words = sum(len(str(m.get("content") or "").split()) for m in body["messages"])
        with self._lock:
            self.prompt_words += words
            self.completion_words += len(self.answer.split())
        return self.answer

    def dollars(self) -> float:
        return (self.prompt_words * INPUT_PER_MTOK + self.completion_words * OUTPUT_PER_MTOK) / 1e6


def _pairs(path: Path, n: int = 6) -> Path:
    rows = [
        {
            "pair_id": f"pair-{i}",
            "source": "livebench-math",
            "question": f"Question {i}: what is {i} times {i + 3}?",
            "response_A": f"The product is {i * (i + 3)}, because {i} groups of {i + 3} make it.",
            "response_B": f"The product is {i * (i + 3) + 1}.",
            "label": "A>B",
        }
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _price_file(path: Path, model: str) -> Path:
    path.write_text(
        f"models:\n  {model}: {{input_per_mtok: {INPUT_PER_MTOK}, output_per_mtok: {OUTPUT_PER_MTOK}}}\n"
        "read_on: 2026-11-01\nsource: test\n"
    )
    return path


def _priced_config(tmp_path: Path, base_url: str, prices: Path, max_tokens: int):
    """The settings `_run_args` gives a run of priced-judge, for estimating it in this process."""
    return build_config(
        model="priced-judge",
        base_url=base_url,
        data_path=str(tmp_path / "pairs.jsonl"),
        db_url=f"sqlite:///{tmp_path}/j.db",
        prices=str(prices),
        max_tokens=max_tokens,
    )


def _run_args(tmp_path: Path, base_url: str, model: str, *extra: str, name: str = "run") -> list[str]:
    return [
        "run",
        "--model",
        model,
        "--base-url",
        base_url,
        "--data-path",
        str(tmp_path / "pairs.jsonl"),
        "--db-url",
        f"sqlite:///{tmp_path}/j.db",
        "--result-path",
        str(tmp_path / f"{name}.json"),
        "--output-dir",
        str(tmp_path / name),
        "--no-progress",
        *extra,
    ]


def _usage(tmp_path: Path, name: str) -> dict:
    return json.loads((tmp_path / f"{name}.json").read_text())["usage"]


def test_a_run_reports_what_its_calls_cost_and_a_cached_run_costs_nothing(
    run_cli: Callable[..., object], tmp_path: Path
) -> None:
    _pairs(tmp_path / "pairs.jsonl")
    prices = _price_file(tmp_path / "prices.yaml", "priced-judge")
    priced = PricedServer()
    with priced.server as server:
        first = run_cli(*_run_args(tmp_path, server.base_url, "priced-judge", "--prices", str(prices), name="first"))
        assert first.returncode == 0, first.stderr
        usage = _usage(tmp_path, "first")
        assert server.answered == 12 and priced.prompt_words > 0
        assert usage["cost_usd"] == pytest.approx(priced.dollars(), rel=1e-6)
        assert usage["prices"]["model"] == "priced-judge" and usage["prices"]["read_on"] == "2026-11-01"
        assert usage["prices"]["batch"] is False and usage["prices"]["table"] == str(prices)
        assert "cost $" in first.stdout

        again = run_cli(*_run_args(tmp_path, server.base_url, "priced-judge", "--prices", str(prices), name="again"))
        assert again.returncode == 0, again.stderr
        assert server.answered == 12  # every answer from the cache
        assert _usage(tmp_path, "again")["cost_usd"] == 0.0

        expected = run_cli(
            "estimate", *_run_args(tmp_path, server.base_url, "priced-judge", "--prices", str(prices))[1:]
        )
        assert expected.returncode == 0, expected.stderr
        assert f"expected: ${usage['cost_usd']:.4f} (from run" in expected.stdout, expected.stdout  # same tokens
        assert server.answered == 12

        # a model the bundled table prices, served by another endpoint than its provider's own: unpriced
        unpriced = run_cli(*_run_args(tmp_path, server.base_url, "gpt-4o-mini", name="unpriced"))
        assert unpriced.returncode == 0, unpriced.stderr
        assert _usage(tmp_path, "unpriced")["cost_usd"] is None
        assert "cost unpriced" in unpriced.stdout

    history = run_cli("history", "--db-url", f"sqlite:///{tmp_path}/j.db", env={"COLUMNS": "250"})
    assert history.returncode == 0, history.stderr
    assert f"${usage['cost_usd']:.4f}" in history.stdout and "$0.00" in history.stdout
    assert "unpriced" in history.stdout
    report = (tmp_path / "first" / "report.html").read_text()
    assert f"${usage['cost_usd']:.4f}" in report and "read 2026-11-01" in report
    assert "unpriced" in (tmp_path / "unpriced" / "report.html").read_text()


def test_a_budget_below_the_worst_case_is_refused_before_any_call(
    run_cli: Callable[..., object], tmp_path: Path
) -> None:
    _pairs(tmp_path / "pairs.jsonl")
    prices = _price_file(tmp_path / "prices.yaml", "priced-judge")
    with FakeOpenAIServer(VERDICT) as server:
        refused = run_cli(
            *_run_args(tmp_path, server.base_url, "priced-judge", "--prices", str(prices), "--max-cost", "0.001")
        )
        assert refused.returncode == 2, refused.stderr
        lines = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
        assert len(lines) == 1 and "worst case is $" in lines[0] and "12 judgments" in lines[0], refused.stderr
        assert "Traceback" not in refused.stderr

        unpriced = run_cli(*_run_args(tmp_path, server.base_url, "judge-model", "--max-cost", "100"))
        assert unpriced.returncode == 2 and "has no price" in unpriced.stderr, unpriced.stderr
        assert server.requests == 0

        estimate = run_cli(
            "estimate", *_run_args(tmp_path, server.base_url, "priced-judge", "--prices", str(prices))[1:]
        )
        assert estimate.returncode == 0, estimate.stderr
        assert "worst case: $" in estimate.stdout and "expected: no finished run" in estimate.stdout
        assert server.requests == 0


def test_a_repeated_run_is_checked_against_what_the_cache_does_not_answer(
    run_cli: Callable[..., object], tmp_path: Path
) -> None:
    """The worst case leaves out judgments the call cache answers whole: once a run has paid for every
    judgment, the same run passes a budget far below the full worst case and sends nothing."""
    _pairs(tmp_path / "pairs.jsonl")
    prices = _price_file(tmp_path / "prices.yaml", "priced-judge")
    common = ("--prices", str(prices), "--max-tokens", "64")
    with FakeOpenAIServer(VERDICT) as server:
        first = run_cli(*_run_args(tmp_path, server.base_url, "priced-judge", *common, "--max-cost", "100"))
        assert first.returncode == 0, first.stderr
        paid = server.requests
        config = _priced_config(tmp_path, server.base_url, prices, max_tokens=64)
        cached = estimate_run(config)
        assert (cached.judgments, cached.cached, cached.requests, cached.worst_usd) == (12, 12, 0, 0.0)
        uncached = estimate_run(config.model_copy(update={"db_url": f"sqlite:///{tmp_path}/empty.db"}))
        assert uncached.cached == 0 and (uncached.worst_usd or 0) > 0

        again = run_cli(*_run_args(tmp_path, server.base_url, "priced-judge", *common, "--max-cost", "0.000001"))
        assert again.returncode == 0, again.stderr
        assert server.requests == paid  # nothing sent: every judgment came from the cache
        refused = run_cli(
            *_run_args(tmp_path, server.base_url, "priced-judge", *common, "--no-cache", "--max-cost", "0.000001")
        )
        assert refused.returncode == 2 and "worst case is $" in refused.stderr, refused.stderr


def test_a_run_past_its_budget_stops_and_resumes_without_paying_twice(
    run_cli: Callable[..., object], tmp_path: Path
) -> None:
    """Answers far longer than their cap (a server that ignores max_tokens): the worst case passes the
    budget, the spend does not; the run stops (exit 6) and the same command with a larger budget resumes."""
    _pairs(tmp_path / "pairs.jsonl")
    prices = _price_file(tmp_path / "prices.yaml", "priced-judge")
    priced = PricedServer(VERDICT + " and here is why" + " lorem" * 4000)
    common = ("--prices", str(prices), "--max-tokens", "5", "--concurrency", "1")
    with priced.server as server:
        config = _priced_config(tmp_path, server.base_url, prices, max_tokens=5)
        worst = estimate_run(config).worst_usd
        assert worst is not None and worst < 12 * 4000 * OUTPUT_PER_MTOK / 1e6  # less than the answers will cost
        budget = f"{worst * 1.05:.6f}"

        stopped = run_cli(*_run_args(tmp_path, server.base_url, "priced-judge", *common, "--max-cost", budget))
        assert stopped.returncode == 6, stopped.stderr
        assert "budget reached" in stopped.stderr and "Traceback" not in stopped.stderr
        paid_first = server.answered
        assert 0 < paid_first < 12
        assert priced.dollars() >= float(budget)  # it stopped because it spent the budget

        resumed = run_cli(*_run_args(tmp_path, server.base_url, "priced-judge", *common, "--max-cost", "1000"))
        assert resumed.returncode == 0, resumed.stderr
        assert server.answered == 12
        assert all(count == 1 for count in server.answered_keys().values()), "a request was paid for twice"
        assert _usage(tmp_path, "run")["paid_calls"] == 12 - paid_first

    history = run_cli("history", "--db-url", f"sqlite:///{tmp_path}/j.db", env={"COLUMNS": "250"})
    assert history.returncode == 0 and history.stdout.count("$") >= 2, history.stdout

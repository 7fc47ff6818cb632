"""The nightly matrix in dollars: each cell's cost and the night's total in the summary artifact, an
unpriced model shown as such, and budgets per model and per night that refuse a cell before it calls."""

from __future__ import annotations

import re

import pytest
import yaml

from judgebench_flows.core.errors import UserError
from judgebench_flows.core.pricing import NightSpend, format_usd
from judgebench_flows.core.run_names import run_name
from judgebench_flows.data.night_budget import NightTotals
from judgebench_flows.flows.night_budgets import within_night_budget as _within_night_budget
from judgebench_flows.flows.nightly import CellOutcome, summary_markdown
from judgebench_flows.judging.estimate import estimate_run
from judgebench_flows.judging.matrix import parse_matrix
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._helpers import night_summary, run_night
from tests.conftest import CANARY_KEY, GPT4O_FILE, VERDICTS, oracle_responder

pytestmark = pytest.mark.usefixtures("release_prefect_workers")

MATRIX = {"judge_types": ["vanilla"], "data_files": [GPT4O_FILE]}


def _outcome(name: str, **fields: object) -> CellOutcome:
    return CellOutcome(name=name, status="completed", result_path=f"{name}/results.json", **fields)  # type: ignore[arg-type]


def test_summary_shows_each_cells_dollars_and_the_nights_total() -> None:
    text = summary_markdown(
        [
            _outcome("a", cost_usd=1.25),
            _outcome("b", cost_usd=0.0),
            _outcome("c", unpriced=True),
            _outcome("d"),  # stopped before it reported usage
        ]
    )
    assert "Tonight's cost: $1.25 plus 1 unpriced configuration" in text
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert "| $1.25 |" in rows["a"] and "| $0.00 |" in rows["b"] and "| unpriced |" in rows["c"]
    assert "| - |" in rows["d"]
    assert "Night budget" not in text  # no max_cost: no budget line


def test_summary_shows_the_nights_budget_beside_its_cost() -> None:
    cells = [_outcome("a", cost_usd=1.25)]
    in_process = summary_markdown(cells, NightSpend(max_cost=5.0, spent=1.25))
    assert "Tonight's cost: $1.25\n\nNight budget (max_cost): $5.00; spent $1.25\n" in in_process, in_process
    assert "still held" not in in_process  # in process: nothing outlives the night's cells
    pool = summary_markdown(cells, NightTotals(max_cost=5.0, spent=1.25, held=0.4))
    assert "Night budget (max_cost): $5.00; spent $1.25; still held $0.4000\n" in pool, pool


def test_matrix_budgets_per_model_and_perrun_night() -> None:
    matrix = parse_matrix(
        {**MATRIX, "models": [{"model": "gpt-4o-mini", "max_cost": 2.5}, "o3-mini"], "max_cost": 10}, "matrix"
    )
    a, b = matrix.entries()
    assert (a.config.max_cost, b.config.max_cost, matrix.max_cost) == (2.5, None, 10)
    assert _within_night_budget(a, 1.0).config.max_cost == 1.0  # the night has less left than the model's
    assert _within_night_budget(a, 7.0).config.max_cost == 2.5
    assert _within_night_budget(b, 7.0).config.max_cost == 7.0
    assert _within_night_budget(b, None).config.max_cost is None
    with pytest.raises(UserError, match="max_cost"):
        parse_matrix({**MATRIX, "models": [{"model": "m", "max_cost": -1}]}, "matrix")


@pytest.mark.slow
def test_a_night_reports_its_cost_and_refuses_a_cell_above_what_is_left(
    prefect_server, judgebench_repo, gpt4o_pairs, tmp_path, monkeypatch
):
    url, sha = judgebench_repo
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    prices = tmp_path / "prices.yaml"
    prices.write_text(
        "models:\n  cheap-judge: {input_per_mtok: 1.0, output_per_mtok: 2.0}\n"
        "  dear-judge: {input_per_mtok: 100.0, output_per_mtok: 200.0}\n"
    )
    oracle = oracle_responder(gpt4o_pairs, VERDICTS["vanilla"])

    def matrix(models: list[dict], **extra: object) -> dict:
        return {
            **MATRIX,
            "repo_url": url,
            "ref": sha,
            "db_url": f"sqlite:///{tmp_path}/history.db",
            "output_root": str(tmp_path / "nightly"),
            "max_samples": 4,
            "concurrency": 4,
            "models": models,
            "options": {"cache_dir": str(tmp_path / "cache"), "bootstrap_resamples": 100, "prices": str(prices)},
            **extra,
        }

    cheap, dear, free = (run_name("vanilla", m, GPT4O_FILE) for m in ("cheap-judge", "dear-judge", "local-judge"))
    with FakeOpenAIServer(oracle) as server:
        models = [
            {"model": "cheap-judge", "base_url": server.base_url},
            {"model": "local-judge", "base_url": server.base_url},
        ]
        path = tmp_path / "night1.yaml"
        path.write_text(yaml.safe_dump(matrix(models)))
        state = run_night(path)
        assert state.is_completed(), repr(state)
        summary = night_summary(state)
        assert re.search(r"Tonight's cost: \$0\.\d*[1-9]\d* plus 1 unpriced configuration\n", summary), summary
        assert f"| {free} | completed" in summary and "| unpriced |" in summary, summary
        assert "Night budget" not in summary, summary
        assert server.answered == 16

        # night 2: the night's budget covers the cheap cell's worst case, not the dear one's
        # a night reuses only its own answers unless told otherwise (issue 41): this one replays night 1's on purpose
        night2 = matrix(
            [
                {"model": "cheap-judge", "base_url": server.base_url},
                {"model": "dear-judge", "base_url": server.base_url},
            ]
        )
        night2["options"] = {**night2["options"], "cache_reuse": "any"}
        entries = parse_matrix(night2, "night2").entries()
        uncached = {"db_url": f"sqlite:///{tmp_path}/empty.db"}  # the worst case of a first night, nothing cached
        worst_cheap, worst_dear = (estimate_run(e.config.model_copy(update=uncached)).worst_usd for e in entries)
        assert worst_cheap is not None and worst_dear is not None and worst_dear > 10 * worst_cheap
        path.write_text(yaml.safe_dump({**night2, "max_cost": round(worst_cheap * 2, 6)}))
        state2 = run_night(path)
        assert server.answered == 16  # the cheap cell came from the cache, the dear one was refused
    assert state2.is_failed() and f"{dear} (failed" in state2.message, repr(state2)
    summary2 = night_summary(state2)
    assert f"| {cheap} | completed" in summary2 and "| $0.00 |" in summary2, summary2
    assert "worst case is $" in summary2 and "Tonight's cost: $0.00\n" in summary2, summary2
    budget_line = f"Night budget (max_cost): {format_usd(round(worst_cheap * 2, 6))}; spent $0.00\n"
    assert budget_line in summary2, summary2


def test_a_cell_with_no_valid_verdict_reads_n_a_not_zero_percent() -> None:
    nothing = _outcome("vanilla__m", accuracy=0.0, ci_low=0.0, ci_high=0.0, judgments=8, failed_judgments=0)
    nothing.status, nothing.invalid_judgments = "failed", 8
    some = _outcome("arena_hard__m", accuracy=0.25, ci_low=0.0, ci_high=0.5, judgments=8, failed_judgments=6)
    some.status, some.invalid_judgments = "failed", 0
    text = summary_markdown([nothing, some])
    assert "| vanilla__m | **FAILED** | n/a | 0 / 8 of 8 |" in text, text
    assert "| arena_hard__m | **FAILED** | 25.00% (0.00%–50.00%) | 6 / 0 of 8 |" in text, text

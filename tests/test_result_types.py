"""results.json read into its typed model and written back: byte for byte for files the previous version
wrote (tests/fixtures/results: real runs of the README's first run against the bundled server), and
older or newer files still read (missing keys as defaults, unknown keys kept)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from judgebench_flows.scoring.results import write_json
from judgebench_flows.scoring.run_results import RunResults

FIXTURES = sorted((Path(__file__).parent / "fixtures" / "results").glob("*.json"))


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.stem)
def test_a_results_json_of_the_previous_version_is_written_back_identically(fixture: Path, tmp_path: Path) -> None:
    text = fixture.read_text(encoding="utf-8")
    results = RunResults.read(text)
    assert results.overall_accuracy.accuracy == json.loads(text)["overall_accuracy"]["accuracy"]
    assert list(results.as_json()) == list(json.loads(text))  # the same keys, in the same order
    assert write_json(tmp_path / "results.json", results).read_text(encoding="utf-8") == text
    assert json.dumps(results.as_json(), default=str) == json.dumps(json.loads(text))  # as the database stores it


def test_the_fixtures_cover_the_optional_sections() -> None:
    """One fixture without a baseline, one with a regression check and its position-bias test."""
    documents = [json.loads(path.read_text(encoding="utf-8")) for path in FIXTURES]
    assert any(d["regression"] is None for d in documents)
    assert any(d["regression"] and "position_bias" in d["regression"] for d in documents)


def test_an_older_file_reads_with_defaults_and_a_newer_one_keeps_its_keys() -> None:
    document = json.loads(FIXTURES[0].read_text(encoding="utf-8"))
    for key in ("first_position_rate", "first_position_verdicts", "sided_verdicts"):  # before position bias
        del document["consistency"][key]
    del document["usage"]["cost_usd"], document["run"]["timings"]  # before costs and timings
    document["usage"]["future_counter"] = 3
    document["a_new_section"] = {"kept": True}
    results = RunResults.model_validate(document)
    assert results.consistency is not None and results.consistency.first_position_rate is None
    assert not results.usage.priced and results.usage.extra("future_counter") == 3  # type: ignore[union-attr]
    written = results.as_json()
    assert written["a_new_section"] == {"kept": True} and written["usage"]["future_counter"] == 3
    assert list(written)[-1] == "a_new_section"  # unknown keys after the known ones


def test_a_hand_written_partial_results_reads() -> None:
    """What users' scripts and older tools hand the report: only some sections."""
    results = RunResults.model_validate({"overall_accuracy": {"accuracy": 0.5}, "run": {"run_id": "r"}})
    assert (results.overall_accuracy.accuracy, results.run.run_id, results.regression) == (0.5, "r", None)
    assert "requests" not in results.as_json()["run"] and "outputs" not in results.as_json()

"""Where results.json goes: with the run's other files, unless --result-path places it (issue 51)."""

from __future__ import annotations


def test_results_json_goes_with_the_outputs_unless_placed() -> None:
    from judgebench_flows.core.config import RunConfig

    assert RunConfig(model="m").result_path == "results/{run_id}/results.json"  # as always
    assert RunConfig(model="m", output_dir="s3://b/runs/{run_id}").result_path == "s3://b/runs/{run_id}/results.json"
    placed = RunConfig(model="m", output_dir="s3://b/runs", result_path="here.json")
    assert placed.result_path == "here.json"
    assert RunConfig.model_validate(placed.model_dump()).result_path == "here.json"

"""Loading a judge, building the run config and reading the data: every user mistake is one clear line."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from judgebench_flows.core.errors import UserError
from judgebench_flows.judges.external.config import ExternalJudgeConfig, external_config_from_options, judge_config
from judgebench_flows.judges.external.data import check_columns, read_data, with_results, write_scored
from judgebench_flows.judges.external.loader import judge_form, load_judge
from judgebench_flows.judges.external.run import preflight, shards
from judgebench_flows.judges.external.scoring import RowResult

FIXTURES = Path(__file__).parent / "fixtures" / "external"
FLAKY = str(FIXTURES / "flaky_judge.py")


def user_error(call, *args, **kwargs) -> str:
    with pytest.raises(UserError) as caught:
        call(*args, **kwargs)
    message = str(caught.value)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------- loader


def test_load_row_and_table_judges():
    _, form = load_judge(FLAKY)
    assert form == "row"
    function, form = load_judge(str(FIXTURES / "table_judge.py"))
    assert form == "table"
    assert function.__name__ == "evaluate"


def test_file_not_found(tmp_path):
    path = str(tmp_path / "nope.py")
    assert user_error(load_judge, path) == f"External judge file not found: {path}"


def test_not_a_python_file(tmp_path):
    path = tmp_path / "judge.txt"
    path.write_text("def evaluate(row, config): pass\n")
    assert user_error(load_judge, str(path)) == f"External judge file must be a Python file (.py): {path}"


def test_function_not_found_lists_available():
    path = str(FIXTURES / "bad_signature.py")
    assert (
        user_error(load_judge, path, "score") == f"Function 'score' not found in {path} (available: evaluate, helper)"
    )


def test_too_few_parameters():
    path = str(FIXTURES / "bad_signature.py")
    assert user_error(load_judge, path) == "Judge function 'evaluate' must accept at least 2 parameters (row, config)"
    assert load_judge(path, "helper")[1] == "row"


def test_import_error_is_one_line_naming_the_file():
    path = str(FIXTURES / "broken_import.py")
    assert user_error(load_judge, path) == (
        f"Error importing external judge file {path}: "
        "ModuleNotFoundError: No module named 'module_that_does_not_exist_anywhere'"
    )


def test_syntax_error_is_one_line_naming_the_file(tmp_path):
    path = tmp_path / "judge.py"
    path.write_text("def evaluate(row, config)\n    return '', 1.0\n")
    message = user_error(load_judge, str(path))
    assert message.startswith(f"Error importing external judge file {path}: SyntaxError: ")
    assert "line 1" in message


def test_runtime_error_at_import(tmp_path):
    path = tmp_path / "judge.py"
    path.write_text("raise RuntimeError('needs\\nMODEL_DIR set')\n")
    assert (
        user_error(load_judge, str(path))
        == f"Error importing external judge file {path}: RuntimeError: needs MODEL_DIR set"
    )


@pytest.mark.parametrize(
    "source, form",
    [
        ("def evaluate(df, config): pass", "table"),
        ("import pandas as pd\ndef evaluate(data: pd.DataFrame, config): pass", "table"),
        ("from __future__ import annotations\ndef evaluate(data: pd.DataFrame, config): pass", "table"),
        ("def evaluate(row, config): pass", "row"),
        ("import pandas as pd\ndef evaluate(row: pd.Series, config: dict): pass", "row"),
        ("def evaluate(*args): pass", "row"),
    ],
)
def test_form_detection(tmp_path, source, form):
    path = tmp_path / "judge.py"
    path.write_text(source + "\n")
    assert load_judge(str(path))[1] == form


def test_judge_files_with_same_name_do_not_mix(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "judge.py").write_text(f"def evaluate(row, config):\n    return '{name}', 1.0\n")
    first, _ = load_judge(str(tmp_path / "a" / "judge.py"))
    second, _ = load_judge(str(tmp_path / "b" / "judge.py"))
    assert first(None, {})[0] == "a" and second(None, {})[0] == "b"


def test_dataclass_in_judge_file_works(tmp_path):
    path = tmp_path / "judge.py"
    path.write_text(
        "from dataclasses import dataclass\n@dataclass\nclass Verdict:\n    text: str\n"
        "def evaluate(row, config):\n    return Verdict('fine').text, 1.0\n"
    )
    function, _ = load_judge(str(path))
    assert function(None, {}) == ("fine", 1.0)


def test_judge_form_of_lambda():
    assert judge_form(lambda df, config: df) == "table"


# ---------------------------------------------------------------- config


def write_yaml(tmp_path: Path, text: str) -> str:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return str(path)


def test_yaml_then_cli_overrides(tmp_path):
    path = write_yaml(
        tmp_path,
        "judge_type: external\nexternal_judge_path: a.py\ndata_path: d.csv\nmax_workers: 3\nshard_size: 10\n"
        "reference_column: gold\nexternal_judge_config:\n  tolerance: 0.1\n  extract_last_number: true\n",
    )
    config = external_config_from_options(
        path,
        {
            "external_judge_path": "b.py",
            "max_workers": None,
            "shard_size": 20,
            "external_judge_config": '{"tolerance": 0.5}',
        },
    )
    assert config.external_judge_path == "b.py"  # CLI wins
    assert config.max_workers == 3  # None is "not given"
    assert config.shard_size == 20
    assert config.reference_column == "gold"
    assert config.external_judge_config == {"tolerance": 0.5, "extract_last_number": True}  # merged per key
    assert config.external_judge_function == "evaluate"
    assert config.summary_path() == Path("results/external/d_summary.json")


def test_cli_only_defaults():
    config = external_config_from_options(None, {"external_judge_path": "j.py", "data_path": "x.jsonl"})
    assert (config.model_input_column, config.model_output_column, config.reference_column, config.qid_column) == (
        "model_input",
        "response",
        "ground_truth",
        "id",
    )
    assert (config.max_workers, config.shard_size, config.external_judge_config) == (8, 500, {})


def test_judge_config_merges_columns():
    config = ExternalJudgeConfig(
        external_judge_path="j.py", data_path="d.csv", reference_column="gold", external_judge_config={"tolerance": 0.1}
    )
    assert judge_config(config) == {
        "tolerance": 0.1,
        "model_input_column": "model_input",
        "model_output_column": "response",
        "reference_column": "gold",
        "qid_column": "id",
        "external_judge_config": {"tolerance": 0.1},
    }


def test_judge_config_refuses_clashing_key():
    config = ExternalJudgeConfig(
        external_judge_path="j.py", data_path="d.csv", external_judge_config={"reference_column": "x"}
    )
    assert user_error(judge_config, config) == (
        "external_judge_config key 'reference_column' clashes with the option of the same name; set it as a top-level option"
    )


def test_invalid_json_on_cli():
    message = user_error(
        external_config_from_options,
        None,
        {"external_judge_path": "j.py", "data_path": "d.csv", "external_judge_config": "{tolerance: 1}"},
    )
    assert (
        message
        == "Invalid JSON in --external-judge-config: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"
    )


def test_json_that_is_not_an_object():
    message = user_error(
        external_config_from_options,
        None,
        {"external_judge_path": "j.py", "data_path": "d.csv", "external_judge_config": "[1]"},
    )
    assert message == 'Invalid JSON in --external-judge-config: expected an object like {"tolerance": 0.01}, got list'


def test_unknown_yaml_key(tmp_path):
    path = write_yaml(tmp_path, "external_judge_path: a.py\ndata_path: d.csv\nshard_sise: 10\n")
    message = user_error(external_config_from_options, path, {})
    assert message.startswith(f"Unknown key 'shard_sise' in {path} (known: judge_type, external_judge_path, ")


def test_missing_option(tmp_path):
    assert user_error(external_config_from_options, None, {"data_path": "d.csv"}) == (
        "Missing option external_judge_path: set --external-judge-path or 'external_judge_path' in the config file"
    )


def test_invalid_option_value(tmp_path):
    path = write_yaml(tmp_path, "external_judge_path: a.py\ndata_path: d.csv\nmax_workers: 0\n")
    message = user_error(external_config_from_options, path, {})
    assert message.startswith("Invalid option max_workers: Input should be greater than or equal to 1 (got 0)")


def test_yaml_problems(tmp_path):
    missing = str(tmp_path / "none.yaml")
    assert user_error(external_config_from_options, missing, {}) == f"Config file not found: {missing}"
    broken = write_yaml(tmp_path, "a: [1\n")
    assert user_error(external_config_from_options, broken, {}).startswith(
        f"{broken}, line 2, column 1: not valid YAML: "
    )
    listing = write_yaml(tmp_path, "- 1\n- 2\n")
    assert (
        user_error(external_config_from_options, listing, {})
        == f"Config file {listing} must contain a mapping of options, got list"
    )


def test_empty_judge_config_in_yaml(tmp_path):
    path = write_yaml(tmp_path, "external_judge_path: a.py\ndata_path: d.csv\nexternal_judge_config:\n")
    assert external_config_from_options(path, {}).external_judge_config == {}
    as_json = write_yaml(tmp_path, "external_judge_path: a.py\ndata_path: d.csv\nexternal_judge_config: '{\"k\": 1}'\n")
    assert external_config_from_options(as_json, {}).external_judge_config == {"k": 1}


def test_unknown_override_is_a_caller_bug():
    with pytest.raises(ValueError, match="unknown external judge option"):
        external_config_from_options(None, {"external_judge_path": "j.py", "data_path": "d", "judge": "x"})


# ---------------------------------------------------------------- data formats

ROWS = [
    {"id": 1, "model_input": "2+2?", "response": "4", "ground_truth": "4"},
    {"id": 2, "model_input": "capital?", "response": "None", "ground_truth": "Paris"},
    {"id": 3, "model_input": "3*3?", "response": None, "ground_truth": "9"},
]


def test_read_csv_keeps_literal_none_and_na(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text("id,model_input,response,ground_truth\n1,2+2?,4,4\n2,capital?,None,NA\n3,3*3?,,9\n")
    frame = read_data(str(path))
    assert frame.loc[1, "response"] == "None" and frame.loc[1, "ground_truth"] == "NA"
    assert pd.isna(frame.loc[2, "response"])
    assert frame["id"].tolist() == [1, 2, 3]


def test_read_jsonl(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n\n")
    frame = read_data(str(path))
    assert frame["id"].tolist() == [1, 2, 3]
    assert frame.loc[1, "response"] == "None"
    assert pd.isna(frame.loc[2, "response"])


def test_read_parquet(tmp_path):
    path = tmp_path / "data.parquet"
    pd.DataFrame(ROWS).to_parquet(path)
    frame = read_data(str(path))
    assert frame["id"].tolist() == [1, 2, 3]
    assert frame.loc[0, "ground_truth"] == "4"


def test_malformed_jsonl_line_is_named(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n\n" + '{"id": 2, "response": "x",\n')
    assert user_error(read_data, str(path)) == (
        f"Invalid JSON on line 3 of {path}: Expecting property name enclosed in double quotes (column 27)"
    )


def test_jsonl_line_that_is_not_an_object(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n[1, 2]\n")
    assert user_error(read_data, str(path)) == f"Line 2 of {path} is not a JSON object (got list)"


def test_unknown_extension_missing_and_unreadable_files(tmp_path):
    assert user_error(read_data, str(tmp_path / "data.txt")) == (
        f"Unsupported data file extension '.txt' for {tmp_path / 'data.txt'} (use .csv, .jsonl, .parquet)"
    )
    assert user_error(read_data, str(tmp_path / "none.csv")) == f"Data file not found: {tmp_path / 'none.csv'}"
    fake = tmp_path / "fake.parquet"
    fake.write_text("not parquet at all")
    assert user_error(read_data, str(fake)).startswith(f"Cannot read {fake}: ")
    bad_csv = tmp_path / "bad.csv"
    bad_csv.write_text('a,b\n1,2\n3,4,5\n"unterminated\n')
    message = user_error(read_data, str(bad_csv))
    assert message.startswith(f"Cannot read {bad_csv}: ParserError: ") and "line 3" in message
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    assert user_error(read_data, str(empty)) == f"No records in {empty}"


def test_missing_column_message(tmp_path):
    config = ExternalJudgeConfig(external_judge_path="j.py", data_path="data.csv")
    frame = pd.DataFrame({"id": [1], "model_input": ["q"], "response": ["r"], "gold": ["g"]})
    assert user_error(check_columns, frame, config) == (
        "Column 'ground_truth' (reference_column) not found in data.csv (columns: id, model_input, response, gold)"
    )
    check_columns(frame, config.model_copy(update={"reference_column": "gold"}))
    check_columns(
        frame[["id", "response"]], config.model_copy(update={"reference_column": None, "model_input_column": None})
    )


def test_result_column_collision(tmp_path):
    config = ExternalJudgeConfig(
        external_judge_path="j.py", data_path="data.csv", qid_column=None, model_input_column=None
    )
    frame = pd.DataFrame({"response": ["r"], "ground_truth": ["g"], "score": [3]})
    assert user_error(check_columns, frame, config) == (
        "Column 'score' in data.csv would be overwritten by the judge's output; rename it"
    )


def test_parquet_input_writes_parquet_too(tmp_path):
    data = tmp_path / "data.parquet"
    pd.DataFrame(ROWS).to_parquet(data)
    config = ExternalJudgeConfig(external_judge_path="j.py", data_path=str(data), output_dir=str(tmp_path / "out"))
    frame = read_data(str(data))
    results = [
        RowResult(evaluation_text="t", score=1.0, status="scored"),
        RowResult(status="na"),
        RowResult(status="error", error="E: x"),
    ]
    written = write_scored(with_results(frame, results), config)
    assert written == [str(tmp_path / "out" / "data_scored.csv"), str(tmp_path / "out" / "data_scored.parquet")]
    back = pd.read_parquet(written[1])
    assert back["status"].tolist() == ["scored", "na", "error"]
    assert back["score"].tolist()[0] == 1.0 and pd.isna(back["score"].tolist()[1])


def test_preflight_checks_judge_before_data(tmp_path):
    config = ExternalJudgeConfig(external_judge_path=str(tmp_path / "no.py"), data_path=str(tmp_path / "no.csv"))
    assert user_error(preflight, config).startswith("External judge file not found")


def test_shards_cover_the_frame_in_order():
    frame = pd.DataFrame({"n": range(1203)})
    pieces = shards(frame, 500)
    assert [len(p) for p in pieces] == [500, 500, 203]
    assert pd.concat(pieces)["n"].tolist() == list(range(1203))

"""A matrix or price file with a mistake: the one error line names the file's line, for an editor."""

from __future__ import annotations

import pytest

from judgebench_flows.core.errors import UserError
from judgebench_flows.judging.matrix import load_matrix

GOOD = """\
judge_types:
  - arena_hard
models:
  - gpt-4o-mini
data_files:
  - dataset=judgebench,response_model=gpt-4o-2024-05-13.jsonl
"""


def test_a_matrix_that_is_not_yaml_names_line_and_column(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(GOOD + "options:\n  rpm: [1, 2\n")
    with pytest.raises(UserError) as caught:
        load_matrix(path)
    assert str(caught.value).startswith(f"{path}, line 9, column 1: not valid YAML: "), caught.value


def test_a_matrix_value_that_is_wrong_names_its_line(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(GOOD.replace("  - arena_hard", "  - arena_hard\n  - nonsense_judge") + "concurrency: 4\n")
    with pytest.raises(UserError) as caught:
        load_matrix(path)
    assert str(caught.value).startswith(f"{path}, line 1: judge_types: unknown judge type 'nonsense_judge'")
    path.write_text(GOOD + "models_typo: 1\n")
    with pytest.raises(UserError) as caught:
        load_matrix(path)
    assert str(caught.value).startswith(f"{path}, line 7: models_typo: unknown key"), caught.value


def test_a_price_file_names_its_line(tmp_path):
    from judgebench_flows.core.pricing import load_price_file

    path = tmp_path / "prices.yaml"
    path.write_text("models:\n  gpt-x:\n    input_per_mtok: 1.0\n    output_per_mtok: lots\n")
    with pytest.raises(UserError) as caught:
        load_price_file(str(path))
    assert str(caught.value).startswith(f"--prices {path}, line "), caught.value
    assert "models.gpt-x.output_per_mtok" in str(caught.value)
    path.write_text("models:\n  gpt-x: {input_per_mtok: 1.0\n")
    with pytest.raises(UserError) as caught:
        load_price_file(str(path))
    assert str(caught.value).startswith(f"--prices {path}, line 3, column 1: not valid YAML"), caught.value

"""`judgebench_flows.evaluate`: the CLI's run as a Python function, from a script and from inside a running
event loop (as in Jupyter), with a custom judge class; its numbers are the CLI's for the same options."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import textwrap
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest

from judgebench_flows.api import signature
from judgebench_flows.api.evaluate import class_spec, evaluate, evaluate_async, run_config
from judgebench_flows.api.evaluation import Evaluation
from judgebench_flows.core.config import RunConfig
from judgebench_flows.core.errors import UserError
from judgebench_flows.scoring.run_results import RunResults
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests.conftest import (
    CANARY_KEY,
    GPT4O_FILE,
    NO_DATA_REASON,
    SHARED,
    load_jsonl,
    oracle_responder,
    requires_shared,
    shared_data_available,
)

DATA = SHARED / "data" / GPT4O_FILE
PAIRS = Path("pairs.jsonl")  # a data path the settings only hold: nothing reads it
SAMPLES = 40

# A custom judge as a user writes it (docs/judges.md): the oracle answers `[[A]]` / `[[B]]`.
JUDGE = """
class OracleJudge:
    sampling = {"temperature": 0.0, "max_tokens": 32}

    def format(self, question, answer_A, answer_B):
        return [{"role": "user", "content": f"Q: {question}\\n[A]\\n{answer_A}\\n[B]\\n{answer_B}\\nWhich is better?"}]

    def parse(self, text):
        return {"[[A]]": "A>B", "[[B]]": "B>A"}.get(text.strip(), "")
"""


class NotTopLevel:
    class Inner:
        pass


def test_a_judge_class_is_named_by_its_module() -> None:
    assert class_spec(NotTopLevel) == f"{__name__}:NotTopLevel"
    with pytest.raises(UserError, match="top level"):
        class_spec(NotTopLevel.Inner)

    def make() -> type:
        class Local:
            pass

        return Local

    with pytest.raises(UserError, match="top level"):
        class_spec(make())


def test_options_are_the_commands() -> None:
    config = run_config(
        model="m", judge=NotTopLevel, data_path=PAIRS, options={"concurrency": 3, "base_url": "http://x/v1"}
    )
    assert (config.judge_type, config.judge_template) == ("custom", f"{__name__}:NotTopLevel")
    assert config.endpoint.concurrency == 3 and config.data_path == str(PAIRS)
    assert config.endpoint.base_url == "http://x/v1"
    assert run_config(model="m", judge=None, data_path=None, options={}).judge_type == "arena_hard"  # the default
    assert run_config(model="m", judge=None, data_path=None, options={"judge_type": "auto_j"}).judge_type == "auto_j"
    with pytest.raises(UserError, match="unknown option 'concurency'"):
        run_config(model="m", judge="vanilla", data_path=None, options={"concurency": 3})
    with pytest.raises(UserError, match="--concurrency"):
        run_config(model="m", judge="vanilla", data_path=None, options={"concurrency": 0})
    with pytest.raises(UserError, match="model= is required"):
        run_config(model=None, judge="vanilla", data_path=None, options={})


def test_a_judge_named_twice_is_refused_naming_both() -> None:
    """`judge="arena_hard"` (the default judge, spelt out) with `judge_type="vanilla"` used to judge with
    vanilla silently; any two spellings of the judge are now one error naming both, before any work."""
    with pytest.raises(UserError) as refused:
        evaluate(model="m", judge="arena_hard", judge_type="vanilla")
    message = str(refused.value)
    assert "judge='arena_hard'" in message and "judge_type='vanilla'" in message, message
    assert len(message.splitlines()) == 1
    with pytest.raises(UserError, match=r"judge=NotTopLevel and judge_template='x.py:J'"):
        evaluate(model="m", judge=NotTopLevel, judge_template="x.py:J")


def test_every_option_is_a_keyword_of_evaluate_written_from_the_settings() -> None:
    """One source: the generated signature is what api/signature.py writes from the settings models now
    (a field added, removed or retyped fails here until `python -m judgebench_flows.api.signature`)."""
    assert signature.current() == signature.render(), (
        "evaluate()'s keywords differ from RunConfig/EndpointSettings: run python -m judgebench_flows.api.signature"
    )
    parameters = inspect.signature(evaluate).parameters
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters.values())
    assert set(parameters) == RunConfig.option_names() | {"judge", "progress", "verbose"}
    hints = typing.get_type_hints(evaluate)
    assert hints["concurrency"] == int | None and hints["cache"] == typing.Literal["use", "off", "refresh"] | None
    assert inspect.signature(evaluate_async).parameters == parameters  # the same keywords, awaited
    with pytest.raises(TypeError, match="concurency"):
        evaluate(model="m", concurency=3)  # type: ignore[call-arg]  # what a type checker also says


def test_the_generator_writes_each_field_type() -> None:
    assert signature.source_of(typing.Literal["a", "b"] | None) == 'Literal["a", "b"] | None'
    assert signature.source_of(dict[str, typing.Any]) == "dict[str, Any]"
    with pytest.raises(TypeError, match="teach source_of"):
        signature.source_of(Path)


def test_frames_show_the_typed_results() -> None:
    results = RunResults.model_validate(
        {
            "model": "m",
            "overall_accuracy": {
                "accuracy": 0.5,
                "correct_count": 1,
                "total_samples": 2,
                "ci_low": 0.0,
                "ci_high": 1.0,
            },
            "category_accuracy": {
                "mmlu-pro": {"accuracy": 1.0, "correct_count": 1, "total_samples": 1},
                "livecodebench": {"accuracy": None},
            },
            "source_accuracy": {"mmlu-pro-math": {"accuracy": 0.0, "correct_count": 0, "total_samples": 1}},
        }
    )
    evaluation = Evaluation.of(results, [])
    table = evaluation.accuracy()
    assert table.loc[("overall", "overall"), "ci_high"] == 1.0
    assert table.loc[("category", "mmlu-pro"), "correct_count"] == 1
    assert evaluation.by_category()["accuracy"].isna().tolist() == [False, True]
    assert evaluation.by_source().index.tolist() == ["mmlu-pro-math"]
    assert evaluation.judgments().empty and "decision_for_pair" in evaluation.judgments().columns
    assert evaluation.overall_accuracy.accuracy == 0.5  # the typed results, as results.json has them


@pytest.fixture(scope="module")
def oracle() -> Iterator[FakeOpenAIServer]:
    """Answers with the labelled verdict for 80% of the pairs (seeded), in the custom judge's format."""
    if not shared_data_available():
        pytest.skip(NO_DATA_REASON)
    answer = oracle_responder(load_jsonl(DATA), lambda first: "[[A]]" if first else "[[B]]", accuracy=0.8, seed=3)
    with FakeOpenAIServer(answer, api_key=CANARY_KEY) as server:
        yield server


def options(server: FakeOpenAIServer, out: Path) -> dict[str, object]:
    return {
        "model": "judge",
        "base_url": server.base_url,
        "data_path": str(DATA),
        "max_samples": SAMPLES,
        "db_url": f"sqlite:///{out}.db",
        "result_path": f"{out}.json",
        "output_dir": str(out),
        "report": False,
    }


SCRIPT = """
import asyncio, json, sys
import judgebench_flows
{judge}

OPTIONS = json.loads(sys.argv[2])


def summary(evaluation):
    judgments = evaluation.judgments()
    return {{
        "results": evaluation.as_json(),
        "by_category": evaluation.by_category()["accuracy"].to_dict(),
        "accuracy_rows": len(evaluation.accuracy()),
        "judgments": len(judgments),
        "correct_rows": int((judgments["decision_for_pair"] == judgments["label"]).sum()),
    }}


if sys.argv[1] == "script":
    print(json.dumps(summary(judgebench_flows.evaluate(judge=OracleJudge, **OPTIONS))))
elif sys.argv[1] == "await":  # a notebook's `await`: the loop goes on while the run judges
    print(json.dumps(summary(asyncio.run(judgebench_flows.evaluate_async(judge=OracleJudge, **OPTIONS)))))
else:  # as a notebook's cell runs: inside the event loop the kernel runs
    async def cell():
        evaluation = judgebench_flows.evaluate(judge=OracleJudge, **OPTIONS)
        return summary(evaluation)

    print(json.dumps(asyncio.run(cell())))
"""


def run_script(tmp_path: Path, mode: str, opts: dict[str, object]) -> dict:
    script = tmp_path / f"evaluate_{mode}.py"
    script.write_text(textwrap.dedent(SCRIPT).format(judge=JUDGE))
    done = subprocess.run(
        [sys.executable, str(script), mode, json.dumps(opts)],
        cwd=tmp_path,
        env={**__import__("os").environ, "OPENAI_API_KEY": CANARY_KEY, "JUDGEBENCH_CACHE_DIR": str(tmp_path / "c")},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert CANARY_KEY not in done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@requires_shared
@pytest.mark.slow
def test_evaluate_gives_the_clis_numbers(tmp_path: Path, oracle: FakeOpenAIServer, run_cli) -> None:
    (tmp_path / "oracle_judge.py").write_text(JUDGE)
    cli = options(oracle, tmp_path / "cli")
    done = run_cli(
        "run",
        "--judge-template",
        "oracle_judge.py:OracleJudge",
        *(f"--{k.replace('_', '-')}={v}" for k, v in cli.items() if k != "report"),
        "--no-report",
        "--no-progress",
    )
    assert done.returncode == 0, done.stderr
    expected = json.loads((tmp_path / "cli.json").read_text())
    assert 0.5 < expected["overall_accuracy"]["accuracy"] < 1.0  # the oracle's seeded mistakes, not all right

    for mode in ("script", "event-loop", "await"):
        got = run_script(tmp_path, mode, options(oracle, tmp_path / mode))
        results = got["results"]
        for key in ("overall_accuracy", "category_accuracy", "source_accuracy", "consistency", "invalid"):
            assert results[key] == expected[key], (mode, key)
        assert results["usage"]["judgments"] == expected["usage"]["judgments"] == 2 * SAMPLES
        assert got["by_category"] == {k: v["accuracy"] for k, v in expected["category_accuracy"].items()}
        assert got["judgments"] == 2 * SAMPLES and got["accuracy_rows"] == 1 + 4 + len(expected["source_accuracy"])
        assert got["correct_rows"] > 0
        assert results["judge_type"] == "__main__:OracleJudge"


def test_a_notebook_class_is_fingerprinted_by_its_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cell's class has no source file: its compiled methods stand in, so an edit judges afresh."""
    import types

    from judgebench_flows.judges import CustomJudge

    def fingerprint(parse_body: str) -> str:
        cell = types.ModuleType("notebook_cell_for_test")  # as a kernel's __main__: no __file__
        exec(JUDGE.replace('.get(text.strip(), "")', parse_body), cell.__dict__)
        cell.OracleJudge.__module__ = cell.__name__
        monkeypatch.setitem(sys.modules, cell.__name__, cell)
        return CustomJudge(class_spec(cell.OracleJudge)).fingerprint()

    same = '.get(text.strip(), "")'
    assert fingerprint(same) == fingerprint(same)
    assert fingerprint(same) != fingerprint('.get(text.strip().upper(), "")')

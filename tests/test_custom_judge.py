"""Custom judges (`path.py:Class`, `module:Class`) held to the judge contract, and the judging procedure
(format, call, parse, Arena-Hard's follow-up turn) driven by a scripted `complete` callable."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path
from typing import Any

import pytest

from judgebench_flows.core.errors import UserError
from judgebench_flows.judges import CustomJudge, ParseFailed, get_judge
from judgebench_flows.judges.builtin import ARENA_HARD_FOLLOW_UP
from judgebench_flows.judges.procedure import CallFailed, Completion, Outcome, judge_one_order

GOOD = """
PROMPT = "Q: {q}\\nA: {a}\\nB: {b}\\nAnswer A or B."


class Judge:
    sampling = {"temperature": 0.3, "max_tokens": 16}

    def format(self, question, answer_A, answer_B):
        return [{"role": "system", "content": "be fair"}, {"role": "user", "content": PROMPT.format(q=question, a=answer_A, b=answer_B)}]

    def parse(self, text):
        text = text.strip()
        return {"A": "A>B", "B": "B>A", "tie": "A=B"}.get(text)


class Helper:
    pass
"""


def write(tmp_path: Path, body: str, name: str = "my_judge.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def judge_with(
    tmp_path: Path, format_body: str = "return 'prompt'", parse_body: str = "return 'A>B'", name: str = "j.py"
) -> CustomJudge:
    path = write(
        tmp_path,
        f"""
class J:
    def format(self, question, answer_A, answer_B):
        {format_body}

    def parse(self, text):
        {parse_body}
""",
        name,
    )
    return CustomJudge(f"{path}:J")


def one_line_user_error(excinfo: pytest.ExceptionInfo[UserError]) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    return message


# --- loading -------------------------------------------------------------------------------------------


def test_load_by_path(tmp_path: Path) -> None:
    judge = CustomJudge(f"{write(tmp_path, GOOD)}:Judge")
    assert judge.name == "custom:Judge"
    assert judge.format("q", "a", "b") == [
        {"role": "system", "content": "be fair"},
        {"role": "user", "content": "Q: q\nA: a\nB: b\nAnswer A or B."},
    ]
    assert judge.parse(" B ") == "B>A"
    assert judge.sampling == {"temperature": 0.3, "max_tokens": 16}
    assert judge.follow_up is None and not judge.wants_follow_up("anything")


def test_load_by_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, GOOD, "judge_module_for_test.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    judge = CustomJudge("judge_module_for_test:Judge")
    assert judge.parse("A") == "A>B"
    assert judge.format("q", "a", "b")[-1]["role"] == "user"


def test_get_judge_builds_a_custom_judge(tmp_path: Path) -> None:
    judge = get_judge("custom", judge_template=f"{write(tmp_path, GOOD)}:Judge")
    assert isinstance(judge, CustomJudge)


def test_default_sampling_is_greedy(tmp_path: Path) -> None:
    assert judge_with(tmp_path).sampling == {"temperature": 0.0}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("{tmp}/missing.py:Judge", r"file not found: .*missing\.py"),
        ("{tmp}/my_judge.py:Nope", r"class 'Nope' not found in .*my_judge\.py \(available: Helper, Judge\)"),
        ("{tmp}/my_judge.py", r"must be 'path\.py:Class' or 'module:Class'"),
        ("no_such_module_xyz_123:Judge", r"cannot import module 'no_such_module_xyz_123': ModuleNotFoundError"),
    ],
)
def test_loading_errors(tmp_path: Path, spec: str, expected: str) -> None:
    write(tmp_path, GOOD)
    with pytest.raises(UserError, match=expected) as err:
        CustomJudge(spec.format(tmp=tmp_path))
    one_line_user_error(err)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("class Judge:\n    def parse(self, text):\n        return ''\n", r"Judge has no format\(\) method"),
        ("class Judge:\n    def format(self, q, a, b):\n        return 'x'\n", r"Judge has no parse\(\) method"),
        (
            "class Judge:\n    format = 'not callable'\n    def parse(self, text):\n        return ''\n",
            r"Judge has no format\(\) method",
        ),
        (
            "import no_such_dependency_xyz\n",
            r"importing .*my_judge\.py failed: ModuleNotFoundError: No module named 'no_such_dependency_xyz'",
        ),
        ("def broken(:\n    pass\n", r"importing .*my_judge\.py failed: SyntaxError"),
        ("raise RuntimeError('boom\\nsecond line')\n", r"importing .*my_judge\.py failed: RuntimeError: boom"),
        (
            "class Judge:\n    def __init__(self):\n        raise ValueError('needs config')\n    def format(self, q, a, b):\n        return 'x'\n"
            "    def parse(self, t):\n        return ''\n",
            r"creating Judge\(\) failed: ValueError: needs config",
        ),
    ],
)
def test_bad_judge_files(tmp_path: Path, body: str, expected: str) -> None:
    path = write(tmp_path, body)
    with pytest.raises(UserError, match=expected) as err:
        CustomJudge(f"{path}:Judge")
    one_line_user_error(err)


def test_no_classes_available(tmp_path: Path) -> None:
    path = write(tmp_path, "X = 1\n")
    with pytest.raises(UserError, match=r"\(available: none\)"):
        CustomJudge(f"{path}:Judge")


def test_fingerprint_follows_the_whole_judge_file(tmp_path: Path) -> None:
    """A prompt or helper outside the class changes the judge as much as the class does."""
    path = write(tmp_path, GOOD)
    before = CustomJudge(f"{path}:Judge").fingerprint()
    assert CustomJudge(f"{path}:Judge").fingerprint() == before
    path.write_text(path.read_text().replace("Answer A or B.", "Answer with one letter."))
    changed_prompt = CustomJudge(f"{path}:Judge").fingerprint()
    assert changed_prompt != before
    path.write_text(path.read_text().replace('"temperature": 0.3', '"temperature": 0.7'))
    assert CustomJudge(f"{path}:Judge").fingerprint() not in (before, changed_prompt)


# --- the contract, checked on every call ---------------------------------------------------------------


def test_format_returning_a_string_is_a_user_message(tmp_path: Path) -> None:
    judge = judge_with(tmp_path, format_body="return f'{question}|{answer_A}|{answer_B}'")
    assert judge.format("q", "a", "b") == [{"role": "user", "content": "q|a|b"}]


@pytest.mark.parametrize(
    "returned",
    [
        "None",
        "[]",
        "{'role': 'user', 'content': 'x'}",
        "['just text']",
        "[{'role': 'user'}]",
        "[{'content': 'x'}]",
        "[{'role': 'user', 'content': None}]",
        "[{'role': 'user', 'content': 42}]",
        "({'role': 'user', 'content': 'x'},)",
        "b'bytes'",
    ],
)
def test_format_with_wrong_shape_is_a_user_error(tmp_path: Path, returned: str) -> None:
    judge = judge_with(tmp_path, format_body=f"return {returned}")
    with pytest.raises(UserError, match=r"custom:J\.format\(\) must return a list of") as err:
        judge.format("q", "a", "b")
    one_line_user_error(err)


@pytest.mark.parametrize(
    ("returned", "decision"), [("'A>B'", "A>B"), ("'B>A'", "B>A"), ("'A=B'", "A=B"), ("''", ""), ("None", "")]
)
def test_parse_allowed_decisions(tmp_path: Path, returned: str, decision: str) -> None:
    assert judge_with(tmp_path, parse_body=f"return {returned}").parse("text") == decision


@pytest.mark.parametrize("returned", ["'A>>B'", "'yes'", "'a>b'", "'A<B'", "1", "True", "['A>B']"])
def test_parse_outside_the_allowed_set_is_a_user_error(tmp_path: Path, returned: str) -> None:
    judge = judge_with(tmp_path, parse_body=f"return {returned}")
    with pytest.raises(UserError) as err:
        judge.parse("text")
    message = one_line_user_error(err)
    assert "custom:J.parse returned" in message
    for allowed in ("'A>B'", "'B>A'", "'A=B'", "''"):
        assert allowed in message


def test_parse_raising_is_parse_failed(tmp_path: Path) -> None:
    judge = judge_with(tmp_path, parse_body="raise KeyError('verdict')")
    with pytest.raises(ParseFailed, match=r"custom:J\.parse raised KeyError: 'verdict'"):
        judge.parse("text")


# --- the procedure ---------------------------------------------------------------------------------------


class Script:
    """A `complete` callable that answers from a list and records every request it got."""

    def __init__(self, *answers: str | Exception):
        self.answers = list(answers)
        self.requests: list[tuple[list[dict[str, str]], dict[str, Any]]] = []

    async def __call__(self, messages: list[dict[str, str]], sampling: dict[str, Any]) -> Completion:
        self.requests.append(([dict(m) for m in messages], dict(sampling)))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return Completion(text=answer, prompt_tokens=10, completion_tokens=5)


def run(judge, complete: Script, question: str = "Q?", a: str = "ans-A", b: str = "ans-B") -> Outcome:
    return asyncio.run(judge_one_order(judge, question, a, b, complete))


def test_arena_hard_verdict_on_first_turn() -> None:
    script = Script("Long analysis. My final verdict is [[B>>A]].")
    outcome = run(get_judge("arena_hard"), script)
    assert (outcome.status, outcome.decision, outcome.error) == ("ok", "B>A", None)
    assert len(script.requests) == 1
    messages, sampling = script.requests[0]
    assert [m["role"] for m in messages] == ["system", "user"]
    assert sampling == {"temperature": 0.0, "max_tokens": 4096}
    assert outcome.prompt == messages[1]["content"] and "ans-A" in outcome.prompt
    assert outcome.response == "Long analysis. My final verdict is [[B>>A]]."


def test_arena_hard_without_a_label_sends_exactly_one_follow_up() -> None:
    first = "Assistant A is correct and B made an arithmetic error, so"
    script = Script(first, "my final verdict is [[A>B]].")
    outcome = run(get_judge("arena_hard"), script)
    assert len(script.requests) == 2
    original, follow_up = script.requests[0][0], script.requests[1][0]
    assert follow_up == [
        *original,
        {"role": "assistant", "content": first},
        {"role": "user", "content": ARENA_HARD_FOLLOW_UP},
    ]
    assert ARENA_HARD_FOLLOW_UP.startswith("continue your judgment")
    assert outcome.status == "ok" and outcome.decision == "A>B"
    assert outcome.response == f"{first}\nmy final verdict is [[A>B]]."
    assert len(outcome.completions) == 2
    assert outcome.prompt == original[-1]["content"]


def test_arena_hard_still_no_label_after_the_follow_up_is_invalid() -> None:
    script = Script("thinking...", "still thinking...", "never asked")
    outcome = run(get_judge("arena_hard"), script)
    assert len(script.requests) == 2
    assert outcome.status == "invalid" and outcome.decision == ""
    assert outcome.error == "no verdict found in the judge's answer"
    assert outcome.response == "thinking...\nstill thinking..."


def test_arena_hard_label_only_in_reasoning_gets_a_follow_up() -> None:
    script = Script("<think>probably [[A>B]]</think>Let me weigh this.", "[[B>A]]")
    outcome = run(get_judge("arena_hard"), script)
    assert len(script.requests) == 2
    assert outcome.decision == "B>A"


def test_arena_hard_conflicting_labels_are_invalid_without_a_follow_up() -> None:
    script = Script("At first [[A>B]], but then [[B>A]].", "never asked")
    outcome = run(get_judge("arena_hard"), script)
    assert len(script.requests) == 1
    assert outcome.status == "invalid" and outcome.decision == ""
    assert outcome.response == "At first [[A>B]], but then [[B>A]]."


@pytest.mark.parametrize("judge_type", ["vanilla", "auto_j", "prometheus_2", "skywork_critic"])
def test_other_judges_never_follow_up(judge_type: str) -> None:
    script = Script("no verdict here", "never asked")
    outcome = run(get_judge(judge_type), script)
    assert len(script.requests) == 1
    assert outcome.status == "invalid"


def test_call_failed_is_a_failed_outcome() -> None:
    script = Script(CallFailed("HTTP 400: context length exceeded"))
    outcome = run(get_judge("vanilla"), script)
    assert (outcome.status, outcome.decision, outcome.error) == ("failed", "", "HTTP 400: context length exceeded")
    assert outcome.completions == [] and outcome.response == ""
    assert "ans-A" in outcome.prompt


def test_call_failed_on_the_follow_up_keeps_the_first_answer() -> None:
    script = Script("no label yet", CallFailed("timed out after 6 attempts"))
    outcome = run(get_judge("arena_hard"), script)
    assert (outcome.status, outcome.error) == ("failed", "timed out after 6 attempts")
    assert outcome.response == "no label yet"
    assert len(outcome.completions) == 1


def test_custom_judge_parse_raising_is_invalid_with_the_reason(tmp_path: Path) -> None:
    judge = judge_with(tmp_path, parse_body="return {'A': 'A>B'}[text]")
    outcome = run(judge, Script("C"))
    assert outcome.status == "invalid" and outcome.decision == ""
    assert outcome.error == "custom:J.parse raised KeyError: 'C'"
    assert outcome.response == "C"


def test_custom_judge_through_the_procedure(tmp_path: Path) -> None:
    judge = CustomJudge(f"{write(tmp_path, GOOD)}:Judge")
    script = Script("B")
    outcome = run(judge, script)
    assert (outcome.status, outcome.decision) == ("ok", "B>A")
    assert script.requests[0][1] == {"temperature": 0.3, "max_tokens": 16}
    assert outcome.prompt == "Q: Q?\nA: ans-A\nB: ans-B\nAnswer A or B."


def test_custom_judge_returning_a_bad_decision_stops_the_run(tmp_path: Path) -> None:
    judge = judge_with(tmp_path, parse_body="return 'yes'")
    with pytest.raises(UserError, match="must be one of"):
        run(judge, Script("whatever"))

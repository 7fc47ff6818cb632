"""Prompt rendering: JudgeBench's own templates and Jinja settings, each judge's message layout, our fallback
templates, and template files from a clone treated as untrusted (sandboxed, one-line errors)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from judgebench_flows.core.errors import UserError
from judgebench_flows.judges import BUILTIN_JUDGES, JUDGE_TYPES, get_judge
from judgebench_flows.judges.builtin import ARENA_HARD_FOLLOW_UP, PROMETHEUS_RUBRIC, PROMETHEUS_SYSTEM
from judgebench_flows.judges.prompts import TemplateSet
from tests.conftest import SHARED, requires_shared

TEMPLATES = SHARED / "utils" / "templates"
PACKAGE_TEMPLATES = Path(__file__).resolve().parents[1] / "templates" / "prompts"

pytestmark = requires_shared

QUESTION = "What is 1 < 2 && \"x\" > 'y'? <script>alert(1)</script>"
ANSWER_1 = "First answer: 5 & 6 <b>bold</b> \"quoted\" 'single'"
ANSWER_2 = "Second answer: {{ not_a_variable }} {% raw %} &amp; stays"

# For each judge: the text right before and right after the question and each answer in its template.
SLOTS: dict[str, dict[str, tuple[str, str]]] = {
    "arena_hard": {
        "question": ("<|User Prompt|>\n", "\n\n<|The Start of Assistant A's Answer|>"),
        "A": ("<|The Start of Assistant A's Answer|>\n", "\n<|The End of Assistant A's Answer|>"),
        "B": ("<|The Start of Assistant B's Answer|>\n", "\n<|The End of Assistant B's Answer|>"),
    },
    "vanilla": {
        "question": ("# Instruction:\n", "\n# Output (a):"),
        "A": ("# Output (a):\n", "\n# Output (b):"),
        "B": ("# Output (b):\n", "\n# Which is better"),
    },
    "auto_j": {
        "question": ("[Query]: ", "\n***\n[Response 1]"),
        "A": ("[Response 1]: ", "\n***\n[Response 2]"),
        "B": ("[Response 2]: ", "\n***\n[END DATA]"),
    },
    "prometheus_2": {
        "question": ("###Instruction:\n", "\n\n###Response A:"),
        "A": ("###Response A:\n", "\n\n###Response B:"),
        "B": ("###Response B:\n", "\n\n###Score Rubric:"),
    },
    "skywork_critic": {
        "question": ("[User Question]\n", "\n\n[The Start of Assistant A's Answer]"),
        "A": ("[The Start of Assistant A's Answer]\n", "\n[The End of Assistant A's Answer]"),
        "B": ("[The Start of Assistant B's Answer]\n", "\n[The End of Assistant B's Answer]"),
    },
    # Our own template (templates/prompts): the pinned checkout ships none for CompassJudger.
    "compass_judger": {
        "question": ("<|User Prompt|>\n", "\n\n<|Assistant A's Answer Begins|>"),
        "A": ("<|Assistant A's Answer Begins|>\n", "\n<|Assistant A's Answer Ends|>"),
        "B": ("<|Assistant B's Answer Begins|>\n", "\n<|Assistant B's Answer Ends|>"),
    },
}


def slot(text: str, before: str, after: str) -> str:
    match = re.search(re.escape(before) + r"(.*?)" + re.escape(after), text, re.DOTALL)
    assert match, f"{before!r} ... {after!r} not found in:\n{text}"
    return match.group(1)


def test_every_builtin_judge_has_a_slot_table() -> None:
    assert set(SLOTS) == set(BUILTIN_JUDGES)


@pytest.mark.parametrize("judge_type", list(BUILTIN_JUDGES))
@pytest.mark.parametrize("swap", [False, True], ids=["A-first", "B-first"])
def test_question_and_answers_land_in_their_slots_unchanged(judge_type: str, swap: bool) -> None:
    judge = get_judge(judge_type, TEMPLATES)
    first, second = (ANSWER_2, ANSWER_1) if swap else (ANSWER_1, ANSWER_2)
    user = judge.format(QUESTION, first, second)[-1]
    assert user["role"] == "user"
    slots = SLOTS[judge_type]
    # No HTML escaping, and the answers' own {{ }} / {% %} are data, not template code.
    assert slot(user["content"], *slots["question"]) == QUESTION
    assert slot(user["content"], *slots["A"]) == first
    assert slot(user["content"], *slots["B"]) == second


@pytest.mark.parametrize(
    ("judge_type", "roles"),
    [
        ("arena_hard", ["system", "user"]),
        ("prometheus_2", ["system", "user"]),
        ("vanilla", ["user"]),
        ("auto_j", ["user"]),
        ("skywork_critic", ["user"]),
    ],
)
def test_message_roles(judge_type: str, roles: list[str]) -> None:
    messages = get_judge(judge_type, TEMPLATES).format("q", "a", "b")
    assert [m["role"] for m in messages] == roles
    assert all(isinstance(m["content"], str) and m["content"] for m in messages)


def test_arena_hard_system_prompt_is_the_checkouts_file() -> None:
    system = get_judge("arena_hard", TEMPLATES).format("q", "a", "b")[0]["content"]
    assert system == (TEMPLATES / "arena_hard_judge_system.jinja2").read_text()


def test_prometheus_gets_its_system_text_and_rubric() -> None:
    system, user = get_judge("prometheus_2", TEMPLATES).format("q", "a", "b")
    assert system["content"] == PROMETHEUS_SYSTEM
    assert slot(user["content"], "###Score Rubric:\n", "\n\n###Feedback:") == PROMETHEUS_RUBRIC
    # JudgeBench's template ends with "###Feedback: " (a trailing space the model continues from).
    assert user["content"].endswith("###Feedback: ")


def test_auto_j_query_is_filled() -> None:
    """JudgeBench passes question= to a template that reads {{prompt}}, leaving the query empty; we fill it."""
    assert "{{prompt}}" in (TEMPLATES / "autoj_prompt.jinja2").read_text()
    user = get_judge("auto_j", TEMPLATES).format("Which planet is largest?", "Jupiter", "Saturn")[0]["content"]
    assert "[Query]: Which planet is largest?\n" in user


def test_only_arena_hard_asks_for_a_follow_up() -> None:
    for judge_type in BUILTIN_JUDGES:
        judge = get_judge(judge_type, TEMPLATES)
        assert judge.follow_up == (ARENA_HARD_FOLLOW_UP if judge_type == "arena_hard" else None)


def test_jinja_settings_match_judgebench(tmp_path: Path) -> None:
    """trim_blocks + lstrip_blocks, no autoescape, no trailing newline kept: JudgeBench's environment."""
    (tmp_path / "t.jinja2").write_text("start\n    {% if show %}\n  <{{ x }}>\n    {% endif %}\nend\n")
    text = TemplateSet(tmp_path).render("t", show=True, x="<script>&\"'")
    assert text == "start\n  <<script>&\"'>\nend"


def test_fallback_to_package_templates_when_the_directory_lacks_one(tmp_path: Path) -> None:
    shutil.copy(TEMPLATES / "arena_hard_judge_system.jinja2", tmp_path)
    system, user = get_judge("arena_hard", tmp_path).format("q", "a", "b")
    assert system["content"] == (TEMPLATES / "arena_hard_judge_system.jinja2").read_text()
    # The user template came from our own templates/prompts/, not from JudgeBench.
    assert "<|Assistant A's Answer Begins|>\na\n<|Assistant A's Answer Ends|>" in user["content"]
    assert "The Start of Assistant A" not in user["content"]


@pytest.mark.parametrize("judge_type", list(BUILTIN_JUDGES))
def test_package_templates_alone_work_for_every_judge(judge_type: str) -> None:
    for templates_dir in (None, PACKAGE_TEMPLATES.parent / "no-such-dir"):
        messages = get_judge(judge_type, templates_dir).format("QUESTION-X", "ANSWER-1", "ANSWER-2")
        user = messages[-1]["content"]
        assert user.index("QUESTION-X") < user.index("ANSWER-1") < user.index("ANSWER-2")


def test_the_checkouts_template_wins_over_ours(tmp_path: Path) -> None:
    (tmp_path / "vanilla_prompt.jinja2").write_text("MINE {{question}} | {{answer_a}} | {{answer_b}}")
    assert get_judge("vanilla", tmp_path).format("q", "a", "b") == [{"role": "user", "content": "MINE q | a | b"}]


def test_syntax_error_names_template_and_line(tmp_path: Path) -> None:
    (tmp_path / "vanilla_prompt.jinja2").write_text("line one\nline two\n{% for x in %}\n{{ question }}\n")
    with pytest.raises(UserError) as err:
        get_judge("vanilla", tmp_path)  # fails at build time, before any call is paid for
    message = str(err.value)
    assert "vanilla_prompt.jinja2" in message and "line 3" in message
    assert "\n" not in message


def test_unclosed_block_is_a_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "skywork_critic_prompt.jinja2").write_text("{{ input }}\n{% if response_a %}\n{{ response_a }}\n")
    with pytest.raises(UserError, match=r"skywork_critic_prompt\.jinja2.*line \d") as err:
        get_judge("skywork_critic", tmp_path)
    assert "\n" not in str(err.value)


def test_unknown_filter_is_a_user_error(tmp_path: Path) -> None:
    (tmp_path / "vanilla_prompt.jinja2").write_text("{{ question }}\n{{ answer_a | no_such_filter }}\n")
    with pytest.raises(UserError, match=r"vanilla_prompt\.jinja2.*line 2"):
        get_judge("vanilla", tmp_path)


def test_undefined_variable_is_a_user_error(tmp_path: Path) -> None:
    (tmp_path / "vanilla_prompt.jinja2").write_text("{{ question }} {{ answer_c }}")
    judge = get_judge("vanilla", tmp_path)
    with pytest.raises(UserError, match=r"vanilla_prompt\.jinja2.*undefined.*answer_c"):
        judge.format("q", "a", "b")


@pytest.mark.parametrize(
    "attack",
    [
        "{{ ''.__class__.__mro__ }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ cycler.__init__.__globals__ }}",
        "{{ cycler.__init__.__globals__.os.popen('touch /tmp/pwned-by-template').read() }}",
        "{{ joiner.__init__.__globals__['__builtins__'] }}",
        "{{ question.__class__ }}",
        "{% set x = namespace() %}{{ x.__init__.__globals__ }}",
        "{{ lipsum.__globals__ }}",
        "{{ (1).bit_length.__self__ }}",
        "{% set l = [] %}{{ l.append(1) }}",
        "{{ range(10**9) | list | length }}",
    ],
)
def test_sandbox_blocks_escapes(tmp_path: Path, attack: str) -> None:
    (tmp_path / "vanilla_prompt.jinja2").write_text(f"{{{{ question }}}} {attack}")
    judge = get_judge("vanilla", tmp_path)
    with pytest.raises(UserError, match=r"vanilla_prompt\.jinja2") as err:
        judge.format("q", "a", "b")
    assert "\n" not in str(err.value)
    assert not Path("/tmp/pwned-by-template").exists()


@pytest.mark.parametrize("body", ["{{ 1 / 0 }}", "{% include 'missing.jinja2' %}", "{{ question + 1 }}"])
def test_template_runtime_errors_are_one_line_user_errors(tmp_path: Path, body: str) -> None:
    (tmp_path / "vanilla_prompt.jinja2").write_text(f"{{{{ question }}}}\n{body}")
    judge = get_judge("vanilla", tmp_path)
    with pytest.raises(UserError, match=r"vanilla_prompt\.jinja2") as err:
        judge.format("q", "a", "b")
    assert "\n" not in str(err.value)


def test_digest_changes_when_a_template_file_changes(tmp_path: Path) -> None:
    shutil.copytree(TEMPLATES, tmp_path / "templates")
    names = ["arena_hard_judge_system", "arena_hard_judge_prompt"]
    before = TemplateSet(tmp_path / "templates").digest(names)
    assert TemplateSet(tmp_path / "templates").digest(names) == before
    assert TemplateSet(TEMPLATES).digest(names) == before  # content, not location
    target = tmp_path / "templates" / "arena_hard_judge_prompt.jinja2"
    target.write_text(target.read_text() + " ")
    after = TemplateSet(tmp_path / "templates").digest(names)
    assert after != before
    # A template the judge does not use does not move its digest.
    (tmp_path / "templates" / "vanilla_prompt.jinja2").write_text("changed {{ question }}")
    assert TemplateSet(tmp_path / "templates").digest(names) == after
    # The judge's fingerprint (its cache identity) follows its templates.
    assert (
        get_judge("arena_hard", tmp_path / "templates").fingerprint()
        != get_judge("arena_hard", TEMPLATES).fingerprint()
    )


def test_digest_covers_fallback_templates(tmp_path: Path) -> None:
    """With no vanilla template in the directory, the digest is that of the package's own template."""
    assert TemplateSet(tmp_path).digest(["vanilla_prompt"]) == TemplateSet(None).digest(["vanilla_prompt"])
    assert TemplateSet(tmp_path).digest(["vanilla_prompt"]) != TemplateSet(TEMPLATES).digest(["vanilla_prompt"])


def test_missing_template_everywhere_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"prompt template 'nope\.jinja2' not found"):
        TemplateSet(tmp_path).render("nope")


def test_unknown_judge_type_lists_the_valid_ones() -> None:
    with pytest.raises(UserError) as err:
        get_judge("nope")
    message = str(err.value)
    assert "'nope'" in message
    for judge_type in JUDGE_TYPES:
        assert judge_type in message


def test_custom_without_template_is_a_user_error() -> None:
    with pytest.raises(UserError, match="--judge-template"):
        get_judge("custom")

"""LLMBar's evaluators as judges (judges/llmbar) and LLMBar's statistics (scoring/llmbar_statistics), on
an evaluators folder written here in LLMBar's layout (tests/test_llmbar_replay.py runs LLMBar's own).

What could go wrong and is checked: the request (ChatML split, str.format, max_tokens, temperature,
logit_bias ids), which configuration and tokenizer a model gets, the auxiliary generations asked once and
shared, every call counted once, only verdicts cached, a failure never a verdict, the Swap synthesis and
its explanations, the statistics' numbers and formatting, and a logit_bias a provider leaves out named in
the run's request report.
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import pytest

from judgebench_flows.calls.request_rules import NOT_SENT, rule_for
from judgebench_flows.core.completion import CallFailed, Completion
from judgebench_flows.core.errors import UserError
from judgebench_flows.core.records import JudgmentRecord, Pair
from judgebench_flows.judges import JUDGE_TYPES, get_judge
from judgebench_flows.judges.llmbar import LLMBarJudge, chatml_messages, config_folder, exchange_outputs, explanations
from judgebench_flows.judges.procedure import Judge
from judgebench_flows.scoring.llmbar_statistics import cohen_kappa, kappa_on_labels, llmbar_rows, llmbar_statistics
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._helpers import chat_caller

AVOID = ["Both", "Neither", "Output (a) and (b)"]  # the last is several tokens: LLMBar leaves it out
FAVOR = ["Output (a)", "Output (b)"]
COMPARE = {"max_tokens": 50, "temperature": 0.0, "tokens_to_avoid": AVOID, "tokens_to_favor": FAVOR}
VERDICT = {"1": "(?:^|\\n) ?Output \\(a\\)", "2": "(?:^|\\n) ?Output \\(b\\)"}
COT_VERDICT = {"1": "Output \\(a\\) is better.", "2": "Output \\(b\\) is better."}
# cl100k_base (tiktoken 0.14): "Both" 21279, "Neither" 63295; "Output (a)" = "Output" " (" "a" ")".
BIAS = {"21279": -100, "63295": -100, "5207": 7, "320": 7, "64": 7, "8": 7, "65": 7}
PROMPTS = {
    "comparison/Plain.txt": "<|im_start|>system\nJudge.\n<|im_end|>\n<|im_start|>user\n"
    "# Instruction:\n{input}\n# Output (a):\n{output_1}\n# Output (b):\n{output_2}\n<|im_end|>",
    "comparison/WithHelp.txt": "<|im_start|>system\nJudge.\n<|im_end|>\n<|im_start|>user\n{input}\n(a) {output_1}\n"
    "(b) {output_2}\nQuestions: {auxiliary_input_0}\nReference: {auxiliary_input_1}\n<|im_end|>",
    "auxiliary/Questions.txt": "<|im_start|>system\nAsk.\n<|im_end|>\n<|im_start|>user\nQuestions for: {input}\n<|im_end|>",
    "auxiliary/Reference.txt": "<|im_start|>system\nAnswer.\n<|im_end|>\n<|im_start|>user\n{input}\n<|im_end|>",
    "swap/Synth.txt": "<|im_start|>system\nReview.\n<|im_end|>\n<|im_start|>user\n{input}\n(a) {output_1}\n(b) {output_2}\n"
    "A says: {explanation_1}\nB says: {explanation_2}\n<|im_end|>",
}
PAIR = Pair(
    pair_id="p", source="llmbar", question="Say hi {politely}", response_A="hi", response_B="HELLO", label="A>B"
)


def stage(prompt: str, parsing: dict[str, str] | None, **kwargs: Any) -> dict[str, Any]:
    settings = {"engine": "gpt-4", "max_tokens": 150, "temperature": 0.0, **kwargs}
    return {"prompt": prompt, "model_name": "gpt-4", "openai_kwargs": settings, "parsing": parsing}


@pytest.fixture()
def evaluators(tmp_path: Path) -> Path:
    """An LLMEvaluator/evaluators folder: Vanilla, Metrics_Reference and Swap, in GPT-4 and ChatGPT."""
    for name, text in PROMPTS.items():
        (tmp_path / "prompts" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "prompts" / name).write_text(text)
    strategies = {
        "Vanilla": [stage("comparison/Plain.txt", VERDICT, **COMPARE)],
        "Metrics_Reference": [
            stage("auxiliary/Questions.txt", None),
            stage("auxiliary/Reference.txt", None, max_tokens=384),
            stage("comparison/WithHelp.txt", VERDICT, **COMPARE),
        ],
        "Swap": [
            stage("comparison/Plain.txt", COT_VERDICT, max_tokens=300, tokens_to_avoid=AVOID),
            stage("swap/Synth.txt", VERDICT, **COMPARE),
        ],
    }
    for folder in ("GPT-4", "ChatGPT"):
        (tmp_path / "config" / folder).mkdir(parents=True)
        for name, stages in strategies.items():
            (tmp_path / "config" / folder / f"{name}.json").write_text(json.dumps(stages))
    return tmp_path


class Model:
    """A ModelCall double: answers by the request's last user message, counts calls, keeps what is cached."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.requests: list[tuple[list[dict[str, str]], dict[str, Any]]] = []
        self.remembered: list[Completion] = []

    async def complete(self, messages: list[dict[str, str]], sampling: dict[str, Any]) -> Completion:
        self.requests.append((messages, sampling))
        reply = self.answer(messages[-1]["content"])
        if isinstance(reply, Exception):
            raise reply
        return reply if isinstance(reply, Completion) else Completion(reply, finish_reason="stop")

    async def remember(self, completions: list[Completion]) -> None:
        self.remembered.extend(completions)


def run(judge: LLMBarJudge, model: Model, orders: tuple[int, ...] = (0, 1)) -> list[Any]:
    return asyncio.run(judge.judge(PAIR, orders, model))


def counted(outcomes: list[Any]) -> list[Completion]:
    return [c for outcome in outcomes for c in outcome.completions]


# ----- requests ---------------------------------------------------------------------------------------


def test_chatml_is_split_at_the_markers_with_contents_stripped() -> None:
    prompt = (
        "\n<|im_start|>system\n  Be fair. \n<|im_end|>\n<|im_start|>system name=example_user\nKnock.\n<|im_end|>\n"
        "<|im_start|>assistant\n Who? <|im_end|>\n<|im_start|>user\nOrange\n\n<|im_end|>\n"
    )
    assert chatml_messages(prompt) == [
        {"role": "system", "content": "Be fair."},
        {"role": "system", "content": "Knock.", "name": "example_user"},
        {"role": "assistant", "content": "Who?"},
        {"role": "user", "content": "Orange"},
    ]
    with pytest.raises(UserError, match="im_start"):
        chatml_messages("no markers")


def test_vanilla_sends_llmbars_request(evaluators: Path) -> None:
    judge = get_judge("llmbar:Vanilla", evaluators, model="gpt-4-0613")
    assert isinstance(judge, LLMBarJudge) and isinstance(judge, Judge)
    assert (judge.name, judge.api, judge.notes) == ("llmbar:Vanilla", "chat", ())
    assert judge.sampling == {"max_tokens": 50, "temperature": 0.0, "logit_bias": BIAS}
    assert judge.first_turn is not None
    # str.format fills the placeholders; braces in the values stay as they are
    assert judge.first_turn(PAIR.question, "x", "y") == [
        {"role": "system", "content": "Judge."},
        {"role": "user", "content": "# Instruction:\nSay hi {politely}\n# Output (a):\nx\n# Output (b):\ny"},
    ]


@pytest.mark.parametrize(
    ("model", "folder"),
    [("gpt-3.5-turbo", "ChatGPT"), ("azure/gpt-35-turbo-0613", "ChatGPT"), ("gpt-4", "GPT-4"), ("claude-x", "GPT-4")],
)
def test_a_models_configuration_folder(model: str, folder: str) -> None:
    assert config_folder(model) == folder


def test_a_model_without_its_tokenizer_here_gets_no_logit_bias_and_says_so(evaluators: Path) -> None:
    gpt4o = get_judge("llmbar:Vanilla", evaluators, model="gpt-4o-2024-05-13")
    assert "logit_bias" not in gpt4o.sampling
    assert gpt4o.notes == (
        "no logit_bias sent to gpt-4o-2024-05-13: its tokenizer (o200k_base) is not available offline",
    )
    claude = get_judge("llmbar:Vanilla", evaluators, model="claude-3-5-sonnet-20240620")
    assert "logit_bias" not in claude.sampling and "not known" in claude.notes[0]
    assert gpt4o.fingerprint() != get_judge("llmbar:Vanilla", evaluators, model="gpt-4").fingerprint()


def test_unknown_strategies_and_missing_folders_are_user_errors(evaluators: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"unknown LLMBar strategy 'Rating'.*llmbar:Metrics_Reference"):
        get_judge("llmbar:Rating", evaluators, model="gpt-4")
    with pytest.raises(UserError, match="CoT.json is missing"):
        get_judge("llmbar:CoT", evaluators, model="gpt-4")
    with pytest.raises(UserError, match="LLMEvaluator/evaluators"):
        get_judge("llmbar:Vanilla", None, model="gpt-4")
    assert "llmbar:Swap_CoT" in JUDGE_TYPES


def test_the_fingerprint_follows_the_prompt_files(evaluators: Path) -> None:
    before = get_judge("llmbar:Vanilla", evaluators, model="gpt-4").fingerprint()
    (evaluators / "prompts" / "comparison" / "Plain.txt").write_text(PROMPTS["comparison/Plain.txt"] + " ")
    assert get_judge("llmbar:Vanilla", evaluators, model="gpt-4").fingerprint() != before


# ----- judging ----------------------------------------------------------------------------------------


def test_auxiliary_generations_are_asked_once_and_shared_by_both_orders(evaluators: Path) -> None:
    def answer(user: str) -> str:
        if user.startswith("Questions for"):
            return " 1. Is it a greeting? "
        if not user.startswith("Questions:") and "\n(a)" not in user:
            return "Hello."
        return "Output (a)" if "(a) hi" in user else "Output (b)"  # always response A: both orders right

    judge = get_judge("llmbar:Metrics_Reference", evaluators, model="gpt-4")
    assert judge.first_turn is None
    model = Model(answer)
    outcomes = run(judge, model)
    assert [(o.status, o.decision) for o in outcomes] == [("ok", "A>B"), ("ok", "B>A")]
    assert len(model.requests) == 4  # two auxiliary generations, two comparisons
    comparisons = [(m, s) for m, s in model.requests if "Reference: Hello." in m[-1]["content"]]
    assert len(comparisons) == 2
    assert all("Questions: 1. Is it a greeting?\n" in m[-1]["content"] for m, _ in comparisons)  # stripped
    assert all(s == {"max_tokens": 50, "temperature": 0.0, "logit_bias": BIAS} for _, s in comparisons)
    auxiliary = [s for m, s in model.requests if (m, s) not in comparisons]
    assert sorted(s["max_tokens"] for s in auxiliary) == [150, 384] and all("logit_bias" not in s for s in auxiliary)
    assert len(counted(outcomes)) == 4 and len(outcomes[0].completions) == 3  # the shared ones in the first
    assert len({id(c) for c in model.remembered}) == 4


def test_an_unread_answer_is_invalid_and_not_cached_and_a_failed_call_is_failed(evaluators: Path) -> None:
    judge = get_judge("llmbar:Vanilla", evaluators, model="gpt-4")
    model = Model(lambda user: "Both are fine." if "(a):\nhi" in user else CallFailed("HTTP 500 after 3 attempts"))
    invalid, failed = run(judge, model)
    assert (invalid.status, invalid.decision, invalid.response) == ("invalid", "", "Both are fine.")
    assert "Output \\(a\\)" in (invalid.error or "")
    assert (failed.status, failed.error, failed.completions) == ("failed", "HTTP 500 after 3 attempts", [])
    assert model.remembered == []


def test_a_failed_auxiliary_call_fails_the_pair_but_a_filtered_one_is_empty(evaluators: Path) -> None:
    judge = get_judge("llmbar:Metrics_Reference", evaluators, model="gpt-4")
    down = Model(lambda user: CallFailed("connection refused") if user.startswith("Questions for") else "Hello.")
    outcomes = run(judge, down)
    assert [o.status for o in outcomes] == ["failed", "failed"] and len(counted(outcomes)) == 1  # the reference
    assert [o.failed_calls for o in outcomes] == [1, 0]  # the failed metrics call, counted once for the pair
    assert down.remembered == []

    def filtered(user: str) -> Any:
        if user.startswith("Questions for"):
            return CallFailed("HTTP 400: The response was filtered due to ... content management policy.")
        if "\n(a)" not in user:
            return Completion("partial", finish_reason="content_filter")
        return "Output (a)"

    model = Model(filtered)
    outcomes = run(judge, model, (0,))
    assert outcomes[0].status == "ok" and len(outcomes[0].completions) == 3  # the refusal counted as a call
    assert model.requests[-1][0][-1]["content"].endswith("Questions: \nReference:")  # both empty, as LLMBar took them


def test_swap_synthesizes_when_the_orders_disagree(evaluators: Path) -> None:
    """Both orders prefer the output shown first: the first judgments disagree on the pair, and each order
    is decided by the synthesis, given the explanations as LLMBar gives them."""

    def answer(user: str) -> str:
        if "A says:" in user:
            return "Output (b)"  # the synthesis picks the output shown second, in both orders
        return "Output (a) is better. output (b) is worse."

    judge = get_judge("llmbar:Swap", evaluators, model="gpt-4")
    model = Model(answer)
    outcomes = run(judge, model)
    assert [(o.status, o.decision) for o in outcomes] == [("ok", "B>A"), ("ok", "B>A")]
    synthesis = [m[-1]["content"] for m, s in model.requests if "A says:" in m[-1]["content"]]
    assert len(model.requests) == 4 and len(synthesis) == 2
    own = "Output (a) is better. output (b) is worse."
    other = "Output (b) is better. output (a) is worse."
    # order 0: Assistant (a) argued for response A (order 0's own answer), Assistant (b) for B (order 1's, exchanged)
    assert f"A says: {own}\nB says: {other}" in synthesis[0] or f"A says: {own}\nB says: {other}" in synthesis[1]
    assert all(f"A says: {own}\nB says: {other}" in text for text in synthesis)
    assert [len(o.completions) for o in outcomes] == [2, 2] and len(model.remembered) == 4
    assert outcomes[0].prompt.startswith("# Instruction:")  # the first turn's, as with_prompts renders it


def test_swap_for_one_order_still_asks_both_first_judgments_and_counts_them_once(evaluators: Path) -> None:
    judge = get_judge("llmbar:Swap", evaluators, model="gpt-4")
    # both orders prefer the output shown first: they disagree on the pair, and order 0 is synthesized
    model = Model(lambda user: "Output (a)" if "A says:" in user else "Output (a) is better.")
    (outcome,) = run(judge, model, (0,))
    assert (outcome.status, outcome.decision) == ("ok", "A>B")
    assert len(model.requests) == 3 and len(outcome.completions) == 3


def test_swap_without_disagreement_keeps_the_first_judgments(evaluators: Path) -> None:
    judge = get_judge("llmbar:Swap", evaluators, model="gpt-4")
    model = Model(lambda user: "Output (a) is better." if "(a):\nhi" in user else "Output (b) is better.")
    outcomes = run(judge, model)
    assert [o.decision for o in outcomes] == ["A>B", "B>A"] and len(model.requests) == 2


def test_exchange_outputs_swaps_both_spellings_once() -> None:
    text = "Output (a) beats Output (b); output (b) loses to output (a). OUTPUT (a) stays."
    assert exchange_outputs(text) == "Output (b) beats Output (a); output (a) loses to output (b). OUTPUT (a) stays."


def test_explanations_follow_llmbar() -> None:
    firsts = {0: "Output (a) wins", 1: "Output (a) wins"}  # each preferred what it showed first
    winners = {0: "1", 1: "2"}  # mapped to the pair: order 0 chose output_1, order 1 output_2
    assert explanations(firsts, winners, 0) == {"explanation_1": "Output (a) wins", "explanation_2": "Output (b) wins"}
    assert explanations(firsts, winners, 1) == {"explanation_1": "Output (a) wins", "explanation_2": "Output (b) wins"}
    flipped = {0: "2", 1: "1"}  # order 0 chose output_2, order 1 output_1
    texts = {0: "Output (b) wins", 1: "Output (b) wins"}
    assert explanations(texts, flipped, 0) == {"explanation_1": "Output (a) wins", "explanation_2": "Output (b) wins"}


# ----- the request report ----------------------------------------------------------------------------


def test_a_logit_bias_the_rule_leaves_out_is_named_in_the_request_report() -> None:
    bodies: list[dict[str, Any]] = []

    def respond(body: dict[str, Any]) -> str:
        bodies.append(body)
        return "Output (a)"

    sampling = {"max_tokens": 5, "temperature": 0.0, "logit_bias": BIAS}
    with FakeOpenAIServer(respond) as server:
        for rule, sent in ((rule_for("gpt-4"), True), (rule_for("gpt-4", drop_params=("logit_bias",)), False)):
            caller = chat_caller(base_url=server.base_url, model="gpt-4", request_rule=rule, cache_mode="off")

            async def once(caller: Any = caller, sent: bool = sent) -> None:
                try:
                    await caller.complete([{"role": "user", "content": f"q {sent}"}], sampling)
                    await caller.complete([{"role": "user", "content": f"r {sent}"}], sampling)
                finally:
                    await caller.aclose()

            asyncio.run(once())
            assert ("logit_bias" in bodies[-1]) is sent
            if sent:
                assert bodies[-1]["logit_bias"] == BIAS and caller.adjustments == []
            else:
                (note,) = caller.adjustments  # once, however many calls
                assert note["param"] == "logit_bias" and note["action"].startswith(NOT_SENT)


# ----- statistics ------------------------------------------------------------------------------------


def test_statistics_are_written_as_llmbar_writes_them() -> None:
    rows = [(1, "1", "1"), (1, "1", "2"), (2, "2", "2"), (2, None, None), (1, "2", None), (2, "2", "1")]
    stats = llmbar_statistics(rows)
    assert list(stats) == [
        "correct_False",
        "correct_True",
        "correct_average",
        "correct_both",
        "equal",
        "kappa_False",
        "kappa_True",
        "kappa_average",
        "kappa_agreement",
    ]
    assert stats["correct_False"] == "4 / 6 = 66.66666666666666%"
    assert stats["correct_True"] == "2 / 6 = 33.33333333333333%"
    assert stats["correct_average"] == "50.0%"
    assert stats["correct_both"] == "2 / 6 = 33.33333333333333%"
    assert stats["equal"] == "3 / 6 = 50.0%"  # two Nones are equal
    # LLMBar's quirk, by hand: order 0's winners mapped 1, 1, 0, 0, 0, 0 against the labels 1, 1, 2, 2, 1, 2:
    # 4 disagreements of 6; by chance {0: 4, 1: 2} x {1: 3, 2: 3} off the diagonal: (4*3 + 4*3 + 2*3) / 6 = 5
    assert math.isclose(float(stats["kappa_False"]), 1 - 4 / 5)
    assert math.isclose(float(stats["kappa_average"]), (float(stats["kappa_False"]) + float(stats["kappa_True"])) / 2)


def test_kappa_is_cohens() -> None:
    assert cohen_kappa([1, 0, 1, 0], [1, 0, 1, 0]) == 1.0
    assert cohen_kappa(["a", "a", "b", "b"], ["a", "b", "a", "b"]) == 0.0
    assert math.isnan(cohen_kappa([0, 0], [0, 0]))
    ours = kappa_on_labels([(1, "1", "1"), (2, "2", "2"), (1, "1", "1"), (2, "2", "2")])
    assert ours == {"kappa_False": 1.0, "kappa_True": 1.0, "kappa_agreement": 1.0}


def record(pair_id: str, order: int, status: str, decision_for_pair: str, label: str = "A>B") -> JudgmentRecord:
    return JudgmentRecord(
        pair_id=pair_id,
        order=order,  # type: ignore[arg-type]
        source="llmbar",
        category="llmbar",
        label=label,  # type: ignore[arg-type]
        status=status,  # type: ignore[arg-type]
        decision_for_pair=decision_for_pair,  # type: ignore[arg-type]
        judge_model="gpt-4",
    )


def test_rows_from_records_map_verdicts_to_llmbar_winners() -> None:
    records = [
        record("x", 1, "ok", "B>A"),
        record("x", 0, "ok", "A>B"),
        record("y", 0, "invalid", "", "B>A"),
        record("y", 1, "failed", "", "B>A"),
    ]
    assert llmbar_rows(records) == [(1, "1", "2"), (2, None, None)]
    with pytest.raises(ValueError, match="both orders"):
        llmbar_rows(records[:1])

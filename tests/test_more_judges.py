"""JudgeLM, PandaLM and CompassJudger: parsers on answers in the shapes these models really write, and
prompts rendered and cut exactly as JudgeBench's utils/judges.py does (its template rendered by its own
Jinja settings, its truncation formula applied with the same tokenizer)."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import jinja2
import pytest

from judgebench_flows.core.errors import UserError
from judgebench_flows.judges import BUILTIN_JUDGES, JUDGE_TYPES, TOKENIZED_JUDGES, get_judge
from judgebench_flows.judges.parsing import judge_lm_scores, parse_compass_judger, parse_judge_lm, parse_panda_lm
from judgebench_flows.judges.prompts import TemplateSet
from judgebench_flows.judges.tokenized import build_tokenized_judge, load_tokenizer
from tests._helpers import chat_caller
from tests.conftest import SHARED, requires_shared

TEMPLATES = SHARED / "utils" / "templates"
needs_transformers = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None or importlib.util.find_spec("tokenizers") is None,
    reason='transformers/tokenizers not installed (pip install -e ".[reward]")',
)

JUDGE_LM = [
    ("8 7\nAssistant 1 gives the correct value; Assistant 2 slips in the last step.", "A>B"),
    ("3 9\nAssistant 2 is right.", "B>A"),
    ("7 7\nBoth are equally good.", "A=B"),
    ("8.5 6.0\n...", "A>B"),
    ("8,7\nComma-separated, as JudgeLM's own parser accepts.", "A>B"),
    ("10 9", "A>B"),
    # Read as JudgeBench reads them: exactly two space-separated numbers on the first line, or no verdict.
    ("8, 7\n", ""),  # comma and space make three fields
    (" 8 7\n", ""),  # a leading space does too
    ("Assistant 1: 8, Assistant 2: 7", ""),
    ("8\n7", ""),
    ("", ""),
    ("eight seven", ""),
]

PANDA_LM = [
    ("1\n\n### Reason: Response 1 computes the integral correctly.\n\n### Reference: ...", "A>B"),
    ("2\n\n### Reason: Response 2 is correct.", "B>A"),
    ("Tie\n\n### Reason: Both responses are correct.", "A=B"),
    ("tie", "A=B"),
    ("  2\n### Reason: leading whitespace is stripped", "B>A"),
    ("1</s>", "A>B"),  # special-token strings removed, as PandaLM's reference does
    ("<s>2\n### Reason: x", "B>A"),
    # JudgeBench counts these as ties; here they are invalid (the metric counts both as 0 for the order).
    ("Response 1\n### Reason: ...", ""),
    ("12\n", ""),
    ("### Reason: no verdict line", ""),
    ("", ""),
]

COMPASS = [
    ("Let me solve it myself first... Assistant B is correct.\n\nMy final verdict is: [[B>A]]", "B>A"),
    ("...so Assistant A is significantly better: [[A>>B]]", "A>B"),
    ("Both reach 42. My final verdict is tie: [[A=B]]", "A=B"),
    ("[[B>>A]] and, re-checking, [[B>A]]", "B>A"),
    ("[[A>B]] ... actually [[B>A]]", ""),
    ("Assistant A is better.", ""),
    ("[[A<B]]", ""),
    ("<think>[[A>B]]?</think>Final verdict: [[B>A]]", "B>A"),
]


@pytest.mark.parametrize(("text", "decision"), JUDGE_LM)
def test_judge_lm_parser(text: str, decision: str) -> None:
    assert parse_judge_lm(text) == decision


def test_judge_lm_scores_are_read_as_floats() -> None:
    assert judge_lm_scores("8 7\nreason") == (8.0, 7.0)
    assert judge_lm_scores("9,10") == (9.0, 10.0)
    assert judge_lm_scores("8, 7") is None


@pytest.mark.parametrize(("text", "decision"), PANDA_LM)
def test_panda_lm_parser(text: str, decision: str) -> None:
    assert parse_panda_lm(text) == decision


@pytest.mark.parametrize(("text", "decision"), COMPASS)
def test_compass_judger_parser(text: str, decision: str) -> None:
    assert parse_compass_judger(text) == decision


def test_new_types_are_registered() -> None:
    for judge_type in ("judge_lm", "panda_lm", "compass_judger", "reward_model"):
        assert judge_type in JUDGE_TYPES
    assert "compass_judger" in BUILTIN_JUDGES and set(TOKENIZED_JUDGES) == {"judge_lm", "panda_lm"}


# ----- prompts ---------------------------------------------------------------------------------------


def judgebench_render(directory: Path, name: str, **variables: str) -> str:
    """JudgeBench's utils/prompts.py environment: plain Jinja2, trim_blocks + lstrip_blocks."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(directory)), cache_size=-1, trim_blocks=True, lstrip_blocks=True
    )
    return env.get_template(name + ".jinja2").render(**variables)


@requires_shared
def test_compass_judger_falls_back_to_our_template_and_fills_the_query() -> None:
    """The pinned checkout ships no compass_judger_prompt: ours (package templates/prompts) is used."""
    assert not (TEMPLATES / "compass_judger_prompt.jinja2").exists()
    judge = get_judge("compass_judger", TEMPLATES)
    (user,) = judge.format("QUESTION-X", "ANSWER-1", "ANSWER-2")
    assert user["role"] == "user"
    text = user["content"]
    assert text.index("QUESTION-X") < text.index("ANSWER-1") < text.index("ANSWER-2")
    assert "[[A>>B]]" in text and "[[B>>A]]" in text
    assert judge.sampling == {"temperature": 0.0, "max_tokens": 2048} and judge.follow_up is None


def test_compass_judger_uses_a_checkouts_own_template(tmp_path: Path) -> None:
    """A newer JudgeBench checkout ships its own template (reading {{prompt}}): that one wins."""
    (tmp_path / "compass_judger_prompt.jinja2").write_text("P={{prompt}}\nA={{answer_a}}\nB={{answer_b}}\n")
    (user,) = get_judge("compass_judger", tmp_path).format("q", "a", "b")
    assert user["content"] == judgebench_render(
        tmp_path, "compass_judger_prompt", prompt="q", answer_a="a", answer_b="b"
    )


class CharTokenizer:
    """A real (if simple) tokenizer: one id per character, a BOS id when special tokens are asked for."""

    name = "chars"

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return ([1] if add_special_tokens else []) + [ord(c) + 10 for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(i - 10) for i in ids if i >= 10)


def reference_cut(tokenizer, template_with_question: str, answer: str, max_new: int, side: str) -> str:
    """JudgeBench's truncate_responses for one answer, written out independently."""
    n = (2048 - max_new - len(tokenizer.encode(template_with_question))) // 2 - 2
    ids = tokenizer.encode(answer, add_special_tokens=False)
    return tokenizer.decode(ids[:n] if side == "right" else ids[-n:])


@requires_shared
@pytest.mark.parametrize("answer_len", [10, 700, 5000])
def test_judge_lm_prompt_and_cut_match_judgebench(answer_len: int) -> None:
    tok = CharTokenizer()
    judge = build_tokenized_judge("judge_lm", TemplateSet(TEMPLATES), None, tokenizer=tok)
    question, a, b = (
        "What is 6*7? <b>&</b>",
        "".join(chr(65 + i % 26) for i in range(answer_len)),
        "z" * (answer_len + 3),
    )
    empty = judgebench_render(TEMPLATES, "judgelm_prompt", question=question, answer_1="", answer_2="")
    cut_a, cut_b = (reference_cut(tok, empty, x, 16, "right") for x in (a, b))
    expected = judgebench_render(TEMPLATES, "judgelm_prompt", question=question, answer_1=cut_a, answer_2=cut_b)
    assert judge.format(question, a, b) == [{"role": "user", "content": expected}]
    if answer_len > 1000:  # cut to the budget, keeping each answer's start
        assert a.startswith(cut_a) and len(cut_a) < len(a) and len(expected) < 2048
    assert judge.api == "completions" and judge.sampling == {"temperature": 0.0, "max_tokens": 16}


@requires_shared
@pytest.mark.parametrize("answer_len", [10, 5000])
def test_panda_lm_prompt_and_cut_match_judgebench(answer_len: int) -> None:
    tok = CharTokenizer()
    judge = build_tokenized_judge("panda_lm", TemplateSet(TEMPLATES), None, tokenizer=tok)
    question = "Sort [3, 1, 2]."
    a = "<s>  " + "x" * answer_len + "[1, 2, 3]</s> "
    b = "y" * answer_len + " [3, 2, 1]"
    empty = judgebench_render(TEMPLATES, "pandalm_prompt", instruction=question, resp1="", resp2="")
    cut_a, cut_b = (reference_cut(tok, empty, x, 150, "left") for x in (a, b))
    clean = lambda s: s.strip().replace("<s>", "").replace("</s>", "").strip()  # noqa: E731
    expected = (
        judgebench_render(TEMPLATES, "pandalm_prompt", instruction=question, resp1=clean(cut_a), resp2=clean(cut_b))
        + "\n"
    )
    (user,) = judge.format(question, a, b)
    assert user["content"] == expected
    assert expected.endswith("### Evaluation:\n")
    if answer_len > 1000:  # PandaLM keeps each answer's end
        assert "[1, 2, 3]" in expected and "<s>" not in expected
    assert (
        judge.sampling["max_tokens"] == 150
        and judge.sampling["use_beam_search"] is True
        and judge.sampling["best_of"] == 4
    )


@requires_shared
def test_a_question_longer_than_the_context_keeps_judgebench_slicing() -> None:
    """A budget at or below zero: JudgeBench's slices drop answer tokens from the end (JudgeLM) or keep
    answers whole (PandaLM, ids[-0:]); reproduced, not 'fixed', so the prompts are the ones it sent."""
    tok = CharTokenizer()
    question = "q" * 5000
    judge_lm = build_tokenized_judge("judge_lm", TemplateSet(TEMPLATES), None, tokenizer=tok)
    empty = judgebench_render(TEMPLATES, "judgelm_prompt", question=question, answer_1="", answer_2="")
    assert judge_lm.truncate(question, "abc" * 10, "d") == (
        reference_cut(tok, empty, "abc" * 10, 16, "right"),
        reference_cut(tok, empty, "d", 16, "right"),
    )


@requires_shared
def test_tokenized_judge_without_tokenizer_fails_before_a_call() -> None:
    judge = get_judge("judge_lm", TEMPLATES) if importlib.util.find_spec("transformers") else None
    if judge is None:
        with pytest.raises(UserError, match=r"pip install"):
            get_judge("judge_lm", TEMPLATES)
        return
    with pytest.raises(UserError, match="tokenizer"):
        judge.format("q", "a", "b")


@pytest.fixture(scope="module")
def tiny_tokenizer_dir(tmp_path_factory) -> Path:
    """A small byte-level BPE tokenizer trained here and saved as a Hugging Face tokenizer directory."""
    if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("tokenizers") is None:
        pytest.skip('transformers/tokenizers not installed (pip install -e ".[reward]")')
    from transformers import PreTrainedTokenizerFast

    from tests._helpers import byte_level_bpe

    corpus = [
        "The quick brown fox jumps over the lazy dog. 0 1 2 3 4 5 6 7 8 9",
        "Assistant answer question score",
    ] * 20
    tok = byte_level_bpe(corpus, 300, ["<unk>", "<s>", "</s>"])
    path = tmp_path_factory.mktemp("tokenizer")
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>").save_pretrained(
        str(path)
    )
    return path


@pytest.mark.slow  # imports transformers and trains a tokenizer
@requires_shared
@needs_transformers
def test_judge_lm_with_a_hugging_face_tokenizer_on_disk(tiny_tokenizer_dir: Path) -> None:
    """The whole path: --model names a tokenizer directory, loaded once, answers cut with it."""
    from transformers import AutoTokenizer

    judge = get_judge("judge_lm", TEMPLATES, model=str(tiny_tokenizer_dir))
    assert load_tokenizer(str(tiny_tokenizer_dir)) is load_tokenizer(str(tiny_tokenizer_dir))
    hf = AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir), use_fast=False)
    question, a, b = "Which is right?", "The quick brown fox " * 800, "jumps over the lazy dog " * 3
    empty = judgebench_render(TEMPLATES, "judgelm_prompt", question=question, answer_1="", answer_2="")
    n = (2048 - 16 - len(hf(empty).input_ids)) // 2 - 2
    cut = [hf.decode(hf(x, add_special_tokens=False, padding=False, truncation=False).input_ids[:n]) for x in (a, b)]
    expected = judgebench_render(TEMPLATES, "judgelm_prompt", question=question, answer_1=cut[0], answer_2=cut[1])
    assert judge.format(question, a, b)[0]["content"] == expected
    assert len(cut[0]) < len(a) and cut[1] == b
    assert str(tiny_tokenizer_dir) in judge.fingerprint()


@needs_transformers
def test_an_unloadable_tokenizer_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot load the tokenizer") as err:
        # no templates: loading the tokenizer fails before any is read
        get_judge("judge_lm", None, model=str(tmp_path / "no-such-model"))
    assert "\n" not in str(err.value)


@requires_shared
def test_completions_judges_go_through_the_completions_api(fake_server) -> None:
    """judge_lm over HTTP: POST /v1/completions with the raw prompt and JudgeLM's sampling; verdict parsed."""
    from judgebench_flows.judges.procedure import judge_one_order

    seen: list[dict] = []

    def respond(body: dict) -> str:
        seen.append(body)
        return "3 8\nAssistant 2 is correct."

    fake_server.set_responder(respond)
    judge = build_tokenized_judge("judge_lm", TemplateSet(TEMPLATES), None, tokenizer=CharTokenizer())

    async def run():
        caller = chat_caller(base_url=fake_server.base_url, model="judgelm-7b", api_key="k", api="completions")
        try:
            return await judge_one_order(judge, "q", "a", "b", caller.complete), caller.key(
                judge.format("q", "a", "b"), judge.sampling
            )
        finally:
            await caller.aclose()

    outcome, key = asyncio.run(run())
    assert outcome.status == "ok" and outcome.decision == "B>A" and outcome.response.startswith("3 8")
    (body,) = seen
    assert "messages" not in body and body["prompt"] == judge.format("q", "a", "b")[0]["content"]
    assert body["temperature"] == 0.0 and body["max_tokens"] == 16
    # The same messages sent to chat would be another request: different cache keys.
    from judgebench_flows.calls.cache import request_key

    assert key != request_key(fake_server.base_url, "judgelm-7b", judge.format("q", "a", "b"), judge.sampling)


def visible(pair: dict, prompt: str) -> tuple[int, int] | None:
    """Where the pair's question and both answers' starts (which right-truncation keeps) are in a prompt."""
    a, b = pair["response_A"][:300], pair["response_B"][:300]
    ia, ib = prompt.find(a), prompt.find(b)
    if a != b and ia >= 0 and ib >= 0 and pair["question"][:300] in prompt:
        return ia, ib
    return None


def judgelm_oracle(pairs: list[dict]):
    """Answers a JudgeLM prompt with a score line favouring the labelled better response."""

    def respond(body: dict) -> str:
        prompt = body["prompt"]
        for pair in pairs:
            found = visible(pair, prompt)
            if found:
                ia, ib = found
                better_first = (ia < ib) == (pair["label"] == "A>B")
                return "9 4\nThe first is correct." if better_first else "3 8\nThe second is correct."
        return "5 5\nNeither answer is visible."  # a question longer than the context leaves no answer

    return respond


@pytest.mark.slow
@requires_shared
@needs_transformers
def test_judge_lm_run_end_to_end(
    run_cli, judgebench_repo, gpt4o_pairs, tiny_tokenizer_dir: Path, tmp_path: Path
) -> None:
    """`judgebench run --judge-type judge_lm`: /completions calls with cut prompts, verdicts from score lines."""
    import json

    from judgebench_flows.testing.fake_openai import FakeOpenAIServer
    from tests._helpers import run_command
    from tests.conftest import load_jsonl

    with FakeOpenAIServer(judgelm_oracle(gpt4o_pairs)) as server:
        result = run_cli(
            *run_command(
                judgebench_repo,
                server,
                tmp_path,
                judge_type="judge_lm",
                model="judgelm-7b",
                concurrency=None,
                shard_size=None,
                max_samples=30,
                result_path="results/r.json",
                db_name="j.db",
            ),
            env={"JUDGEBENCH_TOKENIZER": str(tiny_tokenizer_dir)},
        )
        assert result.returncode == 0, result.stderr[-3000:]
        answered = server.answered
    results = json.loads((tmp_path / "results/r.json").read_text())
    assert results["invalid"]["invalid_judgments"] == 0 and results["invalid"]["failed_judgments"] == 0
    (jsonl,) = (tmp_path / "results/run").glob("*judge_name=judge_lm*.jsonl")
    rows = load_jsonl(jsonl)
    shown = [r for r in rows if all(visible(r, j["judgment"]["prompt"]) for j in r["judgments"])]
    # Both orders of a pair whose answers were cut away are the same request: asked once or twice
    # (concurrently), never more than once per judgment.
    assert len({j["judgment"]["prompt"] for r in rows for j in r["judgments"]}) <= answered <= 60
    assert len(rows) == 30 and len(shown) >= 10  # long questions leave no room for answers (JudgeBench's cut)
    assert results["overall_accuracy"]["correct_count"] == len(shown)
    first = shown[0]["judgments"][0]
    assert first["judgment"]["prompt"].startswith("You are a helpful and precise assistant")
    assert first["judgment"]["response"][:3] in ("9 4", "3 8") and first["decision"] in ("A>B", "B>A")

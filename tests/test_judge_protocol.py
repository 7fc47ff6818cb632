"""One judge protocol: every kind of judge is a `Judge`, and the judging code runs any `Judge` without
asking what kind it is (issue 15 item 3)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any

from judgebench_flows.calls.retry import RetryPolicy
from judgebench_flows.core.records import Pair
from judgebench_flows.judges import BUILTIN_JUDGES, CustomJudge, RewardJudge, get_judge
from judgebench_flows.judges.procedure import Judge, ModelCall, Outcome
from judgebench_flows.judges.prompts import TemplateSet
from judgebench_flows.judges.tokenized import build_tokenized_judge
from judgebench_flows.judging import shards
from judgebench_flows.judging.shards import Runtime, first_turns, judge_pairs, with_prompts
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._helpers import chat_caller
from tests.conftest import SHARED, requires_shared

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = SHARED / "utils" / "templates"
PAIRWISE = str(ROOT / "judges" / "external" / "pairwise_exact.py")
PAIRS = [
    Pair(
        pair_id=f"p{i}",
        source="mmlu-pro-math",
        question=f"{i}+{i}?",
        response_A=f"so {2 * i}",
        response_B=f"so {2 * i + 1}",
        label="A>B",
        ground_truth=str(2 * i),
    )
    for i in range(3)
]


class WordTokenizer:
    name = "words"

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [len(w) for w in text.split()]

    def decode(self, ids: list[int]) -> str:
        return " ".join("x" * i for i in ids)


CUSTOM = """
class Judge:
    sampling = {"temperature": 0.0, "max_tokens": 8}

    def format(self, question, answer_A, answer_B):
        return f"Q: {question}\\nA: {answer_A}\\nB: {answer_B}\\nWhich is better?"

    def parse(self, text):
        return {"A": "A>B", "B": "B>A"}.get(text.strip(), "")
"""


@requires_shared
def test_every_kind_of_judge_is_a_judge(tmp_path: Path) -> None:
    (tmp_path / "judge.py").write_text(CUSTOM)
    judges = [get_judge(name, TEMPLATES) for name in BUILTIN_JUDGES]
    judges.append(build_tokenized_judge("judge_lm", TemplateSet(TEMPLATES), None, tokenizer=WordTokenizer()))
    judges.append(CustomJudge(f"{tmp_path / 'judge.py'}:Judge"))
    judges.append(get_judge("external", external_judge_path=PAIRWISE))
    judges.append(RewardJudge())
    for judge in judges:
        assert isinstance(judge, Judge), judge.name
    assert [j.api for j in judges[-4:]] == ["completions", "chat", "chat", "pooling"]
    # Whoever has a first turn opens with it; an external pairwise judge and a reward model have none.
    assert [j.first_turn is None for j in judges] == [False] * (len(judges) - 2) + [True, True]


@requires_shared
def test_sampling_overrides_and_the_reward_backend_are_the_factorys_business(tmp_path: Path) -> None:
    (tmp_path / "judge.py").write_text(CUSTOM)
    overrides = {"temperature": 0.7, "seed": 3}
    assert get_judge("vanilla", TEMPLATES, sampling_overrides=overrides).sampling == {
        "temperature": 0.7,
        "top_p": 1.0,
        "max_tokens": 1024,
        "seed": 3,
    }
    custom = get_judge("custom", judge_template=f"{tmp_path / 'judge.py'}:Judge", sampling_overrides=overrides)
    assert custom.sampling == {"temperature": 0.7, "max_tokens": 8, "seed": 3}
    assert get_judge("vanilla", TEMPLATES).sampling["temperature"] == 0.0  # the built-in judge itself is unchanged
    assert get_judge("reward_model", model="m", sampling_overrides=overrides).api == "pooling"


def test_the_judging_code_asks_no_judge_what_kind_it_is() -> None:
    source = (ROOT / "judgebench_flows" / "judging" / "shards.py").read_text()
    for kind in (
        "PromptJudge",
        "CustomJudge",
        "RewardJudge",
        "TokenizedJudge",
        "ExternalPairwiseJudge",
        "judge_one_order",
        "judge_by_scores",
    ):
        assert kind not in source, f"judging/shards.py names {kind}"
    assert not re.search(r"isinstance\([^)]*judge|getattr\([^)]*judge|scores_alone|\.local\b", source)


class CountingJudge:
    """A new kind of judge, written against the protocol alone: decides by answer length, asking the model
    once per pair (its orders share the call), and caching nothing it did not decide."""

    name = "longer"
    api = "chat"
    sampling: dict[str, Any] = {"max_tokens": 4}
    first_turn = None

    def is_final(self, text: str) -> bool:
        return False

    def fingerprint(self) -> str:
        return self.name

    async def judge(self, pair: Pair, orders: tuple[int, ...], call: ModelCall) -> list[Outcome]:
        started = time.perf_counter()
        completion = await call.complete([{"role": "user", "content": pair.question}], self.sampling)
        outcomes = []
        for i, order in enumerate(orders):
            first, second = (pair.response_A, pair.response_B) if order == 0 else (pair.response_B, pair.response_A)
            decision = "A>B" if len(first) > len(second) else "B>A" if len(second) > len(first) else ""
            status = "ok" if decision else "invalid"
            outcomes.append(
                Outcome(
                    status,
                    decision,
                    pair.question,
                    completion.text,
                    None if decision else "same length",
                    [completion] if i == 0 else [],
                    time.perf_counter() - started,
                )
            )
        await call.remember([completion])
        return outcomes


def test_judge_pairs_runs_a_judge_known_only_by_the_protocol() -> None:
    pairs = [
        *PAIRS,
        Pair(
            pair_id="long",
            source="s",
            question="q?",
            response_A="a much longer answer",
            response_B="short",
            label="A>B",
        ),
    ]
    bodies: list[dict] = []

    def respond(body: dict) -> str:
        bodies.append(body)
        return "noted"

    with FakeOpenAIServer(respond) as server:

        async def go():
            caller = chat_caller(
                base_url=server.base_url, model="m", api_key="sk-test", retry=RetryPolicy(max_retries=0)
            )
            try:
                return await judge_pairs(pairs, Runtime(CountingJudge(), caller), (0, 1))
            finally:
                await caller.aclose()

        records = asyncio.run(go())
    assert len(bodies) == len(pairs), "one call per pair: the judge shares it between orders"
    assert [(r.pair_id, r.order, r.status, r.decision_for_pair) for r in records[-2:]] == [
        ("long", 0, "ok", "A>B"),
        ("long", 1, "ok", "A>B"),
    ]
    assert [r.calls for r in records[-2:]] == [1, 0]
    assert {r.status for r in records[:-2]} == {"invalid"}  # "so 0" vs "so 1": no decision, never a guess
    assert with_prompts(pairs, records, CountingJudge()) is records  # no first turn: the outcome's prompt stays
    assert list(first_turns(pairs, CountingJudge(), (0, 1))) == []


def test_external_pairwise_judge_ignores_its_model_call() -> None:
    judge = get_judge("external", external_judge_path=PAIRWISE)

    class NoCalls:
        async def complete(self, messages, sampling):
            raise AssertionError("an external pairwise judge called the model")

        async def remember(self, completions):
            raise AssertionError("an external pairwise judge cached a call")

    outcomes = asyncio.run(judge.judge(PAIRS[1], (0, 1), NoCalls()))
    assert [(o.status, o.decision) for o in outcomes] == [("ok", "A>B"), ("ok", "B>A")]
    assert all(o.completions == [] and o.prompt == "" for o in outcomes)


@requires_shared
def test_a_prompted_judge_caches_only_its_verdicts() -> None:
    judge = get_judge("vanilla", TEMPLATES)
    remembered: list[list] = []

    class Call:
        async def complete(self, messages, sampling):
            from judgebench_flows.core.completion import Completion

            # Order 0 shows "so 2" first: a verdict for it; order 1 gets an answer with no verdict.
            text = "Output (a)" if "# Output (a):\nso 2\n" in messages[-1]["content"] else "hmm"
            return Completion(text, 10, 2, key=json.dumps(messages))

        async def remember(self, completions):
            remembered.append(completions)

    outcomes = asyncio.run(judge.judge(PAIRS[1], (0, 1), Call()))
    assert [(o.status, o.decision) for o in outcomes] == [("ok", "A>B"), ("invalid", "")]
    assert remembered == [outcomes[0].completions]


def test_shards_module_exports_the_protocol_in_signatures() -> None:
    import inspect

    assert inspect.signature(shards.build_judge).return_annotation in ("Judge", Judge)
    assert inspect.signature(shards.with_prompts).parameters["judge"].annotation in ("Judge", Judge)

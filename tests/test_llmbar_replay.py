"""LLMBar's published results, replayed: its statistics from its winners, and its judgments through our judges.

LLMBar (princeton-nlp/LLMBar, ../shared/llmbar) published, per subset and evaluator, every instance's
answers (result.json: auxiliary generations, both orders' completions and winners, the synthesis prompts
of the Swap strategies) and the statistics computed from them (statistics.json).

1. `llmbar_statistics` on each result.json's winners gives its statistics.json: strings exactly, kappas
   to 1e-9.
2. The replay: the bundled OpenAI stand-in answers each request with the published completion (and
   finish reason) found by the request's exact messages, rebuilt here from LLMBar's prompt files as
   LLMBar's evaluate.py builds them (independently of judges/llmbar), or for a synthesis from the prompt
   LLMBar stored. A request that differs from LLMBar's finds no answer (a 400 this test counts and
   shows). The judge runs through the real call layer (ChatCaller over HTTP), and the statistics of its
   records equal statistics.json. The requests' max_tokens, temperature and logit_bias are LLMBar's.

LLMBar recorded an Azure refusal of a prompt ("content management policy": an error its code caught and
kept as an empty answer) and an answer Azure's filter stopped (finish reason "content_filter"): the
stand-in answers the first as Azure did, a 400 naming the policy, and the second as a 200 with that
finish reason.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest

from judgebench_flows.core.records import Pair
from judgebench_flows.judges import get_judge
from judgebench_flows.judges.llmbar import LLMBAR_STRATEGIES, SWAP_STRATEGIES, explanations, load_strategy
from judgebench_flows.judging.shards import Runtime, judge_pairs
from judgebench_flows.scoring.llmbar_statistics import llmbar_rows, llmbar_statistics
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._helpers import chat_caller
from tests.conftest import LLMBAR, llmbar_data_available, requires_llmbar

pytestmark = requires_llmbar

SUBSETS = ("Natural", "Adversarial/Neighbor", "Adversarial/GPTInst", "Adversarial/GPTOut", "Adversarial/Manual")
# The published evaluators replayed, and the model name each is run as (LLMBar's Azure deployments).
MODELS = {"GPT-4": "gpt-4", "ChatGPT": "gpt-35-turbo-0613"}
EVALUATORS = LLMBAR / "LLMEvaluator" / "evaluators"
# LLMBar's logit_bias for its token lists, in cl100k_base (gpt-4 and gpt-3.5-turbo's tokenizer), as
# tiktoken 0.14 encodes them: "Both", "Neither", "None", " Both", " Neither", "Either", "depends",
# "context", "It", "both", "Sorry" are one token each (-100); "Output (a)" and "Output (b)" are
# "Output", " (", "a"/"b", ")" (+7).
AVOIDED = {"21279", "63295", "4155", "11995", "25215", "50344", "59047", "2196", "2181", "21704", "19701"}
FAVOURED = {"5207", "320", "64", "65", "8"}
AVOID_ONLY = {token: -100 for token in AVOIDED}
AVOID_AND_FAVOUR = {**AVOID_ONLY, **{token: 7 for token in FAVOURED}}
AZURE_POLICY = (
    "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. "
    "Please modify your prompt and retry."
)
IM = re.compile(r"<\|im_start\|>(\w+)\n(.*?)<\|im_end\|>", re.DOTALL)


def chat(rendered: str) -> list[dict[str, str]]:
    """LLMBar's ChatML split of a rendered prompt (roles and stripped contents), written apart from ours."""
    return [{"role": role, "content": content.strip()} for role, content in IM.findall(rendered)]


def key(messages: list[dict[str, Any]]) -> str:
    return json.dumps(messages, sort_keys=True)


def published(subset: str, folder: str, strategy: str, name: str) -> Any:
    return json.loads((LLMBAR / "Dataset" / "LLMBar" / subset / "evaluators" / folder / strategy / name).read_text())


@dataclass
class Expected:
    """One request LLMBar sent: its answer and its settings."""

    answer: dict[str, Any]
    max_tokens: int
    temperature: float
    logit_bias: dict[str, int] | None


@dataclass
class Published:
    """Every request of one evaluator on some subsets, keyed by its messages, as LLMBar sent them."""

    folder: str
    strategy: str
    requests: dict[str, Expected] = field(default_factory=dict)
    sent: Counter[str] = field(default_factory=Counter)  # how often LLMBar sent each (a shared input: twice)
    instances: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def load(self, subset: str) -> None:
        configs = json.loads((EVALUATORS / "config" / self.folder / f"{self.strategy}.json").read_text())
        prompts = [(EVALUATORS / "prompts" / config["prompt"]).read_text() for config in configs]
        data = published(subset, self.folder, self.strategy, "result.json")
        self.instances[subset] = data
        for instance in data:
            self._instance(instance, configs, prompts)

    def _add(self, messages: list[dict[str, str]], answer: list[str], config: dict[str, Any]) -> None:
        text, finish = answer
        kwargs = config["openai_kwargs"]
        reply = (
            {"status": 400, "message": AZURE_POLICY, "code": "content_filter"}
            if finish == "content management policy"
            else {"content": text, "finish_reason": finish}
        )
        bias = None
        if kwargs.get("tokens_to_avoid"):
            bias = AVOID_AND_FAVOUR if kwargs.get("tokens_to_favor") else AVOID_ONLY
        expected = Expected(reply, kwargs["max_tokens"], kwargs["temperature"], bias)
        self.sent[key(messages)] += 1
        previous = self.requests.setdefault(key(messages), expected)
        assert previous == expected, f"two published answers for one request: {messages[-1]['content'][-200:]!r}"

    def _instance(self, instance: dict[str, Any], configs: list[dict[str, Any]], prompts: list[str]) -> None:
        results = instance["results"]
        values = {"input": instance["input"]}
        shown = {
            False: (instance["output_1"], instance["output_2"]),
            True: (instance["output_2"], instance["output_1"]),
        }
        if self.strategy in SWAP_STRATEGIES:
            for swap, (first, second) in shown.items():
                messages = chat(prompts[0].format_map({**values, "output_1": first, "output_2": second}))
                self._add(messages, results[0][f"swap = {swap}"]["completion"], configs[0])
                if len(results) == 2:  # the first judgments disagreed: the synthesis LLMBar stored
                    synthesis = results[1][f"swap = {swap}"]
                    self._add(chat(synthesis["prompt"]), synthesis["completion"], configs[1])
            return
        for index, prompt in enumerate(prompts[:-1]):
            self._add(chat(prompt.format(input=instance["input"])), results[index], configs[index])
            values[f"auxiliary_input_{index}"] = results[index][0]
        for swap, (first, second) in shown.items():
            messages = chat(prompts[-1].format_map({**values, "output_1": first, "output_2": second}))
            self._add(messages, results[-1][f"swap = {swap}"]["completion"], configs[-1])


class StandIn:
    """The responder: the published answer of each request; what it was asked, and what it did not know."""

    def __init__(self, requests: dict[str, Expected]) -> None:
        self.requests = requests
        self.seen: list[dict[str, Any]] = []
        self.unknown: list[list[dict[str, Any]]] = []
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        expected = self.requests.get(key(body["messages"]))
        with self.lock:
            self.seen.append(body)
            if expected is None:
                self.unknown.append(body["messages"])
        if expected is None:
            return {"status": 400, "message": "no published answer for this request", "code": "unknown_request"}
        return expected.answer


def statistics_match(got: dict[str, Any], want: dict[str, Any]) -> bool:
    if list(got) != list(want):
        return False
    for name, value in want.items():
        if isinstance(value, str):
            if got[name] != value:
                return False
        elif not (
            math.isclose(got[name], value, rel_tol=0, abs_tol=1e-9) or (math.isnan(got[name]) and math.isnan(value))
        ):
            return False
    return True


def replay(folder: str, strategy: str, subset: str) -> None:
    """Judge every published instance of a subset through the stand-in; check the requests and statistics.
    One subset per stand-in: an instruction in two subsets got two answers."""
    book = Published(folder, strategy)
    book.load(subset)
    model = MODELS[folder]
    stand_in = StandIn(book.requests)
    judge = get_judge(f"llmbar:{strategy}", EVALUATORS, model=model)
    pairs = [
        Pair(
            pair_id=str(i),
            source="llmbar",
            question=instance["input"],
            response_A=instance["output_1"],
            response_B=instance["output_2"],
            label="A>B" if instance["label"] == 1 else "B>A",
        )
        for i, instance in enumerate(book.instances[subset])
    ]
    with FakeOpenAIServer(stand_in) as server:
        caller = chat_caller(base_url=server.base_url, model=model, concurrency=16, cache_mode="off")

        async def judge_all() -> list[Any]:
            try:  # as a shard judges them: the run's prefetch, records and cache flush
                return await judge_pairs(pairs, Runtime(judge, caller), (0, 1))
            finally:
                await caller.aclose()

        records = asyncio.run(judge_all())
    assert not stand_in.unknown, f"{len(stand_in.unknown)} requests LLMBar never sent, first: {stand_in.unknown[0]}"
    seen = Counter(key(body["messages"]) for body in stand_in.seen)
    assert set(seen) == set(book.requests), f"{len(set(book.requests) - set(seen))} of LLMBar's requests never sent"
    assert seen == book.sent  # each as often as LLMBar sent it: nothing retried, nothing shared that it asked apart
    assert sum(record.calls for record in records) == len(stand_in.seen)  # every call counted once
    for body in stand_in.seen:
        expected = book.requests[key(body["messages"])]
        assert body["model"] == model
        assert (body["max_tokens"], body["temperature"]) == (expected.max_tokens, expected.temperature)
        assert body.get("logit_bias") == expected.logit_bias
    got = llmbar_statistics(llmbar_rows(records))
    want = published(subset, folder, strategy, "statistics.json")
    assert statistics_match(got, want), f"{folder}/{strategy} on {subset}: {got} != {want}"


def result_files() -> list[tuple[str, str, str]]:
    """(subset, folder, strategy) of every published result.json of the GPT-4 and ChatGPT evaluators."""
    if not llmbar_data_available():
        return []
    root = LLMBAR / "Dataset" / "LLMBar"
    return sorted(
        (str(path.parent.parent.parent.parent.relative_to(root)), path.parent.parent.name, path.parent.name)
        for path in root.glob("**/evaluators/*/*/result.json")
    )


@pytest.mark.parametrize(("subset", "folder", "strategy"), result_files())
def test_published_winners_give_the_published_statistics(subset: str, folder: str, strategy: str) -> None:
    data = published(subset, folder, strategy, "result.json")
    rows = [
        (
            instance["label"],
            instance["results"][-1]["swap = False"]["winner"],
            instance["results"][-1]["swap = True"]["winner"],
        )
        for instance in data
    ]
    want = published(subset, folder, strategy, "statistics.json")
    got = llmbar_statistics(rows)
    assert statistics_match(got, want), f"{got} != {want}"


def test_every_published_evaluator_is_covered() -> None:
    """Both replayed folders publish a result.json for every strategy the judges offer, in every subset."""
    found = set(result_files())
    for folder in MODELS:
        for strategy in LLMBAR_STRATEGIES:
            for subset in SUBSETS:
                assert (subset, folder, strategy) in found


@pytest.mark.parametrize("folder", sorted(MODELS))
@pytest.mark.parametrize("strategy", SWAP_STRATEGIES)
def test_synthesis_prompts_are_the_published_ones_byte_for_byte(folder: str, strategy: str) -> None:
    """Our explanations, in LLMBar's synthesis prompt file, give the very prompt LLMBar stored (before any
    split): every synthesis of every subset."""
    stage = load_strategy(EVALUATORS, strategy, MODELS[folder]).stages[1]
    compared = 0
    for subset in SUBSETS:
        for instance in published(subset, folder, strategy, "result.json"):
            results = instance["results"]
            if len(results) < 2:
                continue
            firsts = {order: results[0][f"swap = {bool(order)}"] for order in (0, 1)}
            winners = {order: first["winner"] for order, first in firsts.items()}  # order 1's already mapped back
            texts = {order: first["completion"][0] for order, first in firsts.items()}
            for order in (0, 1):
                shown = (instance["output_1"], instance["output_2"])[:: 1 if order == 0 else -1]
                values = {"input": instance["input"], "output_1": shown[0], "output_2": shown[1]}
                prompt = stage.template.format_map({**values, **explanations(texts, winners, order)})
                assert prompt == results[1][f"swap = {bool(order)}"]["prompt"]
                compared += 1
    assert compared > 50


@pytest.mark.parametrize(
    ("folder", "strategy"),
    [
        ("GPT-4", "Metrics_Reference"),  # two auxiliary generations, one filtered (content_filter)
        ("GPT-4", "Swap_CoT"),  # synthesis
        ("GPT-4", "Vanilla_1shot"),  # a refused comparison (content management policy), a few-shot prompt
        ("ChatGPT", "Reference"),  # a filtered reference
    ],
)
def test_replay_on_the_manual_subset(folder: str, strategy: str) -> None:
    replay(folder, strategy, "Adversarial/Manual")


@pytest.mark.slow
@pytest.mark.parametrize("folder", sorted(MODELS))
@pytest.mark.parametrize("strategy", LLMBAR_STRATEGIES)
def test_replay_every_subset(folder: str, strategy: str) -> None:
    started = time.perf_counter()
    for subset in SUBSETS:  # one stand-in each: an instruction in two subsets got two answers
        replay(folder, strategy, subset)
    print(f"{folder}/{strategy}: {time.perf_counter() - started:.1f} s")

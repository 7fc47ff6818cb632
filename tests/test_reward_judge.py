"""Reward models through vLLM's Pooling API: each response scored once, decisions as JudgeBench makes them
(a tie goes to B>A), scores in the JSONL, and a whole run's accuracy equal to JudgeBench's own metric
computed independently on the same scores."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import pytest

from judgebench_flows.calls.other_apis import pooled_completion, pooled_score, server_root
from judgebench_flows.judges import get_judge
from judgebench_flows.judges.reward import RewardJudge, judge_by_scores
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._helpers import chat_caller, run_command
from tests.conftest import GPT4O_FILE, load_jsonl


@pytest.mark.parametrize(
    ("data", "score"),
    [([0.75], 0.75), ([-3], -3.0), (1.5, 1.5), ([[0.1], [0.2], [0.9]], 0.9), ([0.1, 0.2, 0.4], 0.4)],
)
def test_pooled_score_shapes(data, score: float) -> None:
    assert pooled_score(data) == score


@pytest.mark.parametrize("data", [[], None, "0.5", [[0.1, 0.9]], [float("nan")], [True]])
def test_pooled_score_rejects_what_is_no_score(data) -> None:
    with pytest.raises(ValueError):
        pooled_score(data)


def test_server_root_strips_v1() -> None:
    assert server_root("http://host:8000/v1") == "http://host:8000"
    assert server_root("http://host:8000/v1/") == "http://host:8000"
    assert server_root("http://host:8000") == "http://host:8000"


def test_pooling_answer_carries_the_score() -> None:
    body = {"data": [{"index": 0, "object": "pooling", "data": [2.5]}], "usage": {"prompt_tokens": 12}}
    completion = pooled_completion(body)
    assert completion.score == 2.5 and completion.text == "" and completion.prompt_tokens == 12


def scores_by_text(table: dict[str, float]):
    """A Pooling API responder: the score of the assistant turn's text, from a fixed table."""

    def respond(body: dict) -> str:
        user, assistant = body["messages"]
        assert user["role"] == "user" and assistant["role"] == "assistant"
        return json.dumps([table[assistant["content"]]])

    return respond


def run_pair(server: FakeOpenAIServer, question: str, a: str, b: str, orders=(0, 1), caller_kwargs=None):
    async def go():
        caller = chat_caller(
            base_url=server.base_url,
            model="Skywork/Skywork-Reward-Llama-3.1-8B",
            api_key="k",
            api="pooling",
            **(caller_kwargs or {}),
        )
        try:
            return await judge_by_scores(RewardJudge(), question, a, b, orders, caller.complete)
        finally:
            await caller.aclose()

    return asyncio.run(go())


def test_each_response_is_scored_once_for_both_orders(fake_server: FakeOpenAIServer) -> None:
    assert fake_server.base_url.endswith("/v1")  # the pooling route is found at the server root anyway
    fake_server.set_responder(scores_by_text({"good": 3.0, "bad": -1.0}))
    (o0, s0), (o1, s1) = run_pair(fake_server, "q", "bad", "good")
    assert fake_server.answered == 2  # not 4
    assert (o0.decision, s0) == ("B>A", [-1.0, 3.0])
    assert (o1.decision, s1) == ("A>B", [3.0, -1.0])
    assert len(o0.completions) == 2 and o1.completions == []  # calls counted once


def test_a_tie_goes_to_b_in_both_orders(fake_server: FakeOpenAIServer) -> None:
    fake_server.set_responder(scores_by_text({"x": 0.5, "y": 0.5}))
    (o0, _), (o1, _) = run_pair(fake_server, "q", "x", "y")
    assert o0.decision == o1.decision == "B>A"  # so the pair scores 0, as in JudgeBench's numbers


def test_identical_responses_cost_one_call(fake_server: FakeOpenAIServer) -> None:
    fake_server.set_responder(scores_by_text({"same": 4.0}))  # outside [0, 1]: raw beyond doubt, no check
    results = run_pair(fake_server, "q", "same", "same")
    assert fake_server.answered == 1 and [o.decision for o, _ in results] == ["B>A", "B>A"]


def test_a_failed_scoring_call_fails_the_pair_and_is_never_a_verdict(fake_server: FakeOpenAIServer) -> None:
    fake_server.set_responder(scores_by_text({"a": 1.0, "b": 2.0}))
    fake_server.configure(fail_first=10, fail_kind="500")
    from judgebench_flows.calls.retry import RetryPolicy

    results = run_pair(
        fake_server,
        "q",
        "a",
        "b",
        caller_kwargs={"retry": RetryPolicy(max_retries=1, initial_wait=0.01, max_wait=0.02)},
    )
    assert [o.status for o, _ in results] == ["failed", "failed"] and all(s is None for _, s in results)


def test_reward_judge_is_registered_and_formats_the_conversation() -> None:
    judge = get_judge("reward_model", model="internlm/internlm2-7b-reward")
    assert judge.api == "pooling" and judge.format("Q", "A1", "B1") == [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "A1"},
    ]


# ----- a whole run, replaying recorded scores ---------------------------------------------------------


def recorded_score(text: str) -> float:
    """A fixed score per response text, on a coarse scale so that some pairs tie."""
    return float(int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) % 6) - 2.5


def judgebench_accuracy(pairs: list[dict]) -> tuple[float, dict[str, float]]:
    """JudgeBench's run_judge.py + utils/metrics.py on these scores, written out independently: order 1
    judges (A, B), order 2 judges (B, A); `A>B` iff the first score is strictly higher."""

    def decide(first: float, second: float) -> str:
        return "A>B" if first > second else "B>A"

    def flip(d: str) -> str:
        return {"A>B": "B>A", "B>A": "A>B"}.get(d, d)

    correct: dict[str, list[bool]] = {}
    for pair in pairs:
        sa, sb = recorded_score(pair["response_A"]), recorded_score(pair["response_B"])
        d1, d2 = decide(sa, sb), flip(decide(sb, sa))
        counter = sum(1 if d == pair["label"] else -1 if d == flip(pair["label"]) else 0 for d in (d1, d2))
        category = next(
            c
            for c in ("mmlu-pro", "livebench-reasoning", "livebench-math", "livecodebench")
            if pair["source"].startswith(c)
        )
        correct.setdefault(category, []).append(counter > 0)
    overall = sum(sum(v) for v in correct.values()) / len(pairs)
    return overall, {c: sum(v) / len(v) for c, v in correct.items()}


@pytest.mark.slow
def test_replayed_scores_give_judgebench_accuracy(run_cli, judgebench_repo, gpt4o_pairs, tmp_path: Path) -> None:
    table = {t: recorded_score(t) for p in gpt4o_pairs for t in (p["response_A"], p["response_B"])}
    ties = sum(table[p["response_A"]] == table[p["response_B"]] for p in gpt4o_pairs)
    assert ties > 20  # the replay does exercise JudgeBench's tie rule
    expected_overall, expected_categories = judgebench_accuracy(gpt4o_pairs)
    model = "Skywork/Skywork-Reward-Gemma-2-27B"
    with FakeOpenAIServer(scores_by_text(table)) as server:
        args = run_command(
            judgebench_repo,
            server,
            tmp_path,
            judge_type="reward_model",
            model=model,
            concurrency=16,
            result_path="results/reward.json",
        )
        result = run_cli(*args)
        assert result.returncode == 0, result.stderr[-3000:]
        scoring_calls = sum(len({p["response_A"], p["response_B"]}) for p in gpt4o_pairs)
        # each (question, response) once: half a naive run's 1400; plus at most one request checking that the
        # server's scores are raw (a score in [0, 1] answered before any outside it: `RawScoreCheck`)
        assert scoring_calls <= server.answered <= scoring_calls + 1
        paid = server.answered
        results = json.loads((tmp_path / "results/reward.json").read_text())
        assert results["overall_accuracy"]["accuracy"] == pytest.approx(expected_overall)
        assert {c: a["accuracy"] for c, a in results["category_accuracy"].items()} == pytest.approx(expected_categories)
        assert results["usage"]["calls"] == scoring_calls

        jsonl = (
            tmp_path
            / "results/run"
            / f"{GPT4O_FILE.removesuffix('.jsonl')},judge_name=reward_model,judge_model={model.replace('/', '_')}.jsonl"
        )
        if not jsonl.exists():  # the file name's model part follows the project's own rule; find it
            (jsonl,) = (tmp_path / "results/run").glob("*judge_name=reward_model*.jsonl")
        rows = {r["pair_id"]: r for r in load_jsonl(jsonl)}
        for pair in gpt4o_pairs[:40]:
            first, second = rows[pair["pair_id"]]["judgments"]
            sa, sb = table[pair["response_A"]], table[pair["response_B"]]
            assert first["judgment"] == {"judge_model": model, "scores": [sa, sb]}
            assert second["judgment"]["scores"] == [sb, sa]
            assert first["decision"] == ("A>B" if sa > sb else "B>A")

        # Resumed or repeated: every score comes from the call cache, nothing is paid twice.
        again = run_cli(*args)
        assert again.returncode == 0, again.stderr[-3000:]
        assert server.answered == paid


SKYWORK = "Skywork/Skywork-Reward-Llama-3.1-8B"


def cache_scores_as_text(engine, server: FakeOpenAIServer, stored: dict[str, str], prompt_tokens: int = 0) -> None:
    """Call-cache rows for the reward judge's request of each response text, holding `stored[text]` as
    every earlier version stored a score: its text in the response column."""
    from judgebench_flows.core.identity import call_endpoint, request_key
    from judgebench_flows.data import db

    endpoint, sampling = call_endpoint(server.base_url, "openai", "pooling"), RewardJudge().sampling
    conversation = [{"role": "user", "content": "q"}]
    db.cache_put_many(
        engine,
        [
            {
                "key": request_key(
                    endpoint, SKYWORK, [*conversation, {"role": "assistant", "content": text}], sampling
                ),
                "model": SKYWORK,
                "response": response,
                "prompt_tokens": prompt_tokens,
                "completion_tokens": 0,
                "created": db.utcnow(),
                "paid_by": None,
            }
            for text, response in stored.items()
        ],
    )


def test_scores_cached_as_text_are_read_back_as_scores(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    """The call cache's rows hold a score as its repr (what every earlier version wrote): a run finds them,
    pays nothing, and decides from the same scores; its own answers are stored the same way."""
    from judgebench_flows.data import db

    engine = db.open_database(f"sqlite:///{tmp_path}/cache.db")
    cache_scores_as_text(engine, fake_server, {"good": repr(2.75), "bad": repr(-0.5)}, prompt_tokens=7)
    (o0, s0), (o1, s1) = run_pair(fake_server, "q", "bad", "good", caller_kwargs={"engine": engine})
    assert fake_server.answered == 0
    assert (o0.decision, s0, o1.decision, s1) == ("B>A", [-0.5, 2.75], "A>B", [2.75, -0.5])
    assert all(c.cached and c.text == "" for c in o0.completions)

    fake_server.set_responder(scores_by_text({"new": 3.5}))

    async def score_new() -> list[str]:
        caller = chat_caller(base_url=fake_server.base_url, model=SKYWORK, api_key="k", api="pooling", engine=engine)
        try:
            answer = await caller.complete(
                [{"role": "user", "content": "q"}, {"role": "assistant", "content": "new"}], RewardJudge().sampling
            )
            await caller.remember([answer])
        finally:
            await caller.aclose()
        return [row.response for row in db.cache_get_many(engine, [answer.key]).values()]

    assert asyncio.run(score_new()) == ["3.5"]


def test_a_cached_score_that_is_no_number_is_an_invalid_judgment_with_its_text(
    fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    from judgebench_flows.data import db

    engine = db.open_database(f"sqlite:///{tmp_path}/cache.db")
    cache_scores_as_text(engine, fake_server, {"a": "nan", "b": "1.5"})
    (o0, s0), _ = run_pair(fake_server, "q", "a", "b", caller_kwargs={"engine": engine})
    assert fake_server.answered == 0 and o0.status == "invalid" and s0 is None
    assert json.loads(o0.response) == ["nan", "1.5"]

"""Right against the servers people run: vLLM's and LiteLLM's error bodies and wording, vLLM's Pooling API
activation and beam search, one retry budget per call.

Every test talks HTTP to the bundled server (`FakeOpenAIServer`), which answers as vLLM, LiteLLM or
Anthropic shape their answers (`error_style`), applies a reward head's activation unless asked not to, and
beam-searches as vLLM's completions API does.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from judgebench_flows.calls.caller import ChatCaller
from judgebench_flows.calls.other_apis import honours_raw
from judgebench_flows.calls.request_rules import STANDARD, rejected_parameter
from judgebench_flows.calls.retry import RetryPolicy, deterministic_reason
from judgebench_flows.calls.state import CallState
from judgebench_flows.core.completion import CallFailed
from judgebench_flows.core.errors import FatalEndpointError, RunFailed
from judgebench_flows.judges.reward import RewardJudge
from judgebench_flows.judges.tokenized import PANDALM_SAMPLING
from judgebench_flows.testing.fake_openai import (
    ERROR_STYLES,
    VLLM_COMPLETION_FIELDS,
    VLLM_POOLING_FIELDS,
    FakeOpenAIServer,
    batch_wobble,
    sigmoid,
)
from tests._helpers import chat_caller, run_command

MESSAGES = [{"role": "user", "content": "Which answer is right, A or B? Say [[A>B]] or [[B>A]]."}]
SAMPLING = {"temperature": 0.0, "max_tokens": 64}


def caller_for(server: FakeOpenAIServer, model: str = "judge", **options: Any) -> ChatCaller:
    options.setdefault("retry", RetryPolicy(max_retries=2, initial_wait=0.01, max_wait=0.02))
    options.setdefault("request_rule", STANDARD)
    return chat_caller(base_url=server.base_url, model=model, api_key="sk-test", **options)


def calls(caller: ChatCaller, requests: list[tuple[list[dict[str, str]], dict[str, Any]]]) -> list[Any]:
    """Each request once, in order; a failure is returned, not raised."""

    async def go() -> list[Any]:
        results: list[Any] = []
        try:
            for messages, sampling in requests:
                try:
                    results.append(await caller.complete(list(messages), dict(sampling)))
                except (CallFailed, FatalEndpointError) as exc:
                    results.append(exc)
        finally:
            await caller.aclose()
        return results

    return asyncio.run(go())


# ----- 3. errors keep the server's words --------------------------------------------------------------


@pytest.mark.parametrize("style", ERROR_STYLES)
def test_a_rejection_reads_with_the_servers_whole_message_whatever_its_body(style: str) -> None:
    with FakeOpenAIServer("[[A>B]]", max_context_chars=10, error_style=style) as server:
        (failure,) = calls(caller_for(server), [(MESSAGES, SAMPLING)])
    reason = str(failure)
    assert isinstance(failure, CallFailed) and server.requests == 1  # a deterministic 400: never retried
    assert reason.startswith("HTTP 400") and "(400)" not in reason and "\n" not in reason
    assert "This model's maximum context length is 10 tokens. However, your" in reason
    if style == "litellm":  # LiteLLM 1.108's words, whole: its router's lines joined into one
        assert reason.startswith(f"HTTP 400: {LITELLM_CONTEXT_WINDOW} - This model's maximum context length is 10")
        assert reason.endswith(
            "messages. model=judge. context_window_fallbacks=None. fallbacks=None. " + LITELLM_TAIL % "judge"
        )
    else:
        assert reason.rstrip().endswith(("messages.", "input messages."))  # whole, not cut


LITELLM_CONTEXT_WINDOW = (
    "litellm.ContextWindowExceededError: litellm.BadRequestError: ContextWindowExceededError: OpenAIException"
)
LITELLM_TAIL = (
    "Set 'context_window_fallback' - https://docs.litellm.ai/docs/routing#fallbacks "
    "LiteLLM: model group '%s' failed with the error above. No fallback was attempted."
)
LONG = [{"role": "user", "content": "a question far too long for the model's context " * 4}]


@pytest.mark.parametrize("style", ERROR_STYLES)
def test_a_context_length_rejection_is_sent_once_however_often_it_is_asked(style: str) -> None:
    """The shard task's retries ask a failed call again: a deterministic 400 is not sent again, and its
    reason says how often it was sent."""
    with FakeOpenAIServer("[[A>B]]", max_context_chars=100, error_style=style) as server:
        results = calls(caller_for(server), [(LONG, SAMPLING)] * 3 + [(MESSAGES, SAMPLING)])
    first, *again, answered = results
    assert server.requests == 2 and answered.text == "[[A>B]]"
    assert all(isinstance(r, CallFailed) for r in (first, *again))
    assert all(str(r) == f"{first} (sent once: not sent again)" for r in again)


def test_litellms_context_window_400_after_a_dropped_parameter_reaches_the_server_once() -> None:
    """An alias of a reasoning model: the first request is refused for temperature=0.0, the run drops it
    and sends the call again, and the upstream's context window refuses that. Asked again (a shard retry),
    the call used to be keyed by its first shape and sent again; it is the request last sent."""
    with FakeOpenAIServer(
        "[[A>B]]", rejected_params={"temperature"}, max_context_chars=100, error_style="litellm"
    ) as server:
        results = calls(caller_for(server, "team-judge"), [(LONG, SAMPLING)] * 3)
    assert server.status_counts == {400: 2} and set(server.refused_keys().values()) == {1}
    first, *again = results
    assert str(first).startswith(f"HTTP 400: {LITELLM_CONTEXT_WINDOW} - This model's maximum context length is 100")
    assert "\n" not in str(first) and str(first).endswith(LITELLM_TAIL % "team-judge")
    assert all(str(r) == f"{first} (sent 2 times: not sent again)" for r in again)


def test_a_rejected_request_is_not_sent_again_by_a_later_run_in_the_same_night() -> None:
    """A nightly configuration run once more (its second attempt, in the same night's run context) is a
    new caller: it does not send what the endpoint rejected for what it is; a 5xx gets a fresh budget."""
    with FakeOpenAIServer("[[A>B]]", max_context_chars=100, error_style="vllm") as server:

        async def two_runs() -> list[Any]:
            outcomes: list[Any] = []
            night = CallState()
            for _ in range(2):
                caller = caller_for(server, state=night)
                try:
                    await caller.complete(list(LONG), dict(SAMPLING))
                except CallFailed as exc:
                    outcomes.append(exc)
                finally:
                    await caller.aclose()
            return outcomes

        first, second = asyncio.run(two_runs())
        assert server.requests == 1 and str(second) == f"{first} (sent once: not sent again)"
        asyncio.run(two_runs())  # a new `judgebench run` (a new run context) tries again
        assert server.requests == 2


@pytest.mark.slow
def test_a_run_behind_litellm_sends_each_over_long_call_once(
    run_cli, judgebench_repo, gpt4o_pairs, tmp_path: Path
) -> None:
    """LiteLLM's alias of a reasoning model whose upstream caps the context: the longer prompts get its
    ContextWindowExceededError. Each such call reaches the server once (not again by the shard task's
    retries) and results.json keeps LiteLLM's message whole, on one line."""
    from judgebench_flows.data.loading import sample_pairs
    from judgebench_flows.judges import get_judge

    templates = Path(judgebench_repo[0].removeprefix("file://")) / "utils/templates"
    judge = get_judge("arena_hard", templates_dir=templates, model="team-judge")
    sizes = sorted(
        sum(len(m["content"]) for m in judge.format(p["question"], p["response_A"], p["response_B"]))
        for p in sample_pairs(gpt4o_pairs, 10, 42)
    )
    with FakeOpenAIServer(
        "My final verdict is [[A>B]]",
        rejected_params={"temperature"},
        max_context_chars=sizes[6],
        error_style="litellm",
    ) as server:
        args = run_command(judgebench_repo, server, tmp_path, model="team-judge", max_samples=10, concurrency=4)
        result = run_cli(*args, "--max-failed-fraction", "0.5")
        refused = server.refused_keys()
    assert result.returncode == 0, result.stderr[-3000:]
    published = json.loads((tmp_path / "results/judgebench.json").read_text())
    assert published["invalid"]["failed_judgments"] == 6  # 3 pairs too long, in both orders
    assert set(refused.values()) == {
        1
    }  # no request body sent twice (each long call: once with temperature, once without)
    (reason,) = published["invalid"]["reasons"]
    assert reason.startswith(f"HTTP 400: {LITELLM_CONTEXT_WINDOW} - This model's maximum context length is {sizes[6]}")
    assert reason.endswith(LITELLM_TAIL % "team-judge")
    assert "\n" not in reason and "sent" not in reason
    # The adjustment is printed whole, wrapped at words by the console (it used to end "... To drop )").
    (change,) = published["run"]["requests"]["adjustments"]
    assert change["endpoint_said"].endswith("set `litellm.drop_params = True`")
    assert f"request adjusted for team-judge: temperature dropped (the endpoint said: {change['endpoint_said']})" in (
        " ".join(result.stdout.split())
    )


@pytest.mark.parametrize(
    ("reason", "deterministic"),
    [
        ("HTTP 400 (context_length_exceeded): This model's maximum context length is 10 tokens.", True),
        (f"HTTP 400: {LITELLM_CONTEXT_WINDOW} - This model's maximum ... (sent once: not sent again)", True),
        ("HTTP 400: litellm.BadRequestError: ...", True),
        ("HTTP 422: 1 validation error", True),
        ("HTTP 429 after 3 attempts: Rate limit reached", False),
        ("HTTP 503 after 3 attempts: The engine is currently overloaded", False),
        ("HTTP 408 after 3 attempts", False),
        ("request timed out", False),
        ("connection failed or dropped", False),
        (None, False),
    ],
)
def test_which_recorded_failures_a_second_attempt_cannot_help(reason: str | None, deterministic: bool) -> None:
    assert deterministic_reason(reason) is deterministic


def test_a_run_whose_failures_are_rejections_is_not_run_again() -> None:
    from judgebench_flows.core.errors import RunFailed as Failed
    from judgebench_flows.flows.retries import is_transient

    context = f"HTTP 400: {LITELLM_CONTEXT_WINDOW} - This model's maximum context length is 6000 tokens."
    rejected = {"invalid": {"failed_judgments": 30, "invalid_judgments": 0, "reasons": {context: 30}}}
    down = {"invalid": {"failed_judgments": 30, "invalid_judgments": 0, "reasons": {"request timed out": 30}}}
    assert not is_transient(Failed("measured too little", rejected))
    assert is_transient(Failed("measured too little", down))


def test_vllms_context_length_message_reaches_the_reason_and_the_early_stop_line() -> None:
    """20 first calls rejected alike (their messages differ in the token counts only) stop the run with
    vLLM's words in the line."""
    with FakeOpenAIServer("[[A>B]]", max_context_chars=10, error_style="vllm") as server:
        requests = [([{"role": "user", "content": "q" * (20 + i)}], SAMPLING) for i in range(25)]
        results = calls(caller_for(server), requests)
    assert all(isinstance(r, CallFailed) for r in results[:19])
    stop = next(r for r in results if isinstance(r, RunFailed))
    assert str(stop).startswith("stopped early: the first 20 calls")
    assert "This model's maximum context length is 10 tokens. However, your request has" in str(stop)
    assert server.requests == 20  # nothing sent after the stop


# ----- 4. adaptive request rules from any server's wording ------------------------------------------------


def test_litellms_unsupported_params_error_drops_the_parameter_and_the_call_succeeds() -> None:
    """An alias of a reasoning model behind a gateway: LiteLLM refuses temperature=0.0 in words only
    (code "400", no param). The call is retried without it; the run records the adjustment."""
    with FakeOpenAIServer("[[A>B]]", rejected_params={"temperature"}, error_style="litellm") as server:
        caller = caller_for(server, "team-judge")
        results = calls(caller, [(MESSAGES, SAMPLING)] * 3)
    assert [getattr(r, "text", r) for r in results] == ["[[A>B]]"] * 3
    assert server.status_counts == {400: 1, 200: 3}
    (change,) = caller.adjustments
    assert change["param"] == "temperature" and change["action"] == "dropped"
    assert "O-series models don't support temperature=0.0" in change["endpoint_said"]


@pytest.mark.parametrize(
    "message, dropped",
    [
        ("litellm.UnsupportedParamsError: O-series models don't support temperature=0.0.", "temperature"),
        ("1 validation error: ('body', 'early_stopping') Extra inputs are not permitted", "early_stopping"),
        ("Unrecognized request argument supplied: best_of", "best_of"),
        ("'top_p' is not supported with this model.", "top_p"),
        # Unrelated 400s that name a sent parameter: nothing is dropped.
        (
            "'max_tokens' or 'max_completion_tokens' is too large: 150. This model's maximum context length is "
            "2048 tokens and your request has 1950 input tokens",
            None,
        ),  # fmt: skip
        ("temperature must be non-negative, got -1.0.", None),
        ("The model `x` does not support n above 1.", None),  # a lone letter names nothing
        ("messages: unsupported content type", None),  # never the messages
    ],
)
def test_a_parameter_is_dropped_only_when_the_message_says_it_is_not_accepted(message: str, dropped: str) -> None:
    sent = {"model": "m", "messages": [], "temperature": 0.0, "top_p": 1, "max_tokens": 150, "n": 4}
    sent |= {"early_stopping": True, "best_of": 4}
    assert rejected_parameter(message, sent) == dropped


def test_an_unrelated_400_is_not_retried_and_drops_nothing() -> None:
    with FakeOpenAIServer("[[A>B]]", max_context_chars=10, error_style="litellm") as server:
        caller = caller_for(server)
        (failure,) = calls(caller, [(MESSAGES, {"temperature": 0.0, "max_tokens": 64})])
    assert isinstance(failure, CallFailed) and server.requests == 1 and caller.adjustments == []


# ----- 6. the same mistake, the same answer ----------------------------------------------------------------


@pytest.mark.parametrize("style, status", [("openai", 404), ("vllm", 404), ("vllm-legacy", 404), ("litellm", 400)])
def test_an_unknown_model_stops_the_run_on_every_server(style: str, status: int) -> None:
    with FakeOpenAIServer("[[A>B]]", models={"served"}, error_style=style) as server:
        (failure,) = calls(caller_for(server, "typo"), [(MESSAGES, SAMPLING)])
    assert isinstance(failure, FatalEndpointError) and not isinstance(failure, RunFailed)
    assert "does not know model 'typo' or its chat completions API" in str(failure)
    assert server.status_counts == {status: 1}


def test_an_unknown_reward_model_names_the_pooling_api() -> None:
    with FakeOpenAIServer("1.5", models={"served"}) as server:
        caller = caller_for(server, "typo", api="pooling")
        (failure,) = calls(caller, [(MESSAGES, {"use_activation": False})])
    assert isinstance(failure, FatalEndpointError) and "its Pooling API (/pooling)" in str(failure)
    assert "chat" not in str(failure) and "The model `typo` does not exist." in str(failure)


# ----- 5. one retry budget per call --------------------------------------------------------------------------


def test_a_request_asked_again_gets_no_fresh_budget() -> None:
    """A shard task's retry judges the same pairs again: a request that spent its attempts is not sent."""
    with FakeOpenAIServer("[[A>B]]", fail_first=100, fail_kind="500", error_style="vllm") as server:
        results = calls(caller_for(server), [(MESSAGES, SAMPLING)] * 3)
        assert server.requests == 3  # max_retries 2: 3 attempts in all, not 9
    assert all(isinstance(r, CallFailed) for r in results)
    assert "after 3 attempts" in str(results[0]) and "The server had an error" in str(results[0])
    assert "not sent again" in str(results[1])


def test_an_answered_request_can_be_asked_again() -> None:
    with FakeOpenAIServer("[[A>B]]", fail_first=2) as server:
        results = calls(caller_for(server), [(MESSAGES, SAMPLING)] * 3)
    assert [r.text for r in results] == ["[[A>B]]"] * 3 and server.requests == 5


@pytest.mark.slow
def test_twenty_calls_all_answered_5xx_make_at_most_sixty_requests(run_cli, judgebench_repo, tmp_path: Path) -> None:
    """10 pairs in both orders = 20 calls, every attempt a 503; --max-retries 2 with the shard task's own
    retries (2 by default) still sends at most 3 requests per call."""
    with FakeOpenAIServer("[[A>B]]", rate_503=1.0, error_style="vllm") as server:
        result = run_cli(
            *run_command(
                judgebench_repo, server, tmp_path, model="gpt-4o", max_samples=10, shard_size=None, concurrency=4
            ),
            "--max-retries",
            "2",
            "--retry-initial-wait",
            "0.01",
            "--retry-max-wait",
            "0.02",
        )
        requests = server.requests
    assert result.returncode == 4, result.stderr[-2000:]
    assert requests == 60, requests  # 3 per call; before one budget per call it was 9 (180 in all)
    published = json.loads((tmp_path / "results/judgebench.json").read_text())
    assert published["invalid"]["failed_judgments"] == 20
    assert any("The engine is currently overloaded" in reason for reason in published["invalid"]["reasons"])


# ----- 1. reward models get raw scores from vLLM's Pooling API --------------------------------------------


def test_the_pooling_api_activates_unless_asked_not_to() -> None:
    with FakeOpenAIServer("2.5") as server:
        caller = caller_for(server, "rm", api="pooling")
        activated, raw = calls(caller, [(MESSAGES, {}), (MESSAGES, {"use_activation": False})])
    assert activated.score == pytest.approx(1 / (1 + math.exp(-2.5)))
    assert raw.score == 2.5 and server.ignored_log == []


def test_the_reward_judge_asks_for_raw_scores_in_fields_vllm_reads() -> None:
    assert RewardJudge().sampling == {"use_activation": False}
    assert set(RewardJudge().sampling) <= VLLM_POOLING_FIELDS


def test_a_raw_score_inside_zero_one_is_checked_once_and_accepted() -> None:
    with FakeOpenAIServer("0.25") as server:
        caller = caller_for(server, "rm", api="pooling")
        results = calls(
            caller,
            [(MESSAGES, {"use_activation": False}), ([{"role": "user", "content": "x"}], {"use_activation": False})],
        )
    assert [r.score for r in results] == [0.25, 0.25]
    assert server.requests == 3  # one probe asking for the activated score, then trusted


@pytest.mark.parametrize("score", ["0.3", "[[0.1], [0.7]]", "9.0"])
def test_a_server_that_ignores_use_activation_stops_the_run_with_one_line(score: str) -> None:
    """vLLM before 0.11.1: `use_activation` is logged as ignored and the sigmoid applied anyway."""
    with FakeOpenAIServer(score, honours_use_activation=False) as server:
        caller = caller_for(server, "rm", api="pooling")
        (failure,) = calls(caller, [(MESSAGES, {"use_activation": False})])
    assert isinstance(failure, FatalEndpointError), failure
    assert "returned activated scores" in str(failure) and "vLLM >= 0.11.1" in str(failure)
    assert "\n" not in str(failure)
    assert "present in the request but ignored: {'use_activation'}" in server.ignored_log[0]


def test_a_server_that_ignores_use_activation_is_caught_although_its_last_bits_move() -> None:
    """A real vLLM answers one text with different last bits in a batch and alone: an exact comparison
    took such a server for one that honours the field."""
    with FakeOpenAIServer("-2.0", honours_use_activation=False, score_wobble=True) as server:
        caller = caller_for(server, "rm", api="pooling")
        (failure,) = calls(caller, [(MESSAGES, {"use_activation": False})])
    assert isinstance(failure, FatalEndpointError) and "returned activated scores" in str(failure)
    raw, activated = re.findall(r"([0-9.e-]+) asked raw, ([0-9.e-]+) activated", str(failure))[0]
    assert raw != activated and server.requests == 2


@pytest.mark.parametrize(
    ("raw", "honoured"),
    [(2.0, True), (0.25, True), (0.0, True), (-3.0, True), (0.6590460684, None)],
)
def test_two_answers_for_one_text_tell_raw_from_activated(raw: float, honoured: bool | None) -> None:
    """Honoured: the server answers `raw` and its sigmoid; ignored: the sigmoid twice, its bits moved."""
    activated = sigmoid(raw)
    assert honours_raw(batch_wobble(raw, 1), batch_wobble(activated, 2)) is honoured
    if honoured is not None:
        assert honours_raw(batch_wobble(activated, 1), batch_wobble(activated, 2)) is False


def test_a_raw_score_at_the_sigmoids_fixed_point_leaves_the_check_to_the_next_call() -> None:
    """0.659... is its own sigmoid: one text cannot tell; the next call's text does (4 requests)."""
    with FakeOpenAIServer(lambda body: "0.6590460684" if body["messages"][0]["content"] == "a" else "0.25") as server:
        caller = caller_for(server, "rm", api="pooling")
        texts = ["a", "b", "c"]
        results = calls(caller, [([{"role": "user", "content": t}], {"use_activation": False}) for t in texts])
    assert [r.score for r in results] == [0.6590460684, 0.25, 0.25]
    assert server.requests == 5  # a and its probe, b and its probe, then c alone


def test_calls_wait_for_the_check_so_nothing_is_scored_by_a_server_that_ignores_the_field() -> None:
    """Many calls at once: only the first goes out until the check is decided; the others fail with
    the same line without sending anything."""
    with FakeOpenAIServer("0.5", honours_use_activation=False, score_wobble=True, latency=0.05) as server:
        caller = caller_for(server, "rm", api="pooling")

        async def go() -> list[Any]:
            try:
                texts = [[{"role": "user", "content": f"text {i}"}] for i in range(40)]
                return await asyncio.gather(
                    *(caller.complete(t, {"use_activation": False}) for t in texts), return_exceptions=True
                )
            finally:
                await caller.aclose()

        results = asyncio.run(go())
    assert all(isinstance(r, FatalEndpointError) for r in results)
    assert len({str(r) for r in results}) == 1 and server.requests == 2


@pytest.mark.slow
@pytest.mark.parametrize("pairs", [20, 60, 350])
def test_a_run_against_a_server_ignoring_use_activation_stops_after_the_probe(
    pairs: int, run_cli, judgebench_repo, gpt4o_pairs, tmp_path: Path
) -> None:
    """vLLM before 0.11.1 with float32 bits moving by batch: exit 2 after at most 4 requests, at any size,
    and no accuracy published from activated scores."""

    def score(body: dict) -> str:
        text = body["messages"][-1]["content"]
        return repr(int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) % 600 / 100 - 3.0)

    with FakeOpenAIServer(score, honours_use_activation=False, score_wobble=True) as server:
        args = run_command(
            judgebench_repo,
            server,
            tmp_path,
            judge_type="reward_model",
            model="Skywork/Skywork-Reward-Llama-3.1-8B",
            max_samples=pairs if pairs < len(gpt4o_pairs) else None,
            concurrency=16,
        )
        result = run_cli(*args)
        requests = server.requests
    assert result.returncode == 2, result.stderr[-3000:]
    assert "returned activated scores although asked for raw ones" in result.stderr
    assert requests == 2, requests  # the first call and its activated twin (at most 4 by design)
    assert not (tmp_path / "results/judgebench.json").exists()  # no accuracy from activated scores
    assert not list((tmp_path / "results").glob("**/*.jsonl")) or all(
        not path.read_text().strip() for path in (tmp_path / "results").glob("**/*.jsonl")
    )


# ----- 2. PandaLM's beam search on vLLM -----------------------------------------------------------------------


def test_pandalms_request_asks_vllm_for_a_four_beam_search_in_its_own_fields() -> None:
    legacy = {"best_of", "early_stopping"}  # what vLLM before 0.6.3 read; current vLLM logs them as ignored
    assert set(PANDALM_SAMPLING) - legacy <= VLLM_COMPLETION_FIELDS
    assert PANDALM_SAMPLING["use_beam_search"] is True and PANDALM_SAMPLING["n"] == 4
    with FakeOpenAIServer("1\n\nReason: better") as server:
        caller = caller_for(server, "pandalm", api="completions")
        (answer,) = calls(caller, [(MESSAGES, dict(PANDALM_SAMPLING))])
    assert answer.text.startswith("1") and server.beam_widths == {4: 1}
    assert server.ignored_fields == {"best_of": 1, "early_stopping": 1} and caller.adjustments == []


def test_a_server_that_cannot_beam_search_is_named_in_the_run() -> None:
    with FakeOpenAIServer("2", beam_search=False) as server:
        caller = caller_for(server, "pandalm", api="completions")
        results = calls(caller, [(MESSAGES, dict(PANDALM_SAMPLING))] * 2)
    assert [r.text for r in results] == ["2", "2"]
    (note,) = caller.adjustments  # once, however many calls
    assert note["param"] == "use_beam_search" and note["action"] == "ignored by the endpoint"
    assert "1 choice(s) to a 4-beam search" in note["endpoint_said"]


def test_results_group_failures_by_reason_keeping_the_servers_words() -> None:
    """Messages that differ only in their numbers are one reason; the attempt counts are left out."""
    from judgebench_flows.core.records import JudgmentRecord
    from judgebench_flows.scoring.metrics import Tally

    common = {"source": "s", "category": "s", "label": "A>B", "judge_model": "m", "calls": 1}
    vllm = "HTTP 400: This model's maximum context length is 8192 tokens. However, your request has {} input tokens."
    errors = [vllm.format(9000), vllm.format(12345), "HTTP 503 after 3 attempts: The engine is overloaded."]
    errors.append("HTTP 503 after 3 attempts: The engine is overloaded. (its 3 attempts are spent: not sent again)")
    records = [
        JudgmentRecord(pair_id=f"p{i}", order=0, status="failed", error=error, **common)
        for i, error in enumerate(errors)
    ]
    assert dict(Tally.of(records).reasons) == {vllm.format(9000): 2, "HTTP 503: The engine is overloaded.": 2}

"""The fake OpenAI server, driven by the real `openai` client over real HTTP on loopback.

These tests pin down the behaviour other tests rely on: each fault surfaces as the same exception type
production code sees, and the counters are exact.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import openai
import pytest

from judgebench_flows.testing.fake_openai import FakeOpenAIServer, request_key
from tests.conftest import SHARED, requires_shared

MODEL = "judge-model"


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def body_of(text: str, model: str = MODEL) -> dict:
    return {"model": model, "messages": user(text)}


def sync_client(
    server: FakeOpenAIServer, *, api_key: str = "test-key", timeout: float = 5.0, max_retries: int = 0
) -> openai.OpenAI:
    return openai.OpenAI(api_key=api_key, base_url=server.base_url, max_retries=max_retries, timeout=timeout)


def ask(client: openai.OpenAI, text: str, model: str = MODEL):
    return client.chat.completions.create(model=model, messages=user(text))


@pytest.fixture
def start_server() -> Iterator:
    """Start servers with given settings; every one is stopped after the test even if it fails."""
    servers: list[FakeOpenAIServer] = []

    def start(*args, **kwargs) -> FakeOpenAIServer:
        server = FakeOpenAIServer(*args, **kwargs).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def test_scripted_answer_and_usage_round_trip_sync(start_server) -> None:
    seen: list[dict] = []

    def responder(body: dict) -> str:
        seen.append(body)
        return "Verdict: " + body["messages"][-1]["content"].upper()

    server = start_server(responder)
    with sync_client(server) as client:
        result = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "system", "content": "be fair"}, {"role": "user", "content": "a b c"}],
            temperature=0,
        )
    assert result.choices[0].message.content == "Verdict: A B C"
    assert result.choices[0].message.role == "assistant"
    assert result.choices[0].finish_reason == "stop"
    assert result.model == MODEL
    assert result.id.startswith("chatcmpl-")
    assert result.usage is not None
    assert (result.usage.prompt_tokens, result.usage.completion_tokens, result.usage.total_tokens) == (5, 4, 9)
    assert seen[0]["temperature"] == 0
    assert server.requests == 1 and server.answered == 1


def test_default_answer_through_async_client(start_server) -> None:
    server = start_server()

    async def run() -> str | None:
        async with openai.AsyncOpenAI(api_key="k", base_url=server.base_url, max_retries=0) as client:
            result = await client.chat.completions.create(model=MODEL, messages=user("compare"))
            return result.choices[0].message.content

    assert asyncio.run(run()) == "My final verdict is [[A>B]]"
    assert server.status_counts == {200: 1}


def test_429_carries_retry_after_and_raises_rate_limit_error(start_server) -> None:
    server = start_server(rate_429=1.0, retry_after=0.05)
    with sync_client(server) as client, pytest.raises(openai.RateLimitError) as caught:
        ask(client, "q")
    assert caught.value.status_code == 429
    assert caught.value.response.headers["retry-after"] == "0.05"
    assert caught.value.response.headers["retry-after-ms"] == "50"
    assert caught.value.code == "rate_limit_exceeded"
    assert server.status_counts == {429: 1}
    assert server.answered == 0


def test_client_retries_honour_retry_after_then_succeed(start_server) -> None:
    server = start_server(fail_first=2, fail_kind="429", retry_after=0.2)
    started = time.perf_counter()
    with sync_client(server, max_retries=2) as client:
        result = ask(client, "q")
    elapsed = time.perf_counter() - started
    assert result.choices[0].message.content == "My final verdict is [[A>B]]"
    assert elapsed >= 0.35  # two waits of Retry-After 0.2 s
    assert server.status_counts == {429: 2, 200: 1}


@pytest.mark.parametrize("status", [500, 503])
def test_server_errors_raise_internal_server_error(start_server, status: int) -> None:
    server = start_server(**{f"rate_{status}": 1.0})
    with sync_client(server) as client, pytest.raises(openai.InternalServerError) as caught:
        ask(client, "q")
    assert isinstance(caught.value, openai.APIStatusError)
    assert caught.value.status_code == status
    assert caught.value.type == "server_error"
    assert server.status_counts == {status: 1}


def test_drop_raises_connection_error_not_timeout(start_server) -> None:
    server = start_server(rate_drop=1.0)
    with sync_client(server) as client:
        with pytest.raises(openai.APIConnectionError) as caught:
            ask(client, "q")
        assert not isinstance(caught.value, openai.APITimeoutError)
        server.configure(rate_drop=0.0)
        assert ask(client, "q").choices[0].message.content  # the client recovers on a fresh connection
    assert server.status_counts == {"drop": 1, 200: 1}


def test_hang_times_out_and_stop_is_still_prompt(start_server) -> None:
    server = start_server(rate_hang=1.0, hang_seconds=30.0)
    with sync_client(server, timeout=0.3) as client:
        started = time.perf_counter()
        with pytest.raises(openai.APITimeoutError):
            ask(client, "q")
        assert time.perf_counter() - started < 15.0  # well short of the 30 s hang, even on a busy machine
    port = server.port
    started = time.perf_counter()
    server.stop()
    assert time.perf_counter() - started < 15.0  # not held by the 30 s hang
    assert server.status_counts == {"hang": 1}
    with pytest.raises(ConnectionRefusedError):  # the listening socket is really closed
        http.client.HTTPConnection("127.0.0.1", port, timeout=1).request("GET", "/v1/models")


def test_stop_is_prompt_with_idle_keep_alive_connections(start_server) -> None:
    server = start_server()
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    connection.request("GET", "/v1/models")
    assert connection.getresponse().read()
    started = time.perf_counter()
    server.stop()
    assert time.perf_counter() - started < 10.0  # not held until the idle connection goes away
    connection.close()


def test_fail_first_faults_each_distinct_request_then_succeeds(start_server) -> None:
    server = start_server(fail_first=2, fail_kind="503")
    outcomes: dict[str, list[object]] = {"A": [], "B": []}
    with sync_client(server) as client:
        for _ in range(3):
            for text in ("A", "B"):
                try:
                    outcomes[text].append(ask(client, text).choices[0].message.content)
                except openai.InternalServerError as error:
                    outcomes[text].append(error.status_code)
    assert outcomes["A"] == [503, 503, "My final verdict is [[A>B]]"]
    assert outcomes["B"] == [503, 503, "My final verdict is [[A>B]]"]
    assert server.status_counts == {503: 4, 200: 2}
    assert server.answered_count(request_key(body_of("A"))) == 1
    assert server.answered_count(request_key(body_of("B"))) == 1


def test_wrong_key_gets_401_without_echoing_the_key(start_server) -> None:
    server = start_server(api_key="sk-right-123")
    with sync_client(server, api_key="sk-wrong-456") as client, pytest.raises(openai.AuthenticationError) as caught:
        ask(client, "q")
    assert caught.value.status_code == 401
    assert caught.value.code == "invalid_api_key"
    assert "sk-wrong-456" not in str(caught.value)
    assert "sk-wrong-456" not in caught.value.response.text
    assert "sk-right-123" not in caught.value.response.text
    with sync_client(server, api_key="sk-right-123") as client:
        assert ask(client, "q").choices[0].message.content
    assert server.status_counts == {401: 1, 200: 1}


def test_unknown_model_gets_404_and_models_are_listed(start_server) -> None:
    server = start_server(models={MODEL, "other-model"})
    with sync_client(server) as client:
        with pytest.raises(openai.NotFoundError) as caught:
            ask(client, "q", model="no-such-model")
        assert caught.value.code == "model_not_found"
        assert "no-such-model" in caught.value.message
        assert sorted(m.id for m in client.models.list()) == [MODEL, "other-model"]
        assert ask(client, "q").model == MODEL


def test_context_length_exceeded_is_a_400(start_server) -> None:
    server = start_server(max_context_chars=20)
    with sync_client(server) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            ask(client, "x" * 21)
        assert caught.value.code == "context_length_exceeded"
        assert "maximum context length is 20" in caught.value.message
        assert ask(client, "x" * 20).choices[0].message.content  # at the limit is fine


def test_responder_exception_becomes_a_visible_500(start_server) -> None:
    def broken(body: dict) -> str:
        raise ValueError("responder bug xyz")

    server = start_server(broken)
    with sync_client(server) as client, pytest.raises(openai.InternalServerError) as caught:
        ask(client, "q")
    assert caught.value.status_code == 500
    assert "responder bug xyz" in caught.value.message
    assert server.status_counts == {500: 1}
    server.set_responder("fixed")
    with sync_client(server) as client:
        assert ask(client, "q").choices[0].message.content == "fixed"


def test_counters_track_requests_answers_and_keys(start_server) -> None:
    server = start_server(api_key="k")
    with sync_client(server, api_key="k") as client:
        for text in ("one", "two", "one", "one"):
            ask(client, text)
    with sync_client(server, api_key="bad") as client, pytest.raises(openai.AuthenticationError):
        ask(client, "one")
    assert server.requests == 5
    assert server.answered == 4
    assert server.answered_count(request_key(body_of("one"))) == 3
    assert server.answered_count(request_key(body_of("two"))) == 1
    assert server.answered_count(request_key(body_of("never"))) == 0
    assert server.answered_keys() == {request_key(body_of("one")): 3, request_key(body_of("two")): 1}
    assert sum(server.status_counts.values()) == server.requests
    # sampling parameters do not change the identity of a request
    assert request_key({**body_of("one"), "temperature": 0.7}) == request_key(body_of("one"))
    assert request_key(body_of("one", model="m2")) != request_key(body_of("one"))
    server.reset_counters()
    assert (server.requests, server.answered, server.status_counts, server.answered_keys()) == (0, 0, {}, {})


def test_configure_turns_faults_on_and_off_and_rejects_unknown_settings(start_server) -> None:
    server = start_server()
    with sync_client(server) as client:
        server.configure(rate_500=1.0)
        with pytest.raises(openai.InternalServerError):
            ask(client, "q")
        server.configure(rate_500=0.0, fail_first=1, fail_kind="429")
        with pytest.raises(openai.RateLimitError):
            ask(client, "q")  # "q" was seen before, but fail_first counts attempts from the configure call
        assert ask(client, "q").choices[0].message.content
    with pytest.raises(TypeError):
        server.configure(rate_501=1.0)
    with pytest.raises(ValueError):
        server.configure(rate_500=0.7, rate_503=0.7)


def test_random_faults_are_reproducible_for_a_seed(start_server) -> None:
    def statuses(seed: int) -> list[object]:
        server = start_server(rate_500=0.3, rate_503=0.3, seed=seed)
        result: list[object] = []
        with sync_client(server) as client:
            for i in range(20):
                try:
                    ask(client, f"q{i}")
                    result.append(200)
                except openai.InternalServerError as error:
                    result.append(error.status_code)
        return result

    first, again = statuses(7), statuses(7)
    assert first == again
    assert {200, 500, 503} <= set(first)


def test_keep_alive_unknown_paths_and_bad_json_over_one_connection(start_server) -> None:
    server = start_server()
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        connection.request("GET", "/v1/nope")
        response = connection.getresponse()
        assert response.status == 404
        assert "error" in json.loads(response.read())
        first_socket = connection.sock

        connection.request(
            "POST", "/v1/chat/completions", body=b"{not json", headers={"Content-Type": "application/json"}
        )
        response = connection.getresponse()
        assert response.status == 400
        response.read()

        payload = json.dumps(body_of("hello")).encode()
        connection.request("POST", "/v1/chat/completions", body=payload, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == 200
        assert json.loads(response.read())["object"] == "chat.completion"
        assert connection.sock is first_socket  # the same TCP connection served all three requests
    finally:
        connection.close()
    assert server.status_counts == {400: 1, 200: 1}


def test_64_concurrent_async_requests_overlap(start_server) -> None:
    # Overlap is shown by the server's own count of requests in flight, not a wall time (a busy machine).
    server = start_server(lambda body: body["messages"][0]["content"], latency=1.0)

    async def run() -> list[str | None]:
        async with openai.AsyncOpenAI(api_key="k", base_url=server.base_url, max_retries=0) as client:
            results = await asyncio.gather(
                *(client.chat.completions.create(model=MODEL, messages=user(f"q{i}")) for i in range(64))
            )
            return [r.choices[0].message.content for r in results]

    answers = asyncio.run(run())
    assert answers == [f"q{i}" for i in range(64)]
    assert server.max_in_flight >= 8, f"at most {server.max_in_flight} of 64 requests were answered at once"
    assert server.answered == 64
    assert len(server.answered_keys()) == 64


def test_command_line_serves_and_exits_on_sigterm() -> None:
    command = [sys.executable, "-m", "judgebench_flows.testing.fake_openai", "--port", "0", "--answer", "cli answer"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None and process.stderr is not None
            base_url = process.stdout.readline().strip()
            assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
            with openai.OpenAI(api_key="k", base_url=base_url, max_retries=0, timeout=5) as client:
                assert ask(client, "q").choices[0].message.content == "cli answer"
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=5) == 0
            assert json.loads(process.stderr.read())["answered"] == 1
        finally:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
                process.wait()


@requires_shared
@pytest.mark.parametrize("judge_type", ["vanilla", "arena_hard", "auto_j", "prometheus_2", "skywork_critic"])
@pytest.mark.parametrize("first", [True, False])
def test_the_bundled_server_answers_every_judge_in_its_format(judge_type: str, first: bool) -> None:
    """`python -m judgebench_flows.testing.fake_openai` without --answer: each built-in judge reads a valid
    verdict from it, so the README's examples with it end Completed (at 0%: the verdict ignores the pair).
    With a fixed arena-style answer, as the README had it, the vanilla judge read nothing and its run
    failed for measuring too little."""
    from judgebench_flows.judges import get_judge
    from judgebench_flows.testing.fake_openai import judge_format_responder

    judge = get_judge(judge_type, SHARED / "utils" / "templates")
    answer = judge_format_responder(first)({"messages": judge.format("2+2?", "4", "5")})
    assert judge.parse(answer) == ("A>B" if first else "B>A"), answer


@requires_shared
def test_the_stand_in_oracle_serves_every_data_file_of_a_folder_in_each_judges_format(tmp_path):
    """`--oracle data/` knows both JudgeBench files (the shipped matrix judges both) and answers each request
    in the format its judge prompt asks for (a matrix of arena_hard and vanilla cells against one server)."""
    import socket as socket_module

    from tests.conftest import CLAUDE_FILE, GPT4O_FILE

    with socket_module.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "judgebench_flows.testing.fake_openai", "--port", str(port)]
    server = subprocess.Popen(
        [*command, "--oracle", str(SHARED / "data"), "--oracle-accuracy", "1.0"], stderr=subprocess.PIPE, text=True
    )
    # each judge's prompt as the stand-in recognises it, and what its oracle then says for "A better"
    prompts = {
        "arena_hard": ("Output your final verdict, e.g. [[A>>B]]", "My final verdict is [[A>B]]"),
        "vanilla": ('Reply "Output (a)" or "Output (b)"', "Output (a)"),
    }
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-test", max_retries=0)
        deadline = time.monotonic() + 60
        while True:
            try:
                client.models.list()
                break
            except openai.APIConnectionError:
                assert time.monotonic() < deadline and server.poll() is None, "the stand-in did not start"
                time.sleep(0.2)
        for data_file in (GPT4O_FILE, CLAUDE_FILE):
            pair = json.loads((SHARED / "data" / data_file).read_text().splitlines()[0])
            better, worse = (
                (pair["response_A"], pair["response_B"])
                if pair["label"] == "A>B"
                else (pair["response_B"], pair["response_A"])
            )
            for judge, (prompt, says_first) in prompts.items():
                text = f"{prompt}\n[first]\n{better}\n[second]\n{worse}"
                answer = client.chat.completions.create(model="m", messages=user(text)).choices[0].message.content
                assert answer == says_first, (data_file, judge, answer)
    finally:
        server.terminate()
        _, said = server.communicate(timeout=30)
    assert "oracle: 620 pairs of 2 data files" in said, said

"""Helpers shared by several test modules (fixtures stay in conftest.py)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from judgebench_flows.calls.caller import ChatCaller
from judgebench_flows.calls.providers import provider_rule
from judgebench_flows.calls.retry import RetryPolicy
from judgebench_flows.core.completion import Completion
from judgebench_flows.core.endpoint import EndpointSettings
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests.conftest import GPT4O_FILE

if TYPE_CHECKING:
    from tokenizers import Tokenizer


def chat_caller(
    *,
    base_url: str,
    model: str,
    api_key: str = "sk-test",
    retry: RetryPolicy | None = None,
    cache_mode: str | None = None,
    adaptive: bool | None = None,
    **options: Any,
) -> ChatCaller:
    """A `ChatCaller` as a test builds one: the options `EndpointSettings` names (concurrency, rpm, provider,
    batch, ...) and `retry`, `cache_mode`, `adaptive` become its settings; the rest (engine, api,
    request_rule, state, ...) are the caller's own. `base_url` "local:": no endpoint (a local model)."""
    fields = {name: options.pop(name) for name in list(options) if name in EndpointSettings.model_fields}
    if retry is not None:
        fields |= {"max_retries": retry.max_retries, "retry_initial_wait": retry.initial_wait}
        fields |= {"retry_max_wait": retry.max_wait}
    if cache_mode is not None:
        fields["cache"] = cache_mode
    if adaptive is not None:
        fields["adaptive_concurrency"] = adaptive
    settings = EndpointSettings(base_url=None if base_url == "local:" else base_url, **fields)
    return ChatCaller(settings, model=model, api_key=api_key, **options)


def provider_caller(server: Any, provider: str, model: str, api_key: str, **fields: Any) -> ChatCaller:
    """A caller speaking `provider`'s API to a stand-in (`server.base_url`), with the provider's request
    rule for `model`, as a run builds it."""
    rule = provider_rule(provider, model, "auto", ())
    return chat_caller(
        base_url=server.base_url, model=model, api_key=api_key, provider=provider, request_rule=rule, **fields
    )


def only_these_aws_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, key_id: str, secret: str) -> None:
    """AWS's chain reads only what a test gives it (this key, us-east-1): no user's files or profile, no
    instance metadata probe, no endpoint override left by another test."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("AWS_REGION", "us-east-1")


def complete_once(caller: ChatCaller, messages: list[dict], sampling: dict) -> Completion:
    """One call's completion, the caller closed after it."""

    async def go() -> Completion:
        try:
            return await caller.complete(messages, sampling)
        finally:
            await caller.aclose()

    return asyncio.run(go())


def run_command(
    repo: tuple[str, str],
    server: FakeOpenAIServer,
    tmp_path: Path,
    *extra: str,
    judge_type: str | None = "arena_hard",
    model: str = "o1-mini-2024-09-12",
    concurrency: int | None = 32,
    shard_size: int | None = 50,
    max_samples: int | None = None,
    result_path: str | None = "results/judgebench.json",
    output_dir: str | None = "results/run",
    db_name: str = "judgebench.db",
) -> list[str]:
    """`judgebench run` arguments for a whole run of the GPT-4o pairs from `repo` (url, commit) against
    `server`, with its database `db_name` in `tmp_path`; `extra` goes last, so it overrides what stands
    before it. An option given as None is left out (the CLI's default)."""
    url, sha = repo
    return [
        "run",
        *_option("--judge-type", judge_type),
        "--model",
        model,
        "--repo-url",
        url,
        "--ref",
        sha,
        "--data-file",
        GPT4O_FILE,
        "--base-url",
        server.base_url,
        *_option("--concurrency", concurrency),
        *_option("--shard-size", shard_size),
        *_option("--max-samples", max_samples),
        *_option("--result-path", result_path),
        *_option("--output-dir", output_dir),
        "--db-url",
        f"sqlite:///{tmp_path}/{db_name}",
        "--no-progress",
        *extra,
    ]


def _option(name: str, value: object) -> list[str]:
    return [] if value is None else [name, str(value)]


def byte_level_bpe(corpus: list[str], vocab_size: int, special_tokens: Sequence[str]) -> Tokenizer:
    """A small byte-level BPE `tokenizers.Tokenizer` trained on `corpus`, starting every text with `<s>`
    (`special_tokens` must hold `<unk>` and put `<s>` at id 1). Needs the `reward` extra."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=list(special_tokens),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return tok


VERDICT = "My final verdict is [[A>B]]"


class GatedAnswers:
    """A responder that answers the first `n` requests, then holds each request until `release` is set
    (or `hold_seconds` pass): the run is mid-judging, with calls in flight, for as long as a test needs."""

    def __init__(self, n: int, answer: str = VERDICT, hold_seconds: float = 600.0) -> None:
        self.n, self.answer, self.hold_seconds = n, answer, hold_seconds
        self.seen, self.release = 0, threading.Event()
        self._lock = threading.Lock()

    def __call__(self, body: dict) -> str:
        with self._lock:
            self.seen += 1
            held = self.seen > self.n
        if held:
            self.release.wait(self.hold_seconds)
        return self.answer


def cancel_after_first_batch(
    make_caller: Callable[[], ChatCaller], server: Any, messages: list[list[dict]], sampling: dict
) -> None:
    """A batch run's calls as a killed process leaves them: sent, their batch created and polled at least
    once (`server` holds it in progress), then every call cancelled. The batch stays stored with the
    caller's results database, for the next caller to re-attach to."""

    async def killed() -> None:
        caller = make_caller()
        calls = [asyncio.ensure_future(caller.complete(m, sampling)) for m in messages]
        while server.batches_created == 0:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # polled at least once, still in progress
        for call in calls:
            call.cancel()
        await asyncio.gather(*calls, return_exceptions=True)

    asyncio.run(killed())


def kill_after_first_batch_and_rerun(
    argv: list[str], server: Any, cwd: Path, env: dict[str, str], timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """`judgebench` with `argv` killed with SIGKILL once `server` (holding its batches) has one, then,
    the server letting its batches finish, the same command again: that second run."""
    command = [sys.executable, "-m", "judgebench_flows.cli.main", *argv]
    first = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 400
    while server.batches_created == 0 and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.2)
    if server.batches_created == 0:
        first.kill()
        pytest.fail(f"the first run never submitted its batch: {first.communicate()[1][-3000:]!r}")
    time.sleep(1.0)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    server.release()
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


# ----- CLI tables, a labelled stand-in, a night on the session's Prefect server and its events ---------


def table_rows(output: str) -> list[list[str]]:
    """The body rows of rich tables in CLI output, as lists of cell texts."""
    return [
        [cell.strip() for cell in line.strip().strip("│").split("│")]
        for line in output.splitlines()
        if line.lstrip().startswith("│")
    ]


def labelled_responder(
    pairs: list[dict], wrong: set[str] | frozenset[str] = frozenset(), judge: str = "arena_hard"
) -> Callable[[dict], str]:
    """The labelled verdict of each pair in `judge`'s format (whichever order it is shown in), inverted
    for the pairs in `wrong`; a request naming no known pair gets an answer without a verdict."""
    from tests.conftest import VERDICTS

    def respond(body: dict) -> str:
        text = "\n".join(m["content"] for m in body["messages"] if m["role"] == "user")
        for pair in pairs:
            ia, ib = text.find(pair["response_A"]), text.find(pair["response_B"])
            if ia >= 0 and ib >= 0:
                first_is_better = (ia < ib) == (pair["label"] == "A>B")
                return VERDICTS[judge](first_is_better != (pair["pair_id"] in wrong))
        return "I cannot tell."

    return respond


def run_night(matrix_path: object) -> Any:
    """One night of the matrix at `matrix_path` on the session's Prefect server; its final state."""
    from judgebench_flows.flows.nightly import nightly_benchmarks

    return asyncio.run(nightly_benchmarks(str(matrix_path), retry_delay_seconds=0, return_state=True))


def night_summary(state: Any) -> str:
    """The night's summary artifact (markdown) of the night whose final state is `state`."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey

    from judgebench_flows.flows.nightly import NIGHTLY_ARTIFACT_KEY

    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=[NIGHTLY_ARTIFACT_KEY]),
                flow_run_id=ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id]),
            )
        )
    return artifacts[-1].data


def run_events(
    event: dict[str, list[str]], since: Any, model: str | None = None, done: Callable[[list[dict]], bool] = bool
) -> list[dict]:
    """Events matching `event` (Prefect's filter: {"name": [...]} or {"prefix": [...]}) since `since`, of
    `model`'s configuration if given, oldest first: asked again (up to a minute) until `done` says they
    are all there, as the server stores events a moment after they arrive."""
    from prefect.client.orchestration import get_client
    from prefect.events.worker import EventsWorker

    EventsWorker.drain_all()
    where: dict[str, Any] = {"event": event, "occurred": {"since": since.isoformat()}}
    if model is not None:
        where["resource"] = {"labels": {"judgebench.model": [model]}}
    query = {"filter": where, "limit": 50}
    deadline = time.monotonic() + 60
    while True:
        with get_client(sync_client=True) as client:
            events = client.request("POST", "/events/filter", json=query).json()["events"]
        events.sort(key=lambda e: e["occurred"])
        if done(events) or time.monotonic() > deadline:
            return events
        time.sleep(0.5)


def batch_requests(n: int) -> list[list[dict[str, str]]]:
    """`n` distinct judge requests, as the batch tests send them."""
    return [[{"role": "system", "content": "Judge."}, {"role": "user", "content": f"pair {i}"}] for i in range(n)]


def judge_each(caller: ChatCaller, requests: list[list[dict[str, str]]], sampling: dict) -> list:
    """Every request through `caller` at once (answers or the exceptions raised), then the caller closed."""

    async def go() -> list:
        try:
            return await asyncio.gather(*(caller.complete(m, sampling) for m in requests), return_exceptions=True)
        finally:
            await caller.aclose()

    return asyncio.run(go())

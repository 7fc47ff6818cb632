"""Drift made visible (issue 41, item 2): what the endpoint said about the model that answered, and what
we sent, recorded per run and compared between runs.

The call layer reads each answer's `model` and `system_fingerprint` (OpenAI-compatible) or Anthropic's
model id, and asks a vLLM server's `/v1/models` once per run; the run counts the distinct values. Two
runs' provenance is compared field by field: `history`, `compare`, results.json's `drift`, the run's
event and artifact name what changed.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from judgebench_flows.calls.caller import CallStats
from judgebench_flows.calls.providers import provider_rule
from judgebench_flows.scoring.provenance import drift_between, sent_changes, served_changes, served_text
from judgebench_flows.scoring.result_types import Provenance, Sent, Served
from judgebench_flows.scoring.run_results import RunResults
from judgebench_flows.testing.fake_anthropic import FakeAnthropicServer
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._helpers import chat_caller, labelled_responder, night_summary, run_events, run_night, table_rows
from tests.conftest import CANARY_KEY, VERDICTS

MESSAGES = [{"role": "user", "content": "Which answer is better?"}]


def _calls(caller, n: int = 3) -> CallStats:
    async def go() -> CallStats:
        try:
            for i in range(n):
                await caller.complete([{"role": "user", "content": f"question {i}"}], {"temperature": 0.0})
        finally:
            await caller.aclose()
        return caller.stats

    return asyncio.run(go())


def test_each_answer_says_its_model_and_fingerprint_and_the_run_counts_them() -> None:
    with FakeOpenAIServer(
        "[[A>B]]",
        models={"gpt-4o"},
        served_model="gpt-4o-2024-08-06",
        system_fingerprint="fp_1111",
    ) as server:
        stats = _calls(chat_caller(base_url=server.base_url, model="gpt-4o"))
        server.configure(system_fingerprint="fp_2222")
        later = _calls(chat_caller(base_url=server.base_url, model="gpt-4o"), n=2)
    assert stats.served == {("gpt-4o-2024-08-06", "fp_1111"): 3}
    assert later.served == {("gpt-4o-2024-08-06", "fp_2222"): 2}
    # an OpenAI-style listing: its entry, without vLLM's fields
    assert stats.model_entry == {"id": "gpt-4o", "created": 0, "owned_by": "fake-openai"}
    total = CallStats()
    total.add(stats)
    total.add(later)
    assert total.served == {("gpt-4o-2024-08-06", "fp_1111"): 3, ("gpt-4o-2024-08-06", "fp_2222"): 2}
    assert total.answered == 5 and total.model_entry == stats.model_entry


def test_a_vllm_server_lists_the_checkpoint_behind_its_served_name() -> None:
    with FakeOpenAIServer(
        "[[A>B]]", models={"judge"}, model_root="/ckpt/day-2", max_model_len=8192, model_created=1_700_000_000
    ) as server:
        stats = _calls(chat_caller(base_url=server.base_url, model="judge"), n=1)
    assert stats.served == {("judge", ""): 1}  # vLLM says no fingerprint
    assert stats.model_entry == {
        "id": "judge",
        "root": "/ckpt/day-2",
        "max_model_len": 8192,
        "created": 1_700_000_000,
        "owned_by": "vllm",
    }


def test_a_server_without_a_listing_costs_nothing_but_the_entry() -> None:
    with FakeOpenAIServer("[[A>B]]", models=None) as server:  # lists no model
        stats = _calls(chat_caller(base_url=server.base_url, model="judge"), n=1)
    assert stats.answered == 1 and stats.model_entry is None


def test_anthropic_answers_name_the_model_id_behind_an_alias() -> None:
    model = "claude-3-5-sonnet-latest"
    with FakeAnthropicServer("[[A>B]]", served_model="claude-3-5-sonnet-20241022") as server:
        caller = chat_caller(
            base_url=server.base_url,
            model=model,
            api_key=CANARY_KEY,
            provider="anthropic",
            request_rule=provider_rule("anthropic", model, "auto", ()),
        )
        stats = _calls(caller, n=2)
    assert stats.served == {("claude-3-5-sonnet-20241022", ""): 2} and stats.model_entry is None


def _provenance(fingerprints: dict[str, int], temperature: float = 0.0, root: str | None = None) -> Provenance:
    answers = sum(fingerprints.values()) or 4  # a vLLM server says no fingerprint
    return Provenance(
        sent=Sent(
            package_version="0.1.0",
            provider="openai",
            endpoint="http://127.0.0.1:8000/v1",
            model="judge",
            template_hash="abc",
            sampling={"temperature": temperature, "max_tokens": 4096},
        ),
        served=Served(
            answers=answers,
            models={"judge-2024": answers},
            system_fingerprints=fingerprints,
            model_entry={"id": "judge", "root": root} if root else None,
        ),
    )


def test_drift_names_what_the_endpoint_said_differently_and_what_was_sent_differently() -> None:
    same = drift_between(_provenance({"fp_1": 20}), _provenance({"fp_1": 20}), "r" * 32)
    assert not same.changed and same.served == [] and same.sent == [] and same.message == ""
    drift = drift_between(_provenance({"fp_1": 20}), _provenance({"fp_2": 18, "fp_1": 2}, 0.7), "b" * 32)
    assert drift.changed
    assert [c.text() for c in drift.served] == ["system_fingerprint fp_1 -> fp_2 (18), fp_1 (2)"]
    assert [c.text() for c in drift.sent] == ["sampling.temperature 0.0 -> 0.7"]
    assert drift.message == (
        "the endpoint changed: system_fingerprint fp_1 -> fp_2 (18), fp_1 (2), "
        "sent differently: sampling.temperature 0.0 -> 0.7 (against run bbbbbbbb)"
    )
    # a vLLM server's checkpoint behind the same name
    vllm = served_changes(_provenance({}, root="/ckpt/1").served, _provenance({}, root="/ckpt/2").served)
    assert [c.text() for c in vllm] == ["models.root /ckpt/1 -> /ckpt/2"]
    # a run answered wholly from a cache heard nothing: no drift claimed either way
    cached = _provenance({"fp_2": 20})
    cached.served = Served()
    assert served_changes(_provenance({"fp_1": 20}).served, cached.served) == []
    assert sent_changes(Sent(model="a"), Sent(model="b", sampling={"seed": 1}))[1].text() == "sampling.seed - -> 1"
    assert served_text(_provenance({"fp_1": 3}, root="/ckpt/1").served) == "judge-2024 fp_1 root /ckpt/1"
    assert served_text(Served()) is None


def test_results_json_names_provenance_and_drift_and_older_files_still_read() -> None:
    results = RunResults(model="judge")
    results.provenance = _provenance({"fp_1": 2})
    results.drift = drift_between(_provenance({"fp_0": 2}), results.provenance, "c" * 32)
    written = results.as_json()
    assert written["provenance"]["sent"]["sampling"] == {"temperature": 0.0, "max_tokens": 4096}
    assert written["provenance"]["served"]["system_fingerprints"] == {"fp_1": 2}
    assert written["drift"]["changed"] is True and "fp_0 -> fp_1" in written["drift"]["message"]
    assert RunResults.read(json.dumps(written)).as_json() == written
    older = RunResults(model="judge").as_json()
    assert "provenance" not in older and "drift" not in older  # nothing written for runs without them


# ----- through the CLI: two runs of one configuration, the endpoint changed in between -----------------


def _pairs() -> list[dict]:
    return [
        {
            "pair_id": f"pair-{i}",
            "original_id": i,
            "source": "mmlu-pro-law",
            "response_model": "gpt-4o-2024-05-13",
            "question": f"Question {i}: which answer is right?",
            "response_A": f"Answer A to pair {i}: {i * 7 + 1}.",
            "response_B": f"Answer B to pair {i}: {i * 7 + 2}.",
            "label": "A>B" if i % 2 == 0 else "B>A",
        }
        for i in range(8)
    ]


@pytest.mark.slow
def test_history_and_compare_show_a_changed_fingerprint_with_unchanged_accuracy(run_cli, tmp_path):
    pairs = _pairs()
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(p) + "\n" for p in pairs))
    db_url = f"sqlite:///{tmp_path}/history.db"
    wide = {"COLUMNS": "250"}
    with FakeOpenAIServer() as probe:  # one endpoint address for both runs: one configuration
        port = probe.port

    def run(name: str, fingerprint: str, *extra: str) -> dict:
        with FakeOpenAIServer(
            labelled_responder(pairs),
            port=port,
            models={"judge"},
            served_model="judge-0611",
            system_fingerprint=fingerprint,
        ) as server:
            proc = run_cli(
                "run",
                "--model",
                "judge",
                "--data-path",
                str(data),
                "--base-url",
                server.base_url,
                "--db-url",
                db_url,
                "--result-path",
                f"{name}/results.json",
                "--output-dir",
                name,
                "--no-progress",
                *extra,
                env=wide,
            )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        return json.loads((tmp_path / name / "results.json").read_text())

    first = run("a", "fp_aaaa")
    assert first["provenance"]["served"] == {
        "answers": 16,
        "models": {"judge-0611": 16},
        "system_fingerprints": {"fp_aaaa": 16},
        "model_entry": {"id": "judge", "created": 0, "owned_by": "fake-openai"},
    }
    sent = first["provenance"]["sent"]
    assert sent["provider"] == "openai" and sent["endpoint"] == f"http://127.0.0.1:{port}/v1"
    assert sent["sampling"] == {"temperature": 0.0, "max_tokens": 4096} and len(sent["template_hash"]) == 16
    assert "drift" not in first  # no baseline yet
    # the same judge, the same accuracy, another fingerprint; paid again (`--cache refresh`)
    second = run("b", "fp_bbbb", "--cache", "refresh")
    assert second["overall_accuracy"]["accuracy"] == first["overall_accuracy"]["accuracy"] == 1.0
    assert second["regression"]["regressed"] is False
    drift = second["drift"]
    assert drift["changed"] is True and drift["baseline_run_id"] == first["run"]["run_id"]
    assert drift["served"] == [{"field": "system_fingerprint", "before": "fp_aaaa", "after": "fp_bbbb"}]
    assert drift["sent"] == []
    # another configuration: the same judge at another temperature
    third = run("c", "fp_cccc", "--temperature", "0.5")

    history = run_cli("history", "--db-url", db_url, env=wide)
    assert history.returncode == 0, history.stderr
    text = " ".join(" ".join(row[-1].split()) for row in table_rows(history.stdout))  # "endpoint said"
    assert "judge-0611 fp_aaaa" in text and "judge-0611 fp_bbbb" in text
    assert "CHANGED: the endpoint changed: system_fingerprint fp_aaaa -> fp_bbbb" in text
    rows = json.loads(run_cli("history", "--db-url", db_url, "--format", "json").stdout)
    by_id = {row["run_id"]: row for row in rows}
    assert by_id[second["run"]["run_id"]]["drift"].startswith("the endpoint changed: system_fingerprint")
    assert by_id[first["run"]["run_id"]]["drift"] is None
    assert by_id[first["run"]["run_id"]]["served_as"] == "judge-0611 fp_aaaa"

    compare = run_cli("compare", first["run"]["run_id"], second["run"]["run_id"], "--db-url", db_url, env=wide)
    assert compare.returncode == 0, compare.stderr
    assert "endpoint said differently (A -> B): system_fingerprint fp_aaaa -> fp_bbbb" in compare.stdout
    assert "sent differently" not in compare.stdout
    assert "+0.00" in compare.stdout  # beside an unchanged accuracy
    # another temperature: the sent fields that differ are named
    other = run_cli("compare", first["run"]["run_id"], third["run"]["run_id"], "--db-url", db_url, "--format", "json")
    comparison = json.loads(other.stdout)
    assert {c["field"] for c in comparison["sent_changes"]} == {"sampling.temperature"}
    assert comparison["sent_changes"][0]["before"] == "0.0" and comparison["sent_changes"][0]["after"] == "0.5"


# ----- two nights on a real Prefect server: the endpoint changed behind the same model name -------------


@pytest.mark.slow
def test_a_new_fingerprint_behind_the_same_name_is_caught_by_the_night(
    prefect_server, judgebench_repo, gpt4o_pairs, tmp_path, monkeypatch, run_cli, release_prefect_workers
):
    """Night 1: the endpoint answers right, as `fp_night1`. Night 2: the same model name, the same URL,
    now answering wrong and saying `fp_night2`. The second night regresses, and its regression event,
    the night's artifact and `history` name the changed fingerprint."""
    from datetime import datetime, timezone

    import yaml

    from judgebench_flows.judging.matrix import cell_name
    from judgebench_flows.testing.oracle import oracle_responder
    from tests.conftest import GPT4O_FILE

    url, sha = judgebench_repo
    db_url = f"sqlite:///{tmp_path}/history.db"
    monkeypatch.setenv("DRIFT_KEY", CANARY_KEY)
    cell = cell_name("vanilla", "judge-d", GPT4O_FILE)

    def matrix(base_url: str, **options) -> str:
        path = tmp_path / "matrix.yaml"
        document = {
            "judge_types": ["vanilla"],
            "data_files": [GPT4O_FILE],
            "repo_url": url,
            "ref": sha,
            "db_url": db_url,
            "output_root": str(tmp_path / "nightly"),
            "max_samples": 6,
            "concurrency": 4,
            "models": [{"model": "judge-d", "base_url": base_url, "api_key_env": "DRIFT_KEY"}],
            # a 6-pair night's per-night test at the 1% it had before the sequential test took half the
            # night's false-alarm budget (issue 60): the night's rate at 4%
            "options": {
                "cache_dir": str(tmp_path / "cache"),
                "bootstrap_resamples": 200,
                "alert_false_alarm_rate": 0.04,
                **options,
            },
        }
        path.write_text(yaml.safe_dump(document))
        return str(path)

    right = oracle_responder(gpt4o_pairs, VERDICTS["vanilla"])
    with FakeOpenAIServer(right, api_key=CANARY_KEY, models={"judge-d"}, system_fingerprint="fp_night1") as server:
        port = server.port
        first = run_night(matrix(server.base_url))
    assert first.is_completed(), repr(first)

    since = datetime.now(timezone.utc)
    wrong = oracle_responder(gpt4o_pairs, VERDICTS["vanilla"], wrong=True)
    with FakeOpenAIServer(
        wrong, api_key=CANARY_KEY, models={"judge-d"}, system_fingerprint="fp_night2", port=port
    ) as server:
        # the default cache settings: a night reuses only its own flow run's answers, so it asks tonight
        second = run_night(matrix(server.base_url))
        assert server.answered == 12  # measured tonight: 6 pairs in both orders, none replayed from night 1
    assert second.is_failed() and "regressed" in (second.message or ""), repr(second)

    results = json.loads((tmp_path / "nightly" / cell / "latest" / "results.json").read_text())
    assert results["regression"]["regressed"] is True
    assert results["run"]["cache"]["answers"] == 0 and results["run"]["cache"]["reuse"] == "this flow run"
    assert "system_fingerprint fp_night1 -> fp_night2" in results["regression"]["message"]
    assert results["drift"]["served"] == [{"field": "system_fingerprint", "before": "fp_night1", "after": "fp_night2"}]

    report = (tmp_path / "nightly" / cell / "latest" / "report.html").read_text()
    assert "Endpoint CHANGED" in report and "system_fingerprint fp_night1 -&gt; fp_night2" in report
    assert "fp_night2 (12)" in report  # what the endpoint said tonight, counted

    [event] = run_events({"name": ["judgebench.run.regressed"]}, since, "judge-d")
    payload = event["payload"]
    assert payload["drift"]["changed"] is True
    assert payload["drift"]["served"][0] == {"field": "system_fingerprint", "before": "fp_night1", "after": "fp_night2"}
    assert "fp_night1 -> fp_night2" in payload["message"]
    assert payload["served"]["system_fingerprints"] == {"fp_night2": 12}

    summary = night_summary(second)
    assert "**Endpoint changed**" in summary and "system_fingerprint fp_night1 -> fp_night2" in summary, summary

    history = run_cli("history", "--db-url", db_url, "--format", "json")
    rows = json.loads(history.stdout)
    assert [row["served_as"] for row in rows] == ["judge-d fp_night2", "judge-d fp_night1"]
    assert "system_fingerprint fp_night1 -> fp_night2" in rows[0]["drift"] and rows[0]["status"] == "regressed"
    for text in (json.dumps(results), json.dumps(payload), summary, history.stdout, report):
        assert CANARY_KEY not in text


def _results_with(status_regressed: bool, changed: bool) -> RunResults:
    results = RunResults(model="judge")
    results.run.run_id = "r" * 32
    results.provenance = _provenance({"fp_2": 4})
    results.drift = drift_between(_provenance({"fp_1" if changed else "fp_2": 4}), results.provenance, "b" * 32)
    document = results.as_json()
    document["regression"] = {
        "delta": -0.5 if status_regressed else 0.0,
        "ci_low": -0.6 if status_regressed else -0.1,
        "ci_high": -0.4 if status_regressed else 0.1,
        "regressed": status_regressed,
        "message": "a regression" if status_regressed else "within noise",
    }
    return RunResults.model_validate(document)


def test_the_event_carries_the_drift_and_a_held_accuracy_with_a_new_fingerprint_is_its_own_event() -> None:
    from judgebench_flows.core.config import RunConfig
    from judgebench_flows.flows.events import RunTrace, drifted_event, run_event

    config = RunConfig(model="judge", base_url="http://127.0.0.1:8000/v1")
    held = run_event(config, _results_with(False, True), RunTrace())
    assert held["event"] == "judgebench.run.completed"
    assert held["payload"]["drift"]["served"] == [{"field": "system_fingerprint", "before": "fp_1", "after": "fp_2"}]
    assert held["payload"]["served"]["system_fingerprints"] == {"fp_2": 4}
    drifted = drifted_event(held)
    assert drifted is not None and drifted["event"] == "judgebench.run.drifted"
    assert drifted["resource"] == held["resource"] and drifted["payload"] is held["payload"]
    # a regression's own event names it; an unchanged endpoint is no news
    assert drifted_event(run_event(config, _results_with(True, True), RunTrace())) is None
    assert drifted_event(run_event(config, _results_with(False, False), RunTrace())) is None


def test_the_alert_names_the_changed_fingerprint() -> None:
    import jinja2

    from judgebench_flows.core.config import RunConfig
    from judgebench_flows.deployments.automations import BODY, SUBJECT, alert_automation
    from judgebench_flows.flows.events import RunTrace, run_event

    expected = alert_automation(__import__("uuid").UUID(int=0)).trigger.expect
    assert {"judgebench.run.regressed", "judgebench.run.failed", "judgebench.run.drifted"} <= set(expected)
    event = run_event(
        RunConfig(model="judge", base_url="http://127.0.0.1:8000/v1"), _results_with(False, True), RunTrace()
    )
    context = {"event": {"event": "judgebench.run.drifted", "resource": event["resource"], "payload": event["payload"]}}
    body = jinja2.Template(BODY).render(**context)
    assert "endpoint changed: system_fingerprint fp_1 -> fp_2" in body
    assert jinja2.Template(SUBJECT).render(**context).startswith("JudgeBench drifted: ")


def test_the_nights_summary_lists_drift_even_when_accuracy_held() -> None:
    from judgebench_flows.flows.nightly import summary_markdown
    from judgebench_flows.flows.outcomes import CellOutcome

    cells = [
        CellOutcome(name="a", status="completed", result_path="a", drift="the endpoint changed: model x -> y"),
        CellOutcome(name="b", status="completed", result_path="b"),
    ]
    summary = summary_markdown(cells)
    assert "**Endpoint changed** under 1 configuration:" in summary
    assert "- a (completed): the endpoint changed: model x -> y" in summary and "- b" not in summary

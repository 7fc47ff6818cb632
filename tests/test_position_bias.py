"""Position bias over time: each run's order consistency and first-position rate are stored, listed by
`history`, and a significant change between consecutive runs of a configuration is reported as a
regression (status, exit 1, `judgebench.run.regressed`); the same judgments judged again report nothing.

The end-to-end test runs `judgebench run` three times against a real OpenAI-compatible server on
loopback: a judge wrong (in both orders) on 12 of 24 pairs, the same judge again, and the same judge
turned order-biased on those 12 pairs (it names the response shown first, whatever the order), which
leaves its accuracy unchanged: only the position bias can report it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa

from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._helpers import run_events
from tests.conftest import VERDICTS
from tests.test_history_cli import _pairs

# ---------------------------------------------------------------- plain recomputation from the JSONL


def swap(decision):
    return {"A>B": "B>A", "B>A": "A>B"}.get(decision, decision)


def recompute(jsonl: Path) -> tuple[float | None, float | None]:
    """Order consistency and first-position rate of an outputs file, from its recorded decisions:
    a pair is consistent when both orders gave a valid verdict and the second, mapped back, equals the
    first; a verdict is for the first shown response when it says "A>B" in the order it was asked."""
    consistent = both = first = sided = 0
    for line in jsonl.read_text().splitlines():
        judgments = json.loads(line)["judgments"]
        decisions = [j["decision"] if j and j.get("status", "ok") == "ok" else None for j in judgments]
        for decision in decisions:
            if decision in ("A>B", "B>A"):
                sided += 1
                first += decision == "A>B"
        if len(decisions) == 2 and all(d in ("A>B", "B>A", "A=B") for d in decisions):
            both += 1
            consistent += decisions[0] == swap(decisions[1])
    return (consistent / both if both else None, first / sided if sided else None)


# ---------------------------------------------------------------- the check on recorded verdicts


class V:
    """A verdict as the metric reads it."""

    def __init__(self, pair_id: str, order: int, label: str, shown_decision: str | None):
        self.pair_id, self.order, self.label, self.source, self.category = pair_id, order, label, "s", "mmlu-pro"
        self.status = "ok" if shown_decision else "failed"
        decision = shown_decision or ""
        self.decision_for_pair = swap(decision) if order else decision


def verdicts(n: int, wrong: set[int], biased: set[int] = frozenset()) -> list[V]:
    """n pairs labelled A>B; a consistent judge, wrong on `wrong`; on `biased` it names the first shown."""
    out = []
    for i in range(n):
        for order in (0, 1):
            if i in biased:
                shown = "A>B"
            else:
                pair_decision = "B>A" if i in wrong else "A>B"
                shown = swap(pair_decision) if order else pair_decision
            out.append(V(f"p{i:03d}", order, "A>B", shown))
    return out


def test_first_position_rate_and_consistency_count_as_defined() -> None:
    from judgebench_flows.scoring.metrics import consistency, pair_scores

    figures = consistency(pair_scores(verdicts(100, wrong=set(range(20)), biased=set(range(50, 90))))).model_dump()
    # 60 consistent pairs (one first-shown vote each), 40 biased pairs (two each): 140 of 200 verdicts
    assert figures["consistency"] == 0.6 and figures["first_position_rate"] == 0.7
    assert (figures["first_position_verdicts"], figures["sided_verdicts"]) == (140, 200)
    tie = [V("t", 0, "A>B", "A=B"), V("t", 1, "A>B", "B>A"), V("f", 0, "A>B", None), V("f", 1, "A>B", "A>B")]
    figures = consistency(pair_scores(tie)).model_dump()
    assert (figures["first_position_verdicts"], figures["sided_verdicts"]) == (1, 2)  # ties, failures left out


def _bias(baseline, candidate):
    from judgebench_flows.scoring.alerts import AlertPlan
    from judgebench_flows.scoring.regression import compare_with_recent

    return compare_with_recent(candidate, [("b" * 32, baseline)], AlertPlan()).position_bias


def test_order_bias_on_half_the_pairs_is_reported_and_a_rerun_is_not() -> None:
    from judgebench_flows.scoring.metrics import pair_scores

    baseline = pair_scores(verdicts(60, wrong=set(range(10))))
    same = _bias(baseline, pair_scores(verdicts(60, wrong=set(range(10))))).model_dump()
    assert same["changed"] is False
    # judged exactly alike: no change at all, so no evidence of one (p at least a coin's)
    assert same["consistency_test"]["p_value"] >= 0.5 and same["first_position_test"]["p_value"] >= 0.5
    biased = pair_scores(verdicts(60, wrong=set(range(10)), biased=set(range(30, 60))))
    change = _bias(baseline, biased).model_dump()
    assert change["changed"] is True and change["message"].startswith("position bias got worse")
    assert change["order_consistency"] == {"baseline": 1.0, "candidate": 0.5}
    assert change["first_position_rate"] == {"baseline": 0.5, "candidate": 0.75}
    assert change["consistency_test"]["p_value"] < change["alpha"]
    assert (change["consistency_test"]["became_inconsistent"], change["consistency_test"]["became_consistent"]) == (
        30,
        0,
    )
    # a couple of biased pairs is within noise
    slight = pair_scores(verdicts(60, wrong=set(range(10)), biased={40, 41}))
    assert _bias(baseline, slight).changed is False
    # a bias that got better is never a regression: the biased run as the baseline, the fair one after it
    assert _bias(biased, baseline).changed is False


def _store(engine, run_id: str, records: list[V], started: datetime) -> None:
    from judgebench_flows.data import db

    db.save_run(
        engine,
        run_id=run_id,
        config_key="cfg",
        judge_type="arena_hard",
        model="judge",
        status="completed",
        started=started,
        config_json="{}",
    )
    db.save_judgments(
        engine,
        [
            {
                "run_id": run_id,
                "pair_id": v.pair_id,
                "order_index": v.order,
                "source": v.source,
                "category": v.category,
                "label": v.label,
                "status": v.status,
                "decision": swap(v.decision_for_pair) if v.order else v.decision_for_pair,
                "decision_for_pair": v.decision_for_pair,
            }
            for v in records
        ],
    )


def test_the_check_is_an_option_on_by_default(tmp_path) -> None:
    from judgebench_flows.core.config import RunConfig
    from judgebench_flows.core.records import JudgmentRecord
    from judgebench_flows.data import db
    from judgebench_flows.scoring.metrics import Tally
    from judgebench_flows.scoring.regression import regression_against_baseline

    engine = db.open_database(f"sqlite:///{tmp_path / 'r.db'}")
    _store(engine, "b" * 32, verdicts(40, wrong=set(range(20))), datetime(2026, 11, 1, tzinfo=timezone.utc))
    biased = verdicts(40, wrong=set(range(20)), biased=set(range(20)))  # wrong pairs made biased: same accuracy
    records = [
        JudgmentRecord(
            pair_id=v.pair_id,
            order=v.order,
            source=v.source,
            category=v.category,
            label=v.label,
            status=v.status,
            decision=swap(v.decision_for_pair) if v.order else v.decision_for_pair,
            decision_for_pair=v.decision_for_pair,
            judge_model="judge",
        )
        for v in biased
    ]
    tally = Tally.of(records)
    config = RunConfig(model="judge", judge_type="arena_hard")
    assert config.position_bias_check is True
    checked = regression_against_baseline(engine, config, "cfg", "c" * 32, tally)
    assert checked is not None
    check = checked.model_dump()
    assert check["accuracy_regressed"] is False and check["delta"] == 0
    assert check["regressed"] is True and check["position_bias"]["changed"] is True
    assert "position bias got worse" in check["message"]
    off = config.model_copy(update={"position_bias_check": False})
    unchecked = regression_against_baseline(engine, off, "cfg", "c" * 32, tally)
    assert unchecked is not None
    check = unchecked.model_dump()
    assert check["regressed"] is False and "position_bias" not in check


def test_a_database_from_before_the_columns_keeps_working(tmp_path) -> None:
    """A runs table without the two columns: `history` adds them (NULL for old runs) and lists the run."""
    import subprocess
    import sys

    from judgebench_flows.data import db

    url = f"sqlite:///{tmp_path / 'old.db'}"
    old = sa.MetaData()
    runs = db.RunRow.__table__  # type: ignore[attr-defined]
    sa.Table(
        runs.name,
        old,
        *[c.copy() for c in runs.columns if c.name not in ("order_consistency", "first_position_rate")],
    )
    engine = sa.create_engine(url)
    old.create_all(engine)
    with engine.begin() as connection:
        connection.execute(
            sa.text(
                "INSERT INTO runs (run_id, config_key, judge_type, model, status, started, config_json) "
                "VALUES ('0ld0', 'cfg', 'vanilla', 'm', 'completed', '2025-01-01 00:00:00', '{}')"
            )
        )
    engine.dispose()
    result = subprocess.run(
        [sys.executable, "-m", "judgebench_flows.cli.main", "history", "--db-url", url, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    [row] = json.loads(result.stdout)
    assert row["run_id"] == "0ld0" and row["order_consistency"] is None and row["first_position_rate"] is None


# ---------------------------------------------------------------- end to end


WRONG = {
    f"pair-{c}-{i}" for c in ("mmlu-pro", "livebench-reasoning", "livebench-math", "livecodebench") for i in (0, 1, 2)
}


def _responder(pairs: list[dict], biased: bool) -> Callable[[dict], str]:
    """Right on every pair but WRONG (in both orders); with `biased`, names the response shown first on
    the WRONG pairs instead (still never right in both orders: the accuracy does not move)."""

    def respond(body: dict) -> str:
        text = "\n".join(m["content"] for m in body["messages"] if m["role"] == "user")
        for pair in pairs:
            ia, ib = text.find(pair["response_A"]), text.find(pair["response_B"])
            if ia >= 0 and ib >= 0:
                if biased and pair["pair_id"] in WRONG:
                    return VERDICTS["arena_hard"](True)
                first_is_better = (ia < ib) == (pair["label"] == "A>B")
                return VERDICTS["arena_hard"](first_is_better != (pair["pair_id"] in WRONG))
        return "I cannot tell."

    return respond


def _events(run_ids: list[str], since: datetime) -> dict[str, dict]:
    """run id -> its `judgebench.run.*` event in the Prefect server's feed."""

    def of_runs(events: list[dict]) -> dict[str, dict]:
        return {e["payload"].get("run_id"): e for e in events if e["payload"].get("run_id") in run_ids}

    return of_runs(
        run_events({"prefix": ["judgebench.run."]}, since, done=lambda found: len(of_runs(found)) == len(run_ids))
    )


@pytest.mark.slow
def test_a_judge_turned_order_biased_is_reported_and_a_rerun_is_not(run_cli, prefect_server, tmp_path):
    since = datetime.now(timezone.utc) - timedelta(seconds=5)
    pairs = _pairs()
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(p) + "\n" for p in pairs))
    db_url = f"sqlite:///{tmp_path}/history.db"
    with FakeOpenAIServer() as probe:  # one endpoint address: the endpoint is part of a configuration
        port = probe.port

    def run(name: str, biased: bool, *extra: str):
        with FakeOpenAIServer(_responder(pairs, biased), port=port) as server:
            proc = run_cli(
                "run",
                "--model",
                "judge-bias",
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
                "--no-report",
                "--no-cache",
                *extra,
            )
        return proc, json.loads((tmp_path / name / "results.json").read_text()) | {"dir": tmp_path / name}

    # --prices adds a shutdown date: the run says so in one line before it starts
    soon = (datetime.now(timezone.utc).date() + timedelta(days=10)).isoformat()
    prices = tmp_path / "prices.json"
    prices.write_text(
        json.dumps({"models": {"judge-bias": {"input_per_mtok": 1, "output_per_mtok": 1, "shutdown_date": soon}}})
    )
    first, results_1 = run("first", False, "--prices", str(prices))
    assert first.returncode == 0, first.stderr[-3000:]
    notice = f"warning: judge-bias shuts down in 10 days ({soon}, its provider's announced date): plan a replacement"
    assert notice in first.stderr.splitlines()
    again, results_2 = run("again", biased=False)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert results_2["regression"]["regressed"] is False
    assert results_2["regression"]["position_bias"]["changed"] is False
    biased, results_3 = run("biased", biased=True)
    assert biased.returncode == 1, biased.stdout[-2000:] + biased.stderr[-2000:]
    check = results_3["regression"]
    assert check["accuracy_regressed"] is False and check["delta"] == 0  # 12 of 24 right, as before
    assert check["regressed"] is True and check["position_bias"]["changed"] is True
    assert check["position_bias"]["order_consistency"] == {"baseline": 1.0, "candidate": 0.5}
    assert check["position_bias"]["first_position_rate"] == {"baseline": 0.5, "candidate": 0.75}
    assert "position bias got worse" in " ".join(biased.stdout.split())  # wrapped at the terminal width

    history = run_cli("history", "--db-url", db_url, "--format", "json")
    assert history.returncode == 0, history.stderr
    rows = {row["run_id"]: row for row in json.loads(history.stdout)}
    for results in (results_1, results_2, results_3):
        row = rows[results["run"]["run_id"]]
        [jsonl] = results["dir"].glob("*,judge_name=arena_hard,judge_model=judge-bias.jsonl")
        expected = recompute(jsonl)
        assert (row["order_consistency"], row["first_position_rate"]) == pytest.approx(expected), row
    assert rows[results_3["run"]["run_id"]]["status"] == "regressed"
    assert rows[results_2["run"]["run_id"]]["status"] == "completed"
    assert expected == (0.5, 0.75)  # the biased run's, recomputed
    table = run_cli("history", "--db-url", db_url, env={"COLUMNS": "250"})
    assert "1st pos" in table.stdout and "75.00" in table.stdout

    ids = [r["run"]["run_id"] for r in (results_2, results_3)]
    events = _events(ids, since)
    assert events[ids[0]]["event"] == "judgebench.run.completed"
    assert events[ids[1]]["event"] == "judgebench.run.regressed"
    assert events[ids[1]]["payload"]["change"]["position_bias"]["changed"] is True
    assert "position bias got worse" in events[ids[1]]["payload"]["message"]


def test_the_report_charts_position_bias_beside_accuracy() -> None:
    from judgebench_flows.scoring.report import build_context, render_report

    history = [
        {"run_id": f"r{i}", "started": f"2026-11-0{i + 1}T02:00:00+00:00", "accuracy": 0.7, "ci_low": 0.65}
        | {"ci_high": 0.75, "order_consistency": 0.9, "first_position_rate": 0.5}
        for i in range(3)
    ]
    history.append({"run_id": "old", "started": "2026-10-01T02:00:00+00:00", "accuracy": 0.7})  # before the columns
    results = {
        "overall_accuracy": {"accuracy": 0.7, "ci_low": 0.65, "ci_high": 0.75},
        "consistency": {"consistency": 0.5, "first_position_rate": 0.75, "consistent_pairs": 5},
        "run": {"run_id": "now", "started": "2026-11-05T02:00:00+00:00"},
    }
    context = build_context(results, [], history)
    series = {s["key"]: s for s in context["bias_trend"]["series"]}
    assert len(series["order_consistency"]["points"]) == 4 and series["order_consistency"]["points"][-1]["current"]
    assert series["first_position_rate"]["points"][-1]["title"].endswith("first-position rate 75.0%")
    assert context["consistency"]["first_position"] == "75.0%"
    html = render_report(results, [], history)
    assert 'id="bias-chart"' in html and 'id="trend-chart"' in html
    assert build_context(results | {"consistency": {}}, [], history[-1:])["bias_trend"] is None

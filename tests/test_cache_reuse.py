"""Which cached answers a run reuses (issue 41): a night's or a deployment run's own flow run's only, any
run's from the command line, none older than --cache-max-age; and every run says where its answers came from.

The call cache's keys stay as they are (tests/test_cache_identity.py): reuse is limited by the stored
row's payer (`call_cache.paid_by` -> `runs.root_flow_run_id`) and age (`call_cache.created`). The nights on
the nightly deployment, killed and rescheduled, are in tests/test_operations.py.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from judgebench_flows.calls.cache import CallCache
from judgebench_flows.core.completion import Completion
from judgebench_flows.core.config import build_config
from judgebench_flows.core.errors import UserError
from judgebench_flows.data import db
from judgebench_flows.scoring.run_results import CacheSource, CacheUse
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._helpers import run_command
from tests.conftest import CANARY_KEY, GPT4O_FILE, VERDICTS, oracle_responder


def _cache_with_two_nights(tmp_path: Path):
    """A results database whose call cache holds key `k1` paid by last night's run and `k2` by tonight's."""
    engine = db.open_database(f"sqlite:///{tmp_path}/cache.db")
    for run_id, root in (("a" * 32, "night-1"), ("b" * 32, "night-2")):
        db.start_run(engine, run_id, config_key="c", judge_type="vanilla", model="m", root_flow_run_id=root)
    now = db.utcnow()
    rows = [
        {"key": "k1", "model": "m", "response": "old", "created": now - timedelta(days=2), "paid_by": "a" * 32},
        {"key": "k2", "model": "m", "response": "new", "created": now, "paid_by": "b" * 32},
    ]
    db.cache_put_many(engine, rows)
    return engine


def _hits(cache: CallCache) -> dict[str, str | None]:
    async def read() -> dict[str, str | None]:
        await cache.prefetch(["k1", "k2"])
        return {key: getattr(await cache.lookup(key), "text", None) for key in ("k1", "k2", "k3")}

    return asyncio.run(read())


def test_a_night_reads_only_what_its_own_flow_run_paid(tmp_path):
    engine = _cache_with_two_nights(tmp_path)
    anyone = CallCache(engine, "use", "m")
    assert _hits(anyone) == {"k1": "old", "k2": "new", "k3": None}
    assert anyone.sources == {"a" * 32: 1, "b" * 32: 1}  # each hit under the run that paid it
    tonight = CallCache(engine, "use", "m", reuse=db.CacheReuse(scope="night-2"))
    assert _hits(tonight) == {"k1": None, "k2": "new", "k3": None}
    assert CallCache(engine, "use", "m", reuse=db.CacheReuse(scope="night-3")).sources == {}
    assert _hits(CallCache(engine, "use", "m", reuse=db.CacheReuse(scope="night-3"))) == dict.fromkeys(
        ("k1", "k2", "k3")
    )


def test_answers_older_than_the_maximum_age_are_not_read(tmp_path):
    engine = _cache_with_two_nights(tmp_path)
    day_old = db.CacheReuse(newer_than=db.utcnow() - timedelta(days=1))
    assert _hits(CallCache(engine, "use", "m", reuse=day_old)) == {"k1": None, "k2": "new", "k3": None}


def test_a_paid_answer_replaces_the_refused_one_under_the_same_key(tmp_path):
    """A night that may not reuse yesterday's answer pays again; its answer and payer replace the row."""
    engine = _cache_with_two_nights(tmp_path)
    tonight = CallCache(engine, "use", "m", paid_by="b" * 32, reuse=db.CacheReuse(scope="night-2"))

    async def pay() -> None:
        tonight.save([Completion("paid tonight", key="k1")])
        await tonight.flush()

    asyncio.run(pay())
    assert _hits(CallCache(engine, "use", "m", reuse=db.CacheReuse(scope="night-2")))["k1"] == "paid tonight"


@pytest.mark.parametrize(
    ("given", "seconds"), [("90s", 90), ("30m", 1800), ("12h", 43200), ("7d", 604800), ("2w", 1209600), ("45", 45)]
)
def test_the_maximum_age_is_one_setting(given, seconds):
    config = build_config(model="m", cache_max_age=given)
    assert config.endpoint.max_age_seconds == seconds
    assert config.model_dump()["cache_max_age"] == given  # flat, as the CLI and the matrix give it


@pytest.mark.parametrize("given", ["7 days", "-1d", "0s", "d"])
def test_a_bad_maximum_age_names_the_option(given):
    with pytest.raises(UserError, match="^--cache-max-age: "):
        build_config(model="m", cache_max_age=given)


def test_the_line_says_where_the_answers_came_from():
    started = "2026-11-26T02:00:00+00:00"
    replay = CacheUse(answers=20, calls=20, sources=[CacheSource(run_id="ab" * 16, started=started, answers=20)])
    assert replay.line() == (
        "answers: all 20 from the call cache, none measured now: 20 from run abababab of 2026-11-26 (reuse: any run)"
    )
    resumed = CacheUse(
        reuse="this flow run",
        max_age="7d",
        answers=6,
        calls=20,
        sources=[CacheSource(run_id="cd" * 16, started=started, answers=6, same_flow_run=True)],
    )
    assert resumed.line() == (
        "answers: 6 of 20 from the call cache: 6 from this flow run, run cdcdcdcd of 2026-11-26 "
        "(reuse: this flow run, at most 7d old)"
    )
    assert CacheUse(reuse="this flow run", calls=20).line() == (
        "answers: all 20 paid now, none from the call cache (reuse: this flow run)"
    )


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    import os

    env = {**os.environ, "OPENAI_API_KEY": CANARY_KEY, "JUDGEBENCH_CACHE_DIR": str(cwd / "clones")}
    done = subprocess.run(
        [sys.executable, "-m", "judgebench_flows.cli.main", *args], cwd=cwd, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.mark.slow
def test_a_repeated_command_says_where_its_answers_came_from_and_pays_what_is_too_old(
    prefect_server, judgebench_repo, gpt4o_pairs, tmp_path
):
    samples = 4
    calls = 2 * samples
    with FakeOpenAIServer(oracle_responder(gpt4o_pairs, VERDICTS["arena_hard"])) as server:

        def run(*extra: str) -> tuple[dict, str]:
            server.reset_counters()
            args = run_command(
                judgebench_repo, server, tmp_path, "--no-report", *extra, model="judge-model", max_samples=samples
            )
            done = _run(args, tmp_path)
            return json.loads((tmp_path / "results" / "judgebench.json").read_text()), done.stdout

        first, _ = run()
        assert server.answered == calls and first["run"]["cache"]["answers"] == 0
        assert first["run"]["cache"]["reuse"] == "any run"

        again, said = run()
        assert server.requests == 0  # the command line reuses any run's answers, as before
        today = first["run"]["started"][:10]
        assert (
            f"answers: all {calls} from the call cache, none measured now: {calls} from run "
            f"{first['run']['run_id'][:8]} of {today}" in " ".join(said.split())
        ), said
        [source] = again["run"]["cache"]["sources"]
        assert (source["run_id"], source["answers"], source["same_flow_run"]) == (first["run"]["run_id"], calls, False)

        engine = db.open_database(f"sqlite:///{tmp_path}/judgebench.db")  # the answers are two days old now
        with engine.begin() as connection:
            connection.execute(sa.update(db.CallCacheRow.__table__).values(created=db.utcnow() - timedelta(days=2)))
        aged, said = run("--cache-max-age", "1d")
        assert server.answered == calls, "answers older than --cache-max-age are paid again"
        assert aged["run"]["cache"] == {
            "reuse": "any run",
            "max_age": "1d",
            "answers": 0,
            "calls": calls,
            "sources": [],
        }
        assert "none from the call cache (reuse: any run, at most 1d old)" in " ".join(said.split())

        run("--cache-max-age", "1d")
        assert server.requests == 0  # what was paid again is young enough


def test_a_matrix_takes_the_maximum_age_and_reuse_as_run_options():
    from judgebench_flows.judging.matrix import parse_matrix

    matrix = parse_matrix(
        {
            "judge_types": ["vanilla"],
            "models": ["m"],
            "data_files": [GPT4O_FILE],
            "options": {"cache_max_age": "7d", "cache_reuse": "any"},
        }
    )
    [entry] = matrix.entries()
    assert (entry.config.endpoint.cache_max_age, entry.config.endpoint.cache_reuse) == ("7d", "any")
    with pytest.raises(UserError, match="cache_max_age"):
        parse_matrix(
            {
                "judge_types": ["vanilla"],
                "models": ["m"],
                "data_files": [GPT4O_FILE],
                "options": {"cache_max_age": "x"},
            },
            "m.yaml",
        )


def test_the_nights_summary_says_where_each_configurations_answers_came_from():
    from judgebench_flows.flows.nightly import CellOutcome, summary_markdown

    line = CacheUse(reuse="this flow run", calls=20).line()
    text = summary_markdown([CellOutcome(name="vanilla__m", status="completed", result_path="r.json", from_cache=line)])
    assert f"- vanilla__m: {line}" in text

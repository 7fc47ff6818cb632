"""The same configuration started twice at once against one results database (two operators, a schedule
and a manual run): the second waits for the first, saying so in one line, then answers everything from the
call cache; no call is paid twice. Before this, two such runs paid 509 of 700 calls twice.

Real parts: two `judgebench run` subprocesses against the session's Prefect server and one SQLite
database, the bundled OpenAI-compatible endpoint. The lock itself is also checked on PostgreSQL when one
answers on 127.0.0.1:5432.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid

import sqlalchemy as sa

from judgebench_flows.data import db
from judgebench_flows.data.run_lock import try_hold
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._runs import GPT4O_PATH, run_argv
from tests.conftest import CANARY_KEY, requires_shared
from tests.test_db import postgresql_url  # noqa: F401 - a fixture

VERDICT = "My final verdict is [[A>B]]"
PAIRS = 15  # 30 calls


@requires_shared
def test_two_identical_runs_at_once_pay_no_call_twice(tmp_path, prefect_server):
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(GPT4O_PATH.read_text().splitlines(keepends=True)[:PAIRS]))
    env = {**os.environ, "OPENAI_API_KEY": CANARY_KEY, "JUDGEBENCH_CACHE_DIR": str(tmp_path / "cache")}
    database = f"sqlite:///{tmp_path / 'r.db'}"
    # 30 calls, 2 at a time, 0.5 s each: the first run holds its lock for about 8 s, longer than a loaded
    # machine delays the second's start (at 0.1 s a call the runs missed each other in a full suite).
    with FakeOpenAIServer(VERDICT, latency=0.5) as endpoint:
        runs = []
        for name in ("first", "second"):
            command = run_argv(
                endpoint.base_url, tmp_path / name, None, "--concurrency", "2", data_path=data, db_url=database
            )
            runs.append(
                subprocess.Popen(
                    command, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
                )
            )
            time.sleep(0.5)
        outcomes = [run.communicate(timeout=600) for run in runs]
        assert [run.returncode for run in runs] == [0, 0], [err[-2000:] for _, err in outcomes]
        assert max(endpoint.answered_keys().values()) == 1, "a call was paid twice"
        assert endpoint.answered == 2 * PAIRS
    said = [err for _, err in outcomes if "waiting for run" in err]
    assert len(said) == 1 and said[0].count("waiting for run") == 1, [err[-2000:] for _, err in outcomes]
    engine = db.open_database(database)
    with engine.connect() as connection:
        statuses = connection.execute(sa.text("select status from runs")).fetchall()
        locks = connection.execute(sa.text("select count(*) from run_locks")).scalar()
    assert sorted(s for (s,) in statuses) == ["completed", "completed"] and locks == 0


def lock_on(engine) -> None:
    key = f"key-{uuid.uuid4().hex[:8]}"
    assert try_hold(engine, key, "run-a") is None  # taken
    assert try_hold(engine, key, "run-a") is None  # its own: still held
    holder = try_hold(engine, key, "run-b")
    assert holder is not None and holder.run_id == "run-a"
    with engine.begin() as connection:  # run-a's process died long ago: its row ran out
        connection.execute(
            sa.text("update run_locks set expires = :t where config_key = :k"), {"t": "2000-01-01", "k": key}
        )
    assert try_hold(engine, key, "run-b") is None
    assert try_hold(engine, key, "run-a").run_id == "run-b"


def test_the_lock_is_taken_once_and_taken_over_when_its_holder_ran_out(tmp_path):
    lock_on(db.open_database(f"sqlite:///{tmp_path / 'l.db'}"))


def test_the_lock_holds_on_postgresql(postgresql_url):  # noqa: F811 - the fixture
    lock_on(db.open_database(postgresql_url))

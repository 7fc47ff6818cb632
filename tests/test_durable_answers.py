"""An answer received is never lost (issue 42): a write the results database refuses keeps its answers, in
memory (served to lookups, so a retry never asks again) and in an fsync'd journal under the cache dir,
which the database takes once it answers again, or the next run does.

Real parts: a PostgreSQL URL on a loopback port nobody listens on (the connection is refused for real),
a real SQLite database for the answers once the database is "back", real files for the journal.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import sqlalchemy as sa

from judgebench_flows.calls.cache import CallCache
from judgebench_flows.core.completion import Completion
from judgebench_flows.data import db
from judgebench_flows.data.journal import AnswerJournal, journal_dir
from judgebench_flows.data.outage import LOST_TIMEOUT_ENV, OUTAGE, DatabaseLost, connection_lost, patiently, run_wait


def refused_engine() -> sa.Engine:
    """An engine whose every connection is refused (a loopback port with no server behind it)."""
    pytest.importorskip("psycopg")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return sa.create_engine(f"postgresql+psycopg://nobody@127.0.0.1:{port}/none", connect_args={"connect_timeout": 2})


def answers(n: int, prefix: str = "k") -> list[Completion]:
    return [Completion(f"My final verdict is [[A>B]] {i}", 10 + i, 5, key=f"{prefix}{i:04d}") for i in range(n)]


def sqlite_engine(tmp_path: Path) -> sa.Engine:
    return db.open_database(f"sqlite:///{tmp_path / 'results.db'}")


def test_answers_the_database_refuses_are_journaled_served_and_replayed(tmp_path):
    journal = AnswerJournal(tmp_path / "journal", "run1")

    async def judge() -> CallCache:
        cache = CallCache(refused_engine(), "use", "judge", paid_by="run1", journal=journal)
        cache.save(answers(30))
        await cache.flush()  # durable: the journal holds them, though the database refused them
        assert journal.path.exists()
        lines = journal.path.read_text().splitlines()
        assert len(lines) == 30 and json.loads(lines[0])["paid_by"] == "run1"
        hit = await cache.lookup("k0007")  # a retry of the shard is answered from memory, nothing sent
        assert hit is not None and hit.cached and hit.text.endswith(" 7") and hit.prompt_tokens == 17
        assert cache.received("k0029") is not None  # also with --refresh-cache
        await cache.close()
        return cache

    cache = asyncio.run(judge())
    assert cache.holds == 30 and journal.path.exists()  # the database never came back: the journal stays

    engine = sqlite_engine(tmp_path)  # the next run, with its database back
    assert db.cache_replay(engine, journal.path.parent) == 30
    assert not journal.path.exists()
    rows = db.cache_get_many(engine, [f"k{i:04d}" for i in range(30)])
    assert len(rows) == 30 and rows["k0003"].paid_by == "run1" and rows["k0003"].prompt_tokens == 13


def test_a_refused_write_is_written_when_the_database_is_back_and_the_journal_goes(tmp_path):
    engine = sqlite_engine(tmp_path)
    journal = AnswerJournal(tmp_path / "journal", "run2")

    async def judge() -> CallCache:
        cache = CallCache(refused_engine(), "use", "judge", journal=journal)
        cache.save(answers(5))
        await cache.flush()
        assert journal.path.exists()
        cache.engine = engine  # the database answers again
        cache.save(answers(3, prefix="m"))
        for _ in range(100):
            if not cache.holds:
                break
            await asyncio.sleep(0.1)
        await cache.close()
        return cache

    cache = asyncio.run(judge())
    assert cache.holds == 0 and not journal.path.exists()
    assert len(db.cache_get_many(engine, ["k0000", "k0004", "m0002"])) == 3


def test_a_journal_held_by_a_live_writer_is_not_replayed(tmp_path):
    engine = sqlite_engine(tmp_path)
    journal = AnswerJournal(tmp_path / "journal", "live")
    journal.append([{"key": "x1", "model": "judge", "response": "r", "prompt_tokens": 1, "completion_tokens": 1}])
    assert db.cache_replay(engine, journal.path.parent) == 0 and journal.path.exists()
    with journal.path.open("a") as torn:  # a process killed mid-line: that line is skipped
        torn.write('{"key": "x2", "mod')
    journal.close()
    assert db.cache_replay(engine, journal.path.parent) == 1
    assert list(db.cache_get_many(engine, ["x1", "x2"])) == ["x1"]


def test_journals_are_kept_per_database_under_the_cache_dir(tmp_path):
    one = journal_dir(str(tmp_path), "sqlite:///a.db")
    assert one.parent == tmp_path / "call-journal"
    assert one != journal_dir(str(tmp_path), "postgresql+psycopg://u@h/b")


def test_a_database_away_is_waited_for_then_given_up_with_database_lost(capsys):
    engine = refused_engine()
    OUTAGE.since = None
    try:
        with run_wait(1.0), pytest.raises(DatabaseLost, match="did not answer for 1 s"):
            patiently(lambda: engine.connect().close(), "the results database")
        err = capsys.readouterr().err
        assert err.count("waiting:") == 1 and "--db-lost-timeout" in err
        OUTAGE.over()
        assert "is back" in capsys.readouterr().err
    finally:
        OUTAGE.since = None


def test_the_database_wait_is_the_runs_own_and_ends_with_it(monkeypatch):
    """No run sets the wait for the next (issue 51): a run's --db-lost-timeout holds within it (its
    threads too) and is gone after it; two runs side by side in one process each wait by their own."""
    monkeypatch.setenv(LOST_TIMEOUT_ENV, "42")
    with run_wait(7.0):
        assert OUTAGE.seconds() == 7.0
        with ThreadPoolExecutor(1) as pool:  # a thread the run starts with its context, as asyncio.to_thread
            assert pool.submit(contextvars.copy_context().run, OUTAGE.seconds).result() == 7.0
    assert OUTAGE.seconds() == 42.0  # the next run, given none, waits by the environment's
    with run_wait(None):
        assert OUTAGE.seconds() == 42.0

    async def run(seconds: float, started: asyncio.Event, other: asyncio.Event) -> float:
        with run_wait(seconds):
            started.set()
            await other.wait()  # the other run has set its own meanwhile
            return await asyncio.to_thread(OUTAGE.seconds)

    async def side_by_side() -> list[float]:
        one, two = asyncio.Event(), asyncio.Event()
        return list(await asyncio.gather(run(1.0, one, two), run(2.0, two, one)))

    assert asyncio.run(side_by_side()) == [1.0, 2.0]


def test_only_a_lost_connection_counts_as_the_database_away(tmp_path):
    with pytest.raises(sa.exc.OperationalError) as refused:
        refused_engine().connect()
    assert connection_lost(refused.value)
    with pytest.raises(sa.exc.OperationalError) as bad_sql:
        with sqlite_engine(tmp_path).connect() as connection:
            connection.execute(sa.text("select * from no_such_table"))
    assert not connection_lost(bad_sql.value)

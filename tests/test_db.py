"""The results database on SQLite and PostgreSQL: schema, upgrades, idempotent upserts, concurrent writers.

The PostgreSQL variant creates a fresh database with a unique name on 127.0.0.1:5432 (user postgres, or
JUDGEBENCH_TEST_PG_URL pointing at a server's maintenance database) and drops it afterwards; it skips,
saying why, when no server answers. `.ci/run` starts the server on CI machines.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from judgebench_flows.core.records import JudgmentRecord
from judgebench_flows.data import db
from judgebench_flows.tasks.publish import judgment_rows, metric_rows

PG_ADMIN_URL = os.environ.get("JUDGEBENCH_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


@pytest.fixture()
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path}/results.db"


@pytest.fixture()
def postgresql_url() -> Iterator[str]:
    """A new, empty PostgreSQL database (in a non-UTC time zone, to catch naive/aware mix-ups)."""
    psycopg = pytest.importorskip("psycopg")
    name = f"judgebench_test_{uuid.uuid4().hex[:12]}"
    try:
        admin = psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        pytest.skip(
            f"no PostgreSQL server reachable at {PG_ADMIN_URL} ({str(exc).strip().splitlines()[0]}); start one to run this variant"
        )
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        admin.execute(f"ALTER DATABASE \"{name}\" SET timezone TO 'America/New_York'")
    url = (
        sa.make_url(PG_ADMIN_URL)
        .set(drivername="postgresql+psycopg", database=name)
        .render_as_string(hide_password=False)
    )
    try:
        yield url
    finally:
        engine = db._engines.pop(url, None)
        if engine is not None:
            engine.dispose()
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request) -> str:
    return request.getfixturevalue(f"{request.param}_url")


def _judgments(run_id: str, n: int, prefix: str = "p") -> list[dict]:
    records = [
        JudgmentRecord(
            pair_id=f"{prefix}{i // 2}",
            order=i % 2,
            source="mmlu-pro-law",
            category="mmlu-pro",
            label="A>B",
            status="ok",
            decision="A>B" if i % 2 == 0 else "B>A",
            decision_for_pair="A>B",
            judge_model="m",
            response=f"verdict {i}",
            latency_s=0.5,
            calls=1,
            prompt_tokens=100,
            completion_tokens=7,
        )
        for i in range(n)
    ]
    return judgment_rows(run_id, records)


def _results() -> dict:
    acc = {"accuracy": 0.5, "correct_count": 1, "valid_samples": 2, "total_samples": 2, "ci_low": 0.0, "ci_high": 1.0}
    return {"overall_accuracy": acc, "category_accuracy": {"mmlu-pro": acc}, "source_accuracy": {"mmlu-pro-law": acc}}


def _run(run_id: str, started: datetime, config_key: str = "k1", **extra) -> dict:
    return dict(
        run_id=run_id,
        config_key=config_key,
        judge_type="arena_hard",
        model="m",
        commit="abc",
        data_file="d.jsonl",
        flow_run_id=str(uuid.uuid4()),
        status="running",
        started=started,
        n_pairs=2,
        config_json="{}",
        **extra,
    )


def _count(engine: sa.Engine, table: str) -> int:
    with engine.connect() as connection:
        return connection.execute(sa.text(f"SELECT COUNT(*) FROM {table}")).scalar_one()


def test_schema_created_on_first_use(db_url):
    engine = db.open_database(db_url)
    inspector = sa.inspect(engine)
    assert {"runs", "judgments", "metrics", "call_cache", "judgebench_schema"} <= set(inspector.get_table_names())
    columns = {c["name"] for c in inspector.get_columns("runs")}
    assert {
        "config_key",
        "config_json",
        "commit",
        "flow_run_id",
        "started",
        "finished",
        "status",
        "overall_accuracy",
    } <= columns
    columns = {c["name"] for c in inspector.get_columns("judgments")}
    assert {
        "pair_id",
        "order_index",
        "response",
        "decision",
        "decision_for_pair",
        "latency_s",
        "prompt_tokens",
        "completion_tokens",
    } <= columns
    assert {"scope", "name", "accuracy", "ci_low", "ci_high"} <= {c["name"] for c in inspector.get_columns("metrics")}
    assert db.open_database(db_url) is engine  # one engine per URL


def test_upgrade_adds_missing_columns_and_keeps_rows(db_url):
    """A database written by an older version (fewer columns) is upgraded in place on open."""
    old = sa.MetaData()
    sa.Table(
        "runs",
        old,
        sa.Column("run_id", sa.String, primary_key=True),
        sa.Column("config_key", sa.String, nullable=False),
        sa.Column("judge_type", sa.String, nullable=False),
        sa.Column("model", sa.String, nullable=False),
        sa.Column("status", sa.String, nullable=False),
        sa.Column("started", sa.DateTime, nullable=False),
        sa.Column("config_json", sa.String, nullable=False),
    )
    sa.Table(
        "judgments",
        old,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_id", sa.String, nullable=False),
        sa.Column("pair_id", sa.String, nullable=False),
        sa.Column("order_index", sa.Integer, nullable=False),
        sa.Column("source", sa.String, nullable=False),
        sa.Column("category", sa.String, nullable=False),
        sa.Column("label", sa.String, nullable=False),
        sa.Column("status", sa.String, nullable=False),
        sa.Column("decision", sa.String, nullable=False),
        sa.Column("decision_for_pair", sa.String, nullable=False),
        sa.UniqueConstraint("run_id", "pair_id", "order_index", name="uq_judgment"),
    )
    setup = sa.create_engine(db_url)
    old.create_all(setup)
    with setup.begin() as connection:
        connection.execute(
            sa.text(
                "INSERT INTO runs (run_id, config_key, judge_type, model, status, started, config_json) "
                "VALUES ('oldrun', 'k0', 'vanilla', 'gpt-4', 'completed', '2024-01-02 03:04:05', '{}')"
            )
        )
        connection.execute(
            sa.text(
                "INSERT INTO judgments (run_id, pair_id, order_index, source, category, label, status, decision, decision_for_pair) "
                "VALUES ('oldrun', 'p0', 0, 'mmlu-pro-law', 'mmlu-pro', 'A>B', 'ok', 'A>B', 'A>B')"
            )
        )
    setup.dispose()

    engine = db.open_database(db_url)
    runs_columns = {c["name"] for c in sa.inspect(engine).get_columns("runs")}
    assert {
        "results_json",
        "finished",
        "overall_accuracy",
        "flow_run_id",
        "commit",
        "cost_usd",
        "priced_as",
        "order_consistency",
        "first_position_rate",
    } <= runs_columns
    assert {"latency_s", "cached_calls", "completion_tokens"} <= {
        c["name"] for c in sa.inspect(engine).get_columns("judgments")
    }
    assert "ix_runs_config_key" in {i["name"] for i in sa.inspect(engine).get_indexes("runs")}
    assert "ix_judgments_verdicts" in {i["name"] for i in sa.inspect(engine).get_indexes("judgments")}  # 0008

    old_run = db.get_run(engine, "oldrun")
    assert old_run is not None and old_run.model == "gpt-4" and old_run.status == "completed"
    assert old_run.started == datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc) and old_run.results_json is None
    assert old_run.cost_usd is None and old_run.priced_as is None  # from before costs: blank, not "unpriced"
    [old_judgment] = db.run_judgments(engine, "oldrun")
    assert (
        old_judgment.decision == "A>B" and old_judgment.cached_calls == 0 and old_judgment.latency_s == 0.0
    )  # column defaults

    db.save_judgments(engine, _judgments("oldrun", 4))  # upserts onto the old row and adds new ones
    assert _count(engine, "judgments") == 4 and _count(engine, "runs") == 1


def test_publish_twice_writes_each_row_once(db_url):
    """A retried publish (or a resumed run) upserts: same row counts, latest values."""
    engine = db.open_database(db_url)
    started = datetime(2025, 3, 1, 12, 0, tzinfo=timezone(timedelta(hours=5)))
    for attempt in range(2):
        db.save_run(engine, **_run("r1", started))
        db.save_judgments(engine, _judgments("r1", 40))
        rows = metric_rows("r1", _results())
        if attempt:
            rows[0].accuracy = 0.75
        db.save_metrics(engine, rows)
        db.update_run(
            engine, "r1", status="completed", finished=started + timedelta(minutes=attempt + 1), overall_accuracy=0.5
        )
    assert (_count(engine, "runs"), _count(engine, "judgments"), _count(engine, "metrics")) == (1, 40, 3)
    overall = next(m for m in db.run_metrics(engine, "r1") if m.scope == "overall")
    assert overall.accuracy == 0.75
    run = db.get_run(engine, "r1")
    # read back as UTC whatever the session's time zone (the PostgreSQL database runs in New York time)
    assert (
        run.started == started
        and run.started.utcoffset() == timedelta(0)
        and run.finished == started + timedelta(minutes=2)
    )
    db.update_run(engine, "r1", finished=datetime(2025, 3, 1, 8, 0))  # a naive value is taken as UTC
    assert db.get_run(engine, "r1").finished == datetime(2025, 3, 1, 8, 0, tzinfo=timezone.utc)
    assert run.status == "completed"


def test_concurrent_writers_all_land(db_url):
    """8 threads x 200 judgments in small batches, plus overlapping call-cache puts and run updates."""
    engine = db.open_database(db_url)
    db.save_run(engine, **_run("shared", datetime.now(timezone.utc)))
    barrier = threading.Barrier(8)

    def writer(worker: int) -> None:
        barrier.wait()
        rows = _judgments(f"run-{worker}", 200)
        for start in range(0, 200, 20):
            db.save_judgments(engine, rows[start : start + 20])
            # half the keys are shared by all threads, as when two shards ask the same question
            keys = [f"{worker:02d}-{start}-{i}" for i in range(5)] + [f"shared-{start}-{i}" for i in range(5)]
            db.cache_put_many(
                engine,
                [{"key": key, "model": "m", "response": f"answer {worker}", "created": db.utcnow()} for key in keys],
            )
            db.update_run(engine, "shared", n_pairs=worker)
        db.save_metrics(engine, metric_rows(f"run-{worker}", _results()))

    with ThreadPoolExecutor(8) as pool:
        for future in [pool.submit(writer, w) for w in range(8)]:
            future.result()  # re-raises any writer's error
    assert _count(engine, "judgments") == 8 * 200
    assert _count(engine, "call_cache") == 8 * 10 * 5 + 10 * 5
    assert _count(engine, "metrics") == 8 * 3
    assert len(db.cache_get_many(engine, [f"shared-0-{i}" for i in range(5)] + ["missing"])) == 5
    assert all(len(db.run_judgments(engine, f"run-{w}")) == 200 for w in range(8))


def test_list_runs_get_run_and_judgments(db_url):
    engine = db.open_database(db_url)
    t0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
    ids = ["aaaa1111", "aaaa2222", "bbbb3333", "cc_d4444"]
    for i, run_id in enumerate(ids):
        db.save_run(engine, **_run(run_id, t0 + timedelta(hours=i), config_key="k1" if i < 3 else "k2"))
        db.save_judgments(engine, _judgments(run_id, 2 + i))
    assert [r.run_id for r in db.list_runs(engine)] == ids[::-1]
    assert [r.run_id for r in db.list_runs(engine, limit=2)] == ["cc_d4444", "bbbb3333"]
    assert [r.run_id for r in db.list_runs(engine, config_key="k1")] == ["bbbb3333", "aaaa2222", "aaaa1111"]
    db.update_run(engine, "aaaa1111", status="completed")
    db.update_run(engine, "bbbb3333", status="failed")
    assert [r.run_id for r in db.list_runs(engine, config_key="k1", statuses=("completed", "regressed"))] == [
        "aaaa1111"
    ]
    assert db.get_run(engine, "aaaa2222").run_id == "aaaa2222"
    assert db.get_run(engine, "bbbb").run_id == "bbbb3333"  # unique prefix, as copied from `history`
    assert db.get_run(engine, "aaaa") is None  # ambiguous
    assert db.get_run(engine, "zzzz") is None
    assert db.get_run(engine, "cc_").run_id == "cc_d4444"
    assert db.get_run(engine, "c%") is None  # LIKE wildcards in the prefix are literal
    judgments = db.run_judgments(engine, "bbbb3333")
    assert len(judgments) == 4 and {j.run_id for j in judgments} == {"bbbb3333"}
    assert {(j.pair_id, j.order_index) for j in judgments} == {("p0", 0), ("p0", 1), ("p1", 0), ("p1", 1)}
    assert db.run_judgments(engine, "nope") == []


def _tables_of_today(url: str) -> None:
    """A database as the code before migrations left it: the models' tables made by `create_all`, the
    schema marker row, no Alembic version table, and a run in it."""
    setup = sa.create_engine(url)
    db.SQLModel.metadata.create_all(
        setup,
        tables=[
            db.SQLModel.metadata.tables[name]
            for name in ("runs", "judgments", "metrics", "call_cache", "provider_batches", "judgebench_schema")
        ],
    )
    with setup.begin() as connection:
        connection.execute(sa.text("INSERT INTO judgebench_schema (id, version) VALUES (1, 1)"))
    db.save_run(setup, **_run("today", datetime(2026, 11, 25, tzinfo=timezone.utc)))
    db.save_judgments(setup, _judgments("today", 2))
    setup.dispose()


def _alembic_version(engine: sa.Engine) -> str:
    with engine.connect() as connection:
        return connection.execute(sa.text("SELECT version_num FROM judgebench_alembic_version")).scalar_one()


def test_database_from_before_migrations_upgrades_in_place(db_url):
    """Today's database (made by `create_all`, no migration history) is stamped at the newest migration
    on open, its rows kept; opening it again changes nothing."""
    from alembic.script import ScriptDirectory

    _tables_of_today(db_url)
    engine = db.open_database(db_url)
    head = ScriptDirectory.from_config(db.migrations_config()).get_current_head()
    assert _alembic_version(engine) == head
    [run] = [r for r in db.list_runs(engine) if r.run_id == "today"]
    assert run.started == datetime(2026, 11, 25, tzinfo=timezone.utc)
    assert len(db.run_judgments(engine, "today")) == 2
    db._upgrade_schema(engine)  # again: already at head
    assert _alembic_version(engine) == head and _count(engine, "judgebench_schema") == 1


def test_the_schema_head_the_package_checks_first_is_alembics_head(db_url, tmp_path):
    """Opening a database at the newest schema skips Alembic (not even imported); the revision that check
    compares with must be the migrations' head, or a new migration would never run."""
    from alembic.script import ScriptDirectory

    from judgebench_flows.data.engines import SCHEMA_HEAD

    assert ScriptDirectory.from_config(db.migrations_config()).get_current_head() == SCHEMA_HEAD
    path = tmp_path / "current.db"
    db.open_database(f"sqlite:///{path}")  # created and migrated here
    script = (
        "import sys\n"
        "from judgebench_flows.data import db\n"
        f"db.open_database('sqlite:///{path}')\n"
        "print('alembic' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False"]


def test_migrations_build_the_models_schema(db_url):
    """What the migrations build is what the models declare: a column or table added to a model without
    its migration fails here (Alembic's own comparison of a database with metadata)."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    engine = db.open_database(db_url)
    with engine.connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), db.SQLModel.metadata)
    missing = [entry for entry in diff if isinstance(entry, tuple) and entry[0].startswith("add_")]
    missing += [
        op for entry in diff if isinstance(entry, list) for op in entry if op[0].startswith(("add_", "modify_nullable"))
    ]
    tables = [
        name
        for name in db.SQLModel.metadata.tables
        if name.startswith(("runs", "judg", "metrics", "call_c", "provider_b"))
    ]
    assert len(tables) >= 5 and not missing, missing


def _plan(engine: sa.Engine, query: sa.Select) -> str:
    """The plan the database picks for `query` (PostgreSQL: after VACUUM, which marks the pages all-visible
    as autovacuum would, and with the scans that read every row turned off, as on a table of a year)."""
    sql = str(query.compile(engine, compile_kwargs={"literal_binds": True}))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        if engine.dialect.name == "sqlite":
            return " ".join(str(row[-1]) for row in connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}"))
        connection.exec_driver_sql("VACUUM ANALYZE judgments")
        connection.exec_driver_sql("SET enable_seqscan = off")
        connection.exec_driver_sql("SET enable_bitmapscan = off")
        return " ".join(row[0] for row in connection.exec_driver_sql(f"EXPLAIN {sql}"))


def test_verdicts_are_read_from_the_index_alone(db_url):
    """The leaderboard and the regression check read runs' verdicts by run id: every column they
    read is in `ix_judgments_verdicts` (migration 0008), so the read never loads the rows, each carrying
    the judge's whole answer. A verdict column added to the read but not to the index fails here."""
    engine = db.open_database(db_url)
    for run_id in ("run-a", "run-b", "run-c"):
        db.save_judgments(engine, _judgments(run_id, 40))
    plan = _plan(engine, db.verdicts_query(["run-a", "run-c"]))
    covering = (
        "COVERING INDEX ix_judgments_verdicts"
        if engine.dialect.name == "sqlite"
        else "Index Only Scan using ix_judgments_verdicts"
    )
    assert covering in plan, plan
    found = db.runs_verdicts(engine, ["run-a", "run-c"])
    assert [len(found[run_id]) for run_id in ("run-a", "run-c")] == [40, 40]
    assert sorted(found["run-a"]) == sorted(tuple(row) for row in db.run_verdicts(engine, "run-a"))


def test_concurrent_first_opens_migrate_once(db_url):
    """Four processes opening one new database at once (shards, a nightly matrix): every one finds the
    schema in place, and the migration history holds one version row."""
    import subprocess
    import sys

    script = (
        "import sys, sqlalchemy as sa; from judgebench_flows.data import db; "
        "db._upgrade_schema(sa.create_engine(sys.argv[1]))"
    )
    processes = [subprocess.Popen([sys.executable, "-c", script, db_url]) for _ in range(4)]
    assert [p.wait(timeout=120) for p in processes] == [0, 0, 0, 0]
    engine = sa.create_engine(db_url)
    assert _count(engine, "judgebench_alembic_version") == 1
    assert {"runs", "judgments", "call_cache"} <= set(sa.inspect(engine).get_table_names())
    engine.dispose()


def test_a_long_lived_process_keeps_the_last_engines_only(tmp_path) -> None:
    """A notebook that opens many databases holds at most MAX_ENGINES engines: the oldest is disposed (its
    pooled connections closed) and still works if a run holds it; the next open of its URL makes a new one."""
    from judgebench_flows.data import engines

    urls = [f"sqlite:///{tmp_path}/db{n}.db" for n in range(engines.MAX_ENGINES + 2)]
    opened = [db.open_database(url) for url in urls]
    try:
        kept = [url for url in urls if url in engines._engines]
        assert kept == urls[2:], "not the last MAX_ENGINES opened"
        assert opened[0].pool.checkedin() == 0, "the evicted engine's connections were kept"
        with opened[0].connect() as connection:  # disposed, still usable by a run that holds it
            assert connection.execute(sa.text("SELECT 1")).scalar() == 1
        assert db.open_database(urls[0]) is not opened[0]
        assert db.open_database(urls[-1]) is opened[-1]
    finally:
        for url in urls:
            engine = engines._engines.pop(url, None)
            if engine is not None:
                engine.dispose()

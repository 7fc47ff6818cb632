"""Reading and writing the results database's rows: a run's life (started, finished, failed, interrupted),
its judgments and metrics, the call cache, provider batches, and the reads history, compare, the report and
the leaderboard make.

Every write is an upsert on a natural key, so a retried publish or a resumed run never duplicates rows,
and concurrent shards may write at once; each goes through `engines.with_retries` (passing trouble
retried, a database away waited for). Datetimes are stored and returned as aware UTC on both backends.
The tables are data/schema.py's; opening the database, data/engines.py's.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import socket
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine
from sqlmodel import Session, SQLModel, col, select

from judgebench_flows.core.errors import UserError
from judgebench_flows.core.records import FINISHED, JudgmentRecord
from judgebench_flows.data.engines import WHERE, with_retries
from judgebench_flows.data.outage import patiently
from judgebench_flows.data.schema import (
    BatchRow,
    CallCacheRow,
    JudgmentRow,
    MetricRow,
    NightSpendRow,
    RunRow,
    as_utc,
    table_of,
    utcnow,
)


class OverallFigures(Protocol):
    """What a run's row keeps of its overall accuracy (results.json's `overall_accuracy`)."""

    @property
    def accuracy(self) -> float | None: ...
    @property
    def ci_low(self) -> float | None: ...
    @property
    def ci_high(self) -> float | None: ...


class BiasFigures(Protocol):
    """What a run's row keeps of its position bias (results.json's `consistency`)."""

    @property
    def consistency(self) -> float | None: ...
    @property
    def first_position_rate(self) -> float | None: ...


def latest_finished_runs(engine: Engine) -> list[sa.Row[Any]]:
    """The latest finished run of each configuration, newest first: the columns every schema version has
    (a database written by older code is read as it is, not upgraded)."""
    columns = (
        RunRow.run_id,
        RunRow.config_key,
        RunRow.judge_type,
        RunRow.model,
        RunRow.data_file,
        RunRow.status,
        RunRow.started,
        RunRow.finished,
        RunRow.results_json,
        RunRow.config_json,
    )
    # Which run is each configuration's latest from the small columns first; only those runs' results.json
    # are read (a year of nights is 18,000 runs: reading every results.json took seconds).
    newest = (
        sa.select(RunRow.run_id, RunRow.config_key)  # type: ignore[call-overload]
        .where(col(RunRow.status).in_(list(FINISHED)))
        .order_by(col(RunRow.started).desc(), col(RunRow.run_id).desc())
    )
    with engine.connect() as connection:
        latest: dict[str, str] = {}
        for run_id, config_key in connection.execute(newest):
            latest.setdefault(config_key, run_id)
        wanted, rows = list(latest.values()), {}
        for start in range(0, len(wanted), 500):
            query = sa.select(*columns).where(col(RunRow.run_id).in_(wanted[start : start + 500]))  # type: ignore[call-overload]
            rows.update({row.run_id: row for row in connection.execute(query)})
    return [rows[run_id] for run_id in wanted if run_id in rows]


def _upsert(
    engine: Engine, model: type[SQLModel], rows: list[dict[str, Any]], keys: list[str], patient: bool = True
) -> None:
    """Insert or update `rows` on their natural key in one statement per batch.

    Rows are de-duplicated on the key (last one wins: PostgreSQL refuses to update one row twice in a
    statement) and sorted by it, so concurrent writers lock overlapping rows in the same order.
    """
    if not rows:
        return
    unique = {tuple(row[k] for k in keys): {k: as_utc(v) for k, v in row.items()} for row in rows}
    rows = [unique[key] for key in sorted(unique, key=lambda key: tuple(str(part) for part in key))]
    table = table_of(model)
    dialect = engine.dialect.name
    insert: postgresql.Insert | sqlite.Insert
    if dialect == "postgresql":
        insert = postgresql.insert(table)
    elif dialect == "sqlite":
        insert = sqlite.insert(table)
    else:  # other databases: merge row by row

        def merge() -> None:
            with Session(engine) as session:
                for row in rows:
                    session.merge(model(**row))
                session.commit()

        with_retries(merge, patient, engine)
        return
    columns = {name for row in rows for name in row}
    updates = {
        c.name: insert.excluded[c.name]
        for c in table.columns
        if c.name in columns and c.name not in keys and c.name != "id"
    }
    statement = (
        insert.on_conflict_do_update(index_elements=keys, set_=updates)
        if updates
        else insert.on_conflict_do_nothing(index_elements=keys)
    )

    def write() -> None:
        with engine.begin() as connection:
            connection.execute(statement, rows)

    with_retries(write, patient, engine)


def save_run(engine: Engine, **fields: Any) -> None:
    _upsert(engine, RunRow, [fields], ["run_id"])


def update_run(engine: Engine, run_id: str, **fields: Any) -> None:
    values = {k: as_utc(v) for k, v in fields.items()}

    def write() -> None:
        with engine.begin() as connection:
            table = table_of(RunRow)
            connection.execute(sa.update(table).where(table.c.run_id == run_id).values(**values))

    with_retries(write, engine=engine)


def start_run(engine: Engine, run_id: str, **fields: Any) -> None:
    """Record a run as "running" from its start, with where its process lives (`mark_crashed` checks it),
    so a run that dies is still visible in the history."""
    save_run(engine, run_id=run_id, status="running", host=socket.gethostname(), pid=os.getpid(), **fields)


def finish_run(
    engine: Engine,
    run_id: str,
    *,
    status: str,
    finished: datetime,
    overall: OverallFigures,
    message: str | None,
    results_json: str,
    cost_usd: float | None = None,
    priced_as: str | None = None,
    consistency: BiasFigures | None = None,
    served_as: str | None = None,
    drift: str | None = None,
) -> None:
    """A run's end as measured: completed, regressed, or failed (measured too little), with its accuracy,
    its position bias (results.json's `consistency`), what it cost, what the endpoint said it answered
    with and what of that changed against the baseline."""
    update_run(
        engine,
        run_id,
        status=status,
        finished=finished,
        overall_accuracy=overall.accuracy,
        ci_low=overall.ci_low,
        ci_high=overall.ci_high,
        message=message,
        results_json=results_json,
        cost_usd=cost_usd,
        priced_as=priced_as,
        order_consistency=consistency.consistency if consistency else None,
        first_position_rate=consistency.first_position_rate if consistency else None,
        served_as=served_as,
        drift=drift,
    )


def fail_run(engine: Engine, run_id: str, error: BaseException) -> None:
    """A run that ended with an error: a user error's own line (it names the input), else only the
    exception's type (an unexpected message may carry anything)."""
    message = str(error)[:500] if isinstance(error, UserError) else type(error).__name__
    update_run(engine, run_id, status="failed", finished=utcnow(), message=message)


def interrupt_run(engine: Engine, run_id: str, message: str) -> None:
    """A run stopped on request (Ctrl-C, SIGTERM, cancelled from the Prefect UI): not a failure of the
    run or its endpoint; the same command resumes it from the call cache."""
    update_run(engine, run_id, status="interrupted", finished=utcnow(), message=message[:500])


def save_judgments(engine: Engine, rows: Iterable[dict[str, Any]]) -> None:
    _upsert(engine, JudgmentRow, list(rows), ["run_id", "pair_id", "order_index"])


# The one mapping between a judgment record and its row: every field the two share is stored under its
# own name (`order` is the column `order_index`: ORDER is an SQL keyword), so a field added to both needs
# nothing more. Prompts, scores and the judge model stay in the JSONL, not in the database.
_COLUMN_OF = {"order": "order_index"}


@functools.cache
def _stored_fields() -> tuple[tuple[str, str], ...]:
    columns = set(JudgmentRow.model_fields)
    return tuple(
        (name, _COLUMN_OF.get(name, name))
        for name in JudgmentRecord.model_fields
        if _COLUMN_OF.get(name, name) in columns
    )


def judgment_rows(run_id: str, records: Iterable[JudgmentRecord]) -> list[dict[str, Any]]:
    """The rows `save_judgments` writes for these records (the epoch in `order_index`)."""
    fields = _stored_fields()
    rows = []
    for record in records:
        row = {"run_id": run_id, **{column: getattr(record, name) for name, column in fields}}
        row["order_index"] = record.order + 2 * record.epoch
        rows.append(row)
    return rows


def judgment_records(rows: Iterable[JudgmentRow]) -> list[JudgmentRecord]:
    """Records read back from rows (what the database keeps of them: no prompt, scores or judge model)."""
    fields = _stored_fields()
    records = []
    for row in rows:
        stored = {name: getattr(row, column) for name, column in fields}
        stored["order"], stored["epoch"] = divmod(row.order_index, 2)[::-1]
        records.append(JudgmentRecord(judge_model="", **stored))
    return records


def save_metrics(engine: Engine, rows: Iterable[MetricRow]) -> None:
    """Upsert on (run, scope, name): a retried publish rewrites its rows, never adds more."""
    _upsert(engine, MetricRow, [row.model_dump(exclude={"id"}) for row in rows], ["run_id", "scope", "name"])


@dataclasses.dataclass(frozen=True)
class CacheReuse:
    """Which cached answers a run may reuse: those paid by a run under the flow run `scope` (a night's or a
    deployment run's: its retries and reschedules; None: any run's), written at or after `newer_than`.

    Keys stay what they are (`core.identity`): who paid and when are the row's own columns, so a night
    that may not reuse yesterday's answer pays again and its answer replaces it under the same key.
    `twins`: runs of the same configuration this run waited for (`data/run_lock`, another night's cell
    started alongside): their answers are admitted too, whatever flow run they were paid under."""

    scope: str | None = None
    newer_than: datetime | None = None
    twins: tuple[str, ...] = ()


ANY_RUN = CacheReuse()


def cache_get_many(engine: Engine, keys: list[str], reuse: CacheReuse = ANY_RUN) -> dict[str, CallCacheRow]:
    """The call cache's rows of these keys that `reuse` allows; a database away is waited for (`outage`)."""
    query = select(CallCacheRow)
    if reuse.scope is not None:
        own = col(RunRow.root_flow_run_id) == reuse.scope
        query = query.join(RunRow, col(RunRow.run_id) == col(CallCacheRow.paid_by)).where(
            sa.or_(own, col(CallCacheRow.paid_by).in_(reuse.twins)) if reuse.twins else own
        )
    if reuse.newer_than is not None:
        query = query.where(col(CallCacheRow.created) >= as_utc(reuse.newer_than))

    def read() -> dict[str, CallCacheRow]:
        found: dict[str, CallCacheRow] = {}
        with Session(engine) as session:
            for start in range(0, len(keys), 500):
                for row in session.exec(query.where(col(CallCacheRow.key).in_(keys[start : start + 500]))):
                    found[row.key] = row
        return found

    return patiently(read, WHERE)


def twin_runs(engine: Engine, config_key: str, since: datetime, run_id: str) -> list[str]:
    """Other runs of the configuration that were running at `since` (a night's start) or started after:
    a twin night's cells, whose answers are as fresh as the night's own."""
    query = select(RunRow.run_id).where(
        col(RunRow.config_key) == config_key,
        col(RunRow.run_id) != run_id,
        sa.or_(
            sa.and_(col(RunRow.finished).is_(None), col(RunRow.status) == "running"),
            col(RunRow.finished) >= as_utc(since),
        ),
    )
    with Session(engine) as session:
        return sorted(session.exec(query))


def runs_by_id(engine: Engine, run_ids: Iterable[str]) -> dict[str, RunRow]:
    """The rows of these runs (those the database still holds), by id."""
    wanted = sorted(set(run_ids))
    with Session(engine) as session:
        return {run.run_id: run for run in session.exec(select(RunRow).where(col(RunRow.run_id).in_(wanted)))}


def cache_put_many(engine: Engine, rows: list[dict[str, Any]], patient: bool = True) -> None:
    """Write answers to the call cache; not `patient`: a database away raises at once (the cache journals)."""
    _upsert(engine, CallCacheRow, rows, ["key"], patient)


def cache_replay(engine: Engine, directory: Path) -> int:
    """Write the call-cache journals earlier runs left in `directory` into the call cache (`journal`)."""
    from judgebench_flows.data.journal import replay

    return replay(directory, table_of(CallCacheRow), lambda rows: cache_put_many(engine, rows))


def paid_by_run(engine: Engine, run_id: str) -> tuple[int, int, int]:
    """(answers, prompt tokens, completion tokens) the call cache holds from calls `run_id` paid for."""
    table = table_of(CallCacheRow)
    query = sa.select(
        sa.func.count(), sa.func.sum(table.c.prompt_tokens), sa.func.sum(table.c.completion_tokens)
    ).where(table.c.paid_by == run_id)
    with engine.connect() as connection:
        calls, prompt, completion = connection.execute(query).one()
    return int(calls or 0), int(prompt or 0), int(completion or 0)


def batch_save(engine: Engine, row: dict[str, Any]) -> None:
    _upsert(engine, BatchRow, [row], ["batch_id"])


def batches_open(engine: Engine, endpoint: str, model: str) -> list[BatchRow]:
    with Session(engine) as session:
        query = select(BatchRow).where(BatchRow.endpoint == endpoint, BatchRow.model == model)
        return [row for row in session.exec(query) if row.status == "open"]


def batch_done(engine: Engine, batch_id: str) -> None:
    with engine.begin() as connection:
        table = table_of(BatchRow)
        connection.execute(sa.update(table).where(table.c.batch_id == batch_id).values(status="done"))


def list_runs(
    engine: Engine, limit: int = 50, config_key: str | None = None, statuses: Iterable[str] | None = None
) -> list[RunRow]:
    """Newest first; optionally only one configuration's runs and only runs in the given statuses."""
    with Session(engine) as session:
        query = select(RunRow).order_by(RunRow.started.desc()).limit(limit)  # type: ignore[attr-defined]
        if config_key:
            query = query.where(RunRow.config_key == config_key)
        if statuses is not None:
            query = query.where(RunRow.status.in_(list(statuses)))  # type: ignore[attr-defined]
        return list(session.exec(query))


def get_run(engine: Engine, run_id: str) -> RunRow | None:
    with Session(engine) as session:
        run = session.get(RunRow, run_id)
        if run is None:  # allow a unique prefix, as people copy short ids from `history`
            matches = list(
                session.exec(select(RunRow).where(col(RunRow.run_id).startswith(run_id, autoescape=True)).limit(2))
            )
            run = matches[0] if len(matches) == 1 else None
        return run


def run_judgments(engine: Engine, run_id: str) -> list[JudgmentRow]:
    with Session(engine) as session:
        return list(session.exec(select(JudgmentRow).where(JudgmentRow.run_id == run_id)))


_ORDER_INDEX: Any = JudgmentRow.order_index  # a column at runtime, typed as int
_VERDICT_COLUMNS = (
    JudgmentRow.pair_id,
    (_ORDER_INDEX % 2).label("order"),
    JudgmentRow.source,
    JudgmentRow.category,
    JudgmentRow.label,
    JudgmentRow.status,
    JudgmentRow.decision_for_pair,
    (_ORDER_INDEX // 2).label("epoch"),
)


def verdicts_query(run_ids: list[str]) -> sa.Select[Any]:
    """The runs' verdicts, each led by its run id. Every column it (and `run_verdicts`) reads is in the
    index `ix_judgments_verdicts` (migration 0008): the read is index-only, never the rows' answers."""
    return sa.select(JudgmentRow.run_id, *_VERDICT_COLUMNS).where(col(JudgmentRow.run_id).in_(run_ids))  # type: ignore[call-overload]


def run_verdicts(engine: Engine, run_id: str) -> list[Any]:
    """A run's verdicts without their answers: what the metric reads (`metrics.Verdict`), a few dozen
    bytes per judgment where whole rows would carry every raw answer."""
    with engine.connect() as connection:
        return list(connection.execute(sa.select(*_VERDICT_COLUMNS).where(JudgmentRow.run_id == run_id)))  # type: ignore[call-overload]


def runs_verdicts(engine: Engine, run_ids: Iterable[str]) -> dict[str, list[tuple[Any, ...]]]:
    """Several runs' verdicts by run id, each a tuple of `run_verdicts`' columns in their order, in one
    query per 500 runs, fetched whole: the leaderboard reads 50 configurations' latest runs (35,000
    rows), where a query per run and a row object each cost more than the scoring."""
    wanted = sorted(set(run_ids))
    found: dict[str, list[tuple[Any, ...]]] = {run_id: [] for run_id in wanted}
    with engine.connect() as connection:
        for start in range(0, len(wanted), 500):
            for run_id, *verdict in connection.execute(verdicts_query(wanted[start : start + 500])).tuples().all():
                found[run_id].append(tuple(verdict))
    return found


def run_metrics(engine: Engine, run_id: str) -> list[MetricRow]:
    with Session(engine) as session:
        return list(session.exec(select(MetricRow).where(MetricRow.run_id == run_id)))


# What the dashboard reads of each run's results.json, by path: the regression check's figures and the
# judge's noise, extracted by the database (a year of nights is 18,000 results.json; parsing them in
# Python took seconds), and the benchmark a run's configuration names (None: JudgeBench's, as every run
# before a second benchmark was).
DASHBOARD_FIGURES: dict[str, tuple[str, tuple[str, ...]]] = {
    "delta": ("results", ("regression", "delta")),
    "p_drop": ("results", ("regression", "p_drop")),
    "alpha": ("results", ("regression", "alpha")),
    "detectable_drop": ("results", ("regression", "detectable_drop")),
    "baseline_accuracy": ("results", ("regression", "baseline_accuracy")),
    "noise_sd": ("results", ("noise", "run_to_run_sd")),
}
DASHBOARD_TEXTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "baseline_run_id": ("results", ("regression", "baseline_run_id")),
    "accuracy_regressed": ("results", ("regression", "accuracy_regressed")),
    "benchmark": ("config", ("benchmark",)),
}


def _json_at(engine: Engine, column: Any, path: tuple[str, ...], number: bool) -> Any:
    """One value inside a JSON text column, read by the database (SQLite's JSON1, PostgreSQL's jsonb)."""
    if engine.dialect.name == "postgresql":
        document: Any = sa.cast(column, postgresql.JSONB)
    else:
        document = sa.type_coerce(column, sa.JSON)
    value = document[path]
    return value.as_float() if number else value.as_string()


def dashboard_starts(engine: Engine, judge_type: str | None = None, model: str | None = None) -> list[sa.Row[Any]]:
    """When each run started and under which flow runs: what finds the dashboard's newest nights."""
    query = sa.select(RunRow.started, RunRow.root_flow_run_id, RunRow.flow_run_id)  # type: ignore[call-overload]
    if judge_type:
        query = query.where(RunRow.judge_type == judge_type)
    if model:
        query = query.where(RunRow.model == model)
    with engine.connect() as connection:
        return list(connection.execute(query))


def dashboard_runs(
    engine: Engine,
    since: datetime | None = None,
    judge_type: str | None = None,
    model: str | None = None,
) -> list[sa.Row[Any]]:
    """Every run started since `since` (of that judge type and model), oldest first: the columns the
    dashboard shows and the figures `DASHBOARD_FIGURES` / `DASHBOARD_TEXTS` name, never the JSON whole."""
    columns: list[Any] = [
        RunRow.run_id,
        RunRow.config_key,
        RunRow.judge_type,
        RunRow.model,
        RunRow.data_file,
        RunRow.flow_run_id,
        RunRow.root_flow_run_id,
        RunRow.status,
        RunRow.message,
        RunRow.started,
        RunRow.finished,
        RunRow.n_pairs,
        RunRow.overall_accuracy,
        RunRow.ci_low,
        RunRow.ci_high,
        RunRow.cost_usd,
        RunRow.priced_as,
        RunRow.order_consistency,
        RunRow.first_position_rate,
        RunRow.served_as,
        RunRow.drift,
    ]
    sources = {"results": RunRow.results_json, "config": RunRow.config_json}
    for name, (source, path) in DASHBOARD_FIGURES.items():
        columns.append(_json_at(engine, sources[source], path, number=True).label(name))
    for name, (source, path) in DASHBOARD_TEXTS.items():
        columns.append(_json_at(engine, sources[source], path, number=False).label(name))
    query = sa.select(*columns).order_by(col(RunRow.started), col(RunRow.run_id))
    if since is not None:
        query = query.where(col(RunRow.started) >= as_utc(since))
    if judge_type:
        query = query.where(col(RunRow.judge_type) == judge_type)
    if model:
        query = query.where(col(RunRow.model) == model)
    with engine.connect() as connection:
        return list(connection.execute(query))


def category_metrics(
    engine: Engine, run_ids: Iterable[str]
) -> dict[str, dict[str, tuple[float, float | None, float | None]]]:
    """Each run's accuracy per category, with its interval: {run_id: {category: (accuracy, low, high)}}."""
    wanted = sorted(set(run_ids))
    found: dict[str, dict[str, tuple[float, float | None, float | None]]] = {}
    table = table_of(MetricRow)
    with engine.connect() as connection:
        for start in range(0, len(wanted), 500):
            query = sa.select(table.c.run_id, table.c.name, table.c.accuracy, table.c.ci_low, table.c.ci_high).where(
                table.c.scope == "category", table.c.run_id.in_(wanted[start : start + 500])
            )
            for run_id, name, accuracy, low, high in connection.execute(query).tuples().all():
                found.setdefault(run_id, {})[name] = (accuracy, low, high)
    return found


def pair_judgments(engine: Engine, run_pairs: Iterable[tuple[str, str]]) -> list[JudgmentRow]:
    """The judgments (answers included) of these (run, pair)s: the few a page shows whole."""
    by_run: dict[str, set[str]] = {}
    for run_id, pair_id in run_pairs:
        by_run.setdefault(run_id, set()).add(pair_id)
    rows: list[JudgmentRow] = []
    with Session(engine) as session:
        for run_id, pairs in sorted(by_run.items()):
            wanted = sorted(pairs)
            for start in range(0, len(wanted), 500):
                query = select(JudgmentRow).where(
                    JudgmentRow.run_id == run_id, col(JudgmentRow.pair_id).in_(wanted[start : start + 500])
                )
                rows.extend(session.exec(query))
    return rows


def night_budgets(engine: Engine, nights: Iterable[str]) -> dict[str, tuple[float, float, float]]:
    """A pool night's budget as its cells left it (data/night_budget.py): {night: (max_cost, spent, held)}."""
    table = table_of(NightSpendRow)
    wanted = sorted(set(nights))
    found: dict[str, tuple[float, float, float]] = {}
    with engine.connect() as connection:
        for start in range(0, len(wanted), 500):
            query = sa.select(table.c.night, table.c.cell, table.c.held, table.c.spent).where(
                table.c.night.in_(wanted[start : start + 500])
            )
            rows = list(connection.execute(query))
            for night in {row.night for row in rows}:
                own = [row for row in rows if row.night == night]
                budget = next((row.held for row in own if row.cell == ""), None)
                if budget is not None:
                    cells = [row for row in own if row.cell != ""]
                    found[night] = (budget, sum(r.spent for r in cells), sum(r.held for r in cells))
    return found


__all__ = [
    "ANY_RUN",
    "BiasFigures",
    "CacheReuse",
    "OverallFigures",
    "batch_done",
    "batch_save",
    "batches_open",
    "cache_get_many",
    "cache_put_many",
    "cache_replay",
    "category_metrics",
    "dashboard_runs",
    "dashboard_starts",
    "fail_run",
    "finish_run",
    "get_run",
    "interrupt_run",
    "judgment_records",
    "judgment_rows",
    "latest_finished_runs",
    "list_runs",
    "night_budgets",
    "pair_judgments",
    "paid_by_run",
    "run_judgments",
    "run_metrics",
    "run_verdicts",
    "runs_by_id",
    "runs_verdicts",
    "save_judgments",
    "save_metrics",
    "save_run",
    "start_run",
    "update_run",
    "verdicts_query",
]

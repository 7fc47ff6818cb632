"""Prefect task: publish a finished run everywhere users look for it.

results.json, the JudgeBench-shaped JSONL, rows in the results database, an HTML report and Prefect
artifacts. Every write is idempotent (atomic file replace, database upserts), so a retried publish
leaves exactly one copy of everything. Judgment rows and JSONL parts are written per shard by the flow,
as shards finish, so a large run never holds every prompt in memory.
"""

from __future__ import annotations

import asyncio
import shutil
from functools import partial
from pathlib import Path

from prefect import task
from prefect.artifacts import acreate_markdown_artifact, acreate_table_artifact
from prefect.cache_policies import NO_CACHE

from judgebench_flows.core import artifact_keys
from judgebench_flows.core.errors import PathNotWritable
from judgebench_flows.core.records import JudgmentRecord
from judgebench_flows.data import db, storage
from judgebench_flows.scoring.formatting import percent
from judgebench_flows.scoring.provenance import served_text
from judgebench_flows.scoring.results import write_json
from judgebench_flows.scoring.run_results import RunResults


def output_file_name(data_file: str, judge_name: str, model: str) -> str:
    """JudgeBench's own naming: <dataset>,judge_name=<judge>,judge_model=<model>.jsonl; shortened to a
    readable prefix plus a hash when a long model name would make it too long for the filesystem."""
    from judgebench_flows.data.outputs import short_name

    stem = Path(data_file).name.removesuffix(".jsonl")
    return short_name(f"{stem},judge_name={judge_name},judge_model={model.replace('/', '_')}", ".jsonl")


judgment_rows = db.judgment_rows  # the one record -> row mapping lives beside the table


def metric_rows(run_id: str, results: RunResults) -> list[db.MetricRow]:
    """The accuracies measured, as rows; none for a scope with no valid judgment (a run stopped early
    publishes what it has, which may be nothing measured)."""
    results = RunResults.model_validate(results)  # also a results.json's content
    scopes = [("overall", {"overall": results.overall_accuracy})]
    scopes += [("category", results.category_accuracy), ("source", results.source_accuracy)]
    return [
        db.MetricRow(
            run_id=run_id,
            scope=scope,
            name=name,
            accuracy=acc.accuracy,
            correct_count=acc.correct_count,
            valid_samples=acc.valid_samples,
            total_samples=acc.total_samples,
            ci_low=acc.ci_low,
            ci_high=acc.ci_high,
        )
        for scope, slices in scopes
        for name, acc in slices.items()
        if (scope == "overall" or acc.total_samples) and acc.accuracy is not None
    ]


_pct = partial(percent, missing="n/a")


def summary_markdown(results: RunResults) -> str:
    overall, dataset = results.overall_accuracy, results.dataset
    lines = [
        f"# JudgeBench: {results.judge_type} / {results.model}",
        "",
        f"Dataset `{dataset.data_file}` at `{str(dataset.commit)[:12]}`, {dataset.n_pairs} pairs, {results.run.mode}.",
        "",
        "| slice | accuracy | 95% CI | correct | valid | total |",
        "|---|---|---|---|---|---|",
    ]
    rows = [("overall", overall), *results.category_accuracy.items()]
    for name, acc in rows:
        ci = f"{_pct(acc.ci_low)} - {_pct(acc.ci_high)}" if acc.ci_low is not None else ""
        lines.append(
            f"| {name} | {_pct(acc.accuracy)} | {ci} | {acc.correct_count} | {acc.valid_samples} | {acc.total_samples} |"
        )
    invalid, consistency = results.invalid, results.consistency
    lines += [
        "",
        f"Consistency: {_pct(consistency.consistency if consistency else None)}. Invalid verdicts: {invalid.invalid_judgments}, "
        f"failed calls: {invalid.failed_judgments}, skipped rows: {invalid.skipped_rows}.",
    ]
    if results.run.cache:
        lines += ["", results.run.cache.line().replace("answers:", "Answers:", 1)]
    if results.regression:
        lines += ["", f"**Regression check:** {results.regression.message}"]
    lines += provenance_lines(results)
    return "\n".join(lines)


def provenance_lines(results: RunResults) -> list[str]:
    """What the endpoint said about the model that answered, and what changed against the baseline."""
    served = results.provenance.served if results.provenance else None
    lines = []
    if served is not None and served.answers:
        said = served_text(served) or "nothing about the model"
        lines += ["", f"Endpoint said ({served.answers} answers): {said}."]
    drift = results.drift
    if drift is not None and drift.changed:
        lines += ["", f"**Endpoint changed:** {drift.message}"]
    return lines


def concatenate(parts: list[Path], target: str) -> str:
    """Join the per-shard JSONL parts in shard order into the final file (or object), atomically: a
    retried publish replaces it whole. A full disk leaves no half-written copy behind (`storage.open_write`)."""
    try:
        with storage.open_write(target) as out:
            for part in parts:
                with part.open("rb") as handle:
                    shutil.copyfileobj(handle, out)
    except OSError as exc:
        raise PathNotWritable.of("--output-dir", Path(target).parent, exc) from None
    return target


@task(name="publish-results", retries=2, retry_delay_seconds=2, cache_policy=NO_CACHE)
async def publish_results(
    run_id: str,
    results: RunResults,
    report_judgments: list[JudgmentRecord],
    jsonl_parts: list[Path],
    *,
    result_path: str,
    output_dir: str,
    db_url: str,
    judge_name: str,
    data_file: str,
    write_report: bool = True,
    artifact_slug: str | None = None,
) -> dict[str, str]:
    """Judgment rows and JSONL parts were written as each shard finished; this adds the rest.

    `report_judgments` are the verdicts the report lists with their raw answers (a bounded sample, see
    `metrics.Tally`): all counts come from `results`. No cache policy: a publish is never to be skipped,
    and hashing thousands of records for a key would only delay it. Async, the files, rows and report
    written in a thread: a night's other cells keep judging in the event loop meanwhile, and the
    artifacts go through the flow's own Prefect client (a synchronous task makes a client of its own,
    tens of milliseconds of CPU each time).
    """
    paths = await asyncio.to_thread(
        write_outputs,
        run_id,
        results,
        report_judgments,
        jsonl_parts,
        result_path=result_path,
        output_dir=output_dir,
        db_url=db_url,
        judge_name=judge_name,
        data_file=data_file,
        write_report=write_report,
    )
    # One artifact series per configuration (artifact_keys): a shared key would show whichever ran last.
    summary_key, table_key = (
        (artifact_keys.summary_key(artifact_slug), artifact_keys.accuracy_key(artifact_slug))
        if artifact_slug
        else ("judgebench-summary", "judgebench-accuracy")
    )
    files = "\n".join(f"- {name}: {storage.markdown_link(path)}" for name, path in paths.items())
    await acreate_markdown_artifact(
        f"{summary_markdown(results)}\n\n## Files\n\n{files}", key=summary_key, description=f"JudgeBench run {run_id}"
    )
    table = [{"slice": "overall", **results.overall_accuracy.model_dump()}] + [
        {"slice": k, **v.model_dump()} for k, v in results.category_accuracy.items()
    ]
    await acreate_table_artifact(table, key=table_key, description=f"Accuracy of run {run_id}")
    return paths


def write_outputs(
    run_id: str,
    results: RunResults,
    report_judgments: list[JudgmentRecord],
    jsonl_parts: list[Path],
    *,
    result_path: str,
    output_dir: str,
    db_url: str,
    judge_name: str,
    data_file: str,
    write_report: bool,
) -> dict[str, str]:
    """results.json, the JSONL, the metrics rows and the report; returns their paths."""

    paths: dict[str, str] = {}
    paths["results"] = str(write_json(result_path, results))
    paths["judgments"] = concatenate(
        jsonl_parts, storage.join(output_dir, output_file_name(data_file, judge_name, results.model))
    )
    engine = db.open_database(db_url)
    db.save_metrics(engine, metric_rows(run_id, results))
    if write_report:
        from judgebench_flows.scoring.report import history_point
        from judgebench_flows.scoring.report import write_report as render

        # Earlier runs only: the report adds this run from `results`, its position bias included.
        history = [
            history_point(r)
            for r in reversed(db.list_runs(engine, limit=30, config_key=results.run.config_key))
            if r.overall_accuracy is not None and r.run_id != run_id
        ]
        paths["report"] = str(render(storage.join(output_dir, "report.html"), results, report_judgments, history))
    return paths

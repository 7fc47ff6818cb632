"""The steps of an external-judge run that need no orchestrator: check, shard, finish.

`preflight` does every check a user can fail (judge file, function and signature, judge parameters,
data file, columns) so that `run_external` can refuse bad input before paying for a Prefect flow run,
and the flow can run it again when started some other way (a deployment). `finish` writes the outputs
and builds the result once all shards are scored.
"""

from __future__ import annotations

import functools
import json
import os

import pandas as pd
from pydantic import BaseModel, ConfigDict

from judgebench_flows.judges.external.config import ExternalJudgeConfig, UserMapping, judge_config
from judgebench_flows.judges.external.data import check_columns, read_data, with_results, write_scored
from judgebench_flows.judges.external.loader import JudgeFn, JudgeForm, load_judge
from judgebench_flows.judges.external.scoring import RowResult, score_rows
from judgebench_flows.judges.external.summary import ExternalRunResult, summarize


class Prepared(BaseModel):
    """What preflight found: the data, the judge's form and the config the judge will receive."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    frame: pd.DataFrame
    form: JudgeForm
    judge_config: UserMapping


def preflight(config: ExternalJudgeConfig) -> Prepared:
    """Validate the whole run up front; raises UserError with one line naming what is wrong."""
    _, form = load_judge_cached(config.external_judge_path, config.external_judge_function)
    params = judge_config(config)
    frame = read_data(config.data_path)
    check_columns(frame, config)
    return Prepared(frame=frame, form=form, judge_config=params)


def shards(frame: pd.DataFrame, shard_size: int) -> list[pd.DataFrame]:
    """Consecutive row slices of at most shard_size rows; concatenated, they are the frame in order."""
    return [frame.iloc[start : start + shard_size] for start in range(0, len(frame), shard_size)]


@functools.lru_cache(maxsize=16)
def _load_cached(judge_path: str, function_name: str, absolute: str, mtime_ns: int) -> tuple[JudgeFn, JudgeForm]:
    return load_judge(judge_path, function_name)


def load_judge_cached(judge_path: str, function_name: str) -> tuple[JudgeFn, JudgeForm]:
    """load_judge, cached per process by (path, function, file mtime).

    A judge file with costly module-level setup (a tokenizer, a lookup table) is then imported once per
    process rather than once per shard, and an edited file is still picked up. Failures are not cached.
    """
    try:
        mtime_ns = os.stat(judge_path).st_mtime_ns
    except OSError:
        mtime_ns = -1  # load_judge reports the missing file
    return _load_cached(judge_path, function_name, os.path.abspath(judge_path), mtime_ns)


def judge_shard(rows: pd.DataFrame, judge_path: str, function_name: str, config: UserMapping) -> list[RowResult]:
    """Load the judge by path and score the rows, so the same call works in any worker process."""
    judge, form = load_judge_cached(judge_path, function_name)
    return score_rows(judge, form, rows, config)


def finish(
    config: ExternalJudgeConfig, prepared: Prepared, results: list[RowResult], flow_run_id: str | None = None
) -> ExternalRunResult:
    """Write the scored rows and the summary JSON; return the summary."""
    frame = prepared.frame
    written = write_scored(with_results(frame, results), config)
    qids = frame[config.qid_column].tolist() if config.qid_column else list(range(len(frame)))
    result = summarize(
        results,
        qids,
        judge_path=config.external_judge_path,
        judge_function=config.external_judge_function,
        judge_form=prepared.form,
        data_path=config.data_path,
        output_files=written,
        result_path=str(config.summary_path()),
        flow_run_id=flow_run_id,
    )
    summary_path = config.summary_path()
    summary_path.parent.mkdir(parents=True, exist_ok=True)
    summary_path.write_text(json.dumps(result.model_dump(mode="json"), indent=2) + "\n", encoding="utf-8")
    return result

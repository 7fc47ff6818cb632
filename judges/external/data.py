"""Read the records to judge and write them back with their verdicts.

Input is chosen by extension: .csv, .jsonl (one JSON object per line; blank lines skipped) or .parquet.
CSV is read with only empty fields as missing: pandas' default would also turn the strings "NA",
"None", "null" and "nan" into NaN, and a model answering "None" must be judged on that answer.

Output always goes to `<stem>_scored.csv`; when the input was Parquet, also `<stem>_scored.parquet`,
because its column types then survive the round trip (CSV or JSONL input can hold mixed types per
column that Parquet would refuse).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from judgebench_flows.core.errors import UserError
from judgebench_flows.judges.external.config import COLUMN_OPTIONS, ExternalJudgeConfig
from judgebench_flows.judges.external.scoring import RowResult

RESULT_COLUMNS: tuple[str, ...] = ("evaluation_text", "score", "status", "error")
FORMATS: tuple[str, ...] = (".csv", ".jsonl", ".parquet")


def _read_jsonl(path: Path) -> pd.DataFrame:
    records = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line.rstrip("\r\n"))
            except json.JSONDecodeError as exc:
                raise UserError(f"Invalid JSON on line {number} of {path}: {exc.msg} (column {exc.colno})") from None
            if not isinstance(record, dict):
                raise UserError(f"Line {number} of {path} is not a JSON object (got {type(record).__name__})")
            records.append(record)
    return pd.DataFrame.from_records(records)


def read_data(data_path: str) -> pd.DataFrame:
    """The records as a DataFrame with a fresh 0..n-1 index; UserError naming the file otherwise."""
    path = Path(data_path)
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise UserError(f"Unsupported data file extension '{path.suffix}' for {data_path} (use {', '.join(FORMATS)})")
    if not path.is_file():
        raise UserError(f"Data file not found: {data_path}")
    try:
        if suffix == ".csv":
            frame = pd.read_csv(path, keep_default_na=False, na_values=[""])
        elif suffix == ".jsonl":
            frame = _read_jsonl(path)
        else:
            frame = pd.read_parquet(path)
    except UserError:
        raise
    except (OSError, ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        # pyarrow's errors are ValueError/OSError subclasses; pandas' parser errors name the line
        detail = " ".join(str(exc).split())
        raise UserError(f"Cannot read {data_path}: {type(exc).__name__}: {detail}") from None
    if frame.empty:
        raise UserError(f"No records in {data_path}")
    return frame.reset_index(drop=True)


def check_columns(frame: pd.DataFrame, config: ExternalJudgeConfig) -> None:
    """Every column the config names must exist, and the result columns must not overwrite any."""
    columns = [str(name) for name in frame.columns]
    for option in COLUMN_OPTIONS:
        name = getattr(config, option)
        if name is not None and name not in columns:
            raise UserError(
                f"Column '{name}' ({option}) not found in {config.data_path} (columns: {', '.join(columns)})"
            )
    for name in RESULT_COLUMNS:
        if name in columns:
            raise UserError(
                f"Column '{name}' in {config.data_path} would be overwritten by the judge's output; rename it"
            )


def with_results(frame: pd.DataFrame, results: list[RowResult]) -> pd.DataFrame:
    """The input rows, in their order, followed by the four result columns."""
    if len(results) != len(frame):
        raise ValueError(f"{len(results)} results for {len(frame)} rows")
    out = frame.copy()
    out["evaluation_text"] = [result.evaluation_text for result in results]
    out["score"] = pd.Series([result.score for result in results], dtype="float64", index=out.index)
    out["status"] = [result.status for result in results]
    out["error"] = [result.error for result in results]
    return out


def write_scored(scored: pd.DataFrame, config: ExternalJudgeConfig) -> list[str]:
    """Write the scored rows; returns the paths written (CSV first)."""
    out_dir = Path(config.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = Path(config.data_path).stem
    csv_path = out_dir / f"{stem}_scored.csv"
    scored.to_csv(csv_path, index=False)
    written = [str(csv_path)]
    if Path(config.data_path).suffix.lower() == ".parquet":
        parquet_path = out_dir / f"{stem}_scored.parquet"
        scored.to_parquet(parquet_path, index=False)
        written.append(str(parquet_path))
    return written

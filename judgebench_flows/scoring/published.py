"""Read judge outputs files in JudgeBench's `outputs/` record shape and score them with the official metric.

JudgeBench publishes every judge it evaluated as `outputs/dataset=D,response_model=M,judge_name=J,
judge_model=X.jsonl`: each line is a pair plus `judgments`, one per order (two orders, or one for a
single-game judge), each `{"judgment": {...}, "decision": ...}` or `null` when the call failed. Our own
runs write the same shape. Scoring them with the code that scores our runs (`metrics.pair_scores`) is
what makes a published number and one of ours comparable, so this module only turns lines into the
`metrics.Verdict` shape and never re-implements the metric.

Decisions are taken as recorded: anything other than A>B / B>A / A=B (a null, or a label such as "A<B"
that JudgeBench's parser let through) counts for neither side and makes the judgment invalid, exactly
as JudgeBench's own `compute_final_metrics` scores it. Every line counts, as it does there: a pair id
that appears twice is scored twice (its second line under a suffixed key).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from pydantic import JsonValue
from typing_extensions import TypedDict

from judgebench_flows.core.errors import UserError
from judgebench_flows.core.records import CATEGORIES, category_of, flip
from judgebench_flows.data import storage
from judgebench_flows.scoring import metrics
from judgebench_flows.scoring.result_types import Scored, SliceAccuracy
from judgebench_flows.scoring.results import slice_accuracy  # the same interval figures as results.json

OUTPUT_NAME = re.compile(
    r"^dataset=(?P<dataset>[^,]+),response_model=(?P<response_model>[^,]+)"
    r",judge_name=(?P<judge_name>[^,]+),judge_model=(?P<judge_model>.+)\.jsonl$"
)
DATA_NAME = re.compile(r"^dataset=(?P<dataset>[^,]+),response_model=(?P<response_model>[^,]+?)(?:\.jsonl)?$")
VALID_DECISIONS = ("A>B", "B>A", "A=B")


class RecordedJudgment(TypedDict, total=False):
    """One entry of an outputs line's `judgments` (null when the call failed): the judge's answer
    (`{"judge_model", "prompt", "response"}`, a reward model's `{"judge_model", "scores"}`) and the
    decision read from it; our runs add `status`, `error` and `order`. A file read is not trusted to
    hold this shape: its readers check what they use."""

    judgment: dict[str, JsonValue]
    decision: str | None
    status: str
    error: str | None
    order: int


class OutputsLine(TypedDict, total=False):
    """One line of an outputs file (JudgeBench's `outputs/` record shape): the pair's fields (a data
    file's extra fields too), the judge's name, our `--epochs` runs' `epoch`, and `judgments` by order."""

    pair_id: str
    source: str
    question: str
    response_A: str
    response_B: str
    label: str
    original_id: int | str | None
    response_model: str | None
    swapped: bool
    epoch: int
    judge_name: str
    judgments: list[RecordedJudgment | None]


@dataclass(frozen=True, slots=True)
class FileVerdict:
    """One recorded judgment as the metric reads it (`metrics.Verdict`): an outputs line's, or a stored run's."""

    pair_id: str
    order: int
    source: str
    category: str
    label: str
    status: str
    decision_for_pair: str
    epoch: int = 0


@dataclass
class OutputsFile:
    """One outputs file: what its name and records say about it, and its verdicts."""

    path: Path
    dataset: str
    response_model: str
    judge_name: str
    judge_model: str
    verdicts: list[FileVerdict] = field(default_factory=list)
    lines: int = 0
    orders: set[int] = field(default_factory=set)
    duplicate_lines: int = 0

    @property
    def mode(self) -> str:
        return "single-game" if self.orders == {1} else "both-orders"


def data_file_parts(data_file: str | None) -> tuple[str, str | None]:
    """(dataset, response_model) of a JudgeBench data file name; (stem, None) for any other name."""
    name = Path(data_file or "").name
    match = DATA_NAME.match(name)
    if match:
        return match["dataset"], match["response_model"]
    return name.removesuffix(".jsonl"), None


def judge_model_id(file_part: str, recorded: str | None) -> str:
    """The model id: JudgeBench writes `org/name` as `org_name` in file names, so the id recorded in the
    judgments wins when it maps to the file's spelling; otherwise the first `_` is read back as `/`."""
    if recorded and recorded.replace("/", "_") == file_part:
        return recorded
    if recorded and "_" not in file_part:
        return file_part
    return file_part.replace("_", "/", 1) if "_" in file_part else file_part


def _status_of(judgment: Any) -> tuple[str, str]:
    """(status, decision as shown) of one recorded judgment: failed (null), ok or invalid."""
    if judgment is None:
        return "failed", ""
    if not isinstance(judgment, dict):
        raise ValueError("a judgment is neither an object nor null")
    recorded_status = judgment.get("status")
    decision = judgment.get("decision")
    decision = decision.strip() if isinstance(decision, str) else ""
    if recorded_status == "failed":
        return "failed", ""
    if decision in VALID_DECISIONS:
        return "ok", decision
    # Kept as recorded: JudgeBench compares the raw string, so "A<B" matches neither label.
    return "invalid", decision


def verdicts_of_line(row: OutputsLine, key: str) -> list[FileVerdict]:
    """The verdicts of one outputs line; `key` is the pair's key in the metric (its id, or id#n)."""
    label = row["label"]
    if label not in ("A>B", "B>A"):
        raise ValueError(f"label {label!r} is not A>B or B>A")
    source = str(row["source"])
    judgments = row["judgments"]
    if not isinstance(judgments, list) or not 1 <= len(judgments) <= 2:
        raise ValueError("'judgments' must be a list of one or two judgments")
    verdicts = []
    for order, judgment in enumerate(judgments):
        status, decision = _status_of(judgment)
        verdicts.append(
            FileVerdict(
                pair_id=key,
                order=order,
                source=source,
                category=category_of(source),
                label=label,
                status=status,
                decision_for_pair=flip(decision) if order == 1 else decision,
            )
        )
    return verdicts


def iter_rows(path: Path | str) -> Iterator[tuple[int, OutputsLine]]:
    """(line number, record) for every non-blank line; a bad line is a UserError naming file and line.
    `path` may be an object-store URL (data.storage), streamed as a file is."""
    where, label = storage.shown(str(path)), storage.name(str(path))
    opened = storage.open_text(path)
    try:
        handle = opened.__enter__()
    except OSError as exc:
        raise UserError(f"cannot read {where}: {exc.strerror or exc}") from None
    try:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UserError(f"{label} line {number}: not JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise UserError(f"{label} line {number}: not a JSON object")
            yield number, cast(OutputsLine, row)  # its shape unchecked: its readers check what they use
    except UnicodeDecodeError:
        raise UserError(f"cannot read {where}: not UTF-8 text") from None
    except OSError as exc:
        raise UserError(f"cannot read {where}: {exc.strerror or exc}") from None
    finally:
        opened.__exit__(None, None, None)


def _recorded_judge_model(row: OutputsLine) -> str | None:
    for judgment in row.get("judgments") or []:
        if isinstance(judgment, dict) and isinstance(judgment.get("judgment"), dict):
            model = judgment["judgment"].get("judge_model")
            if isinstance(model, str) and model:
                return model
    return None


def _epoch_of(row: OutputsLine) -> int:
    """The line's `epoch` (written by runs with `--epochs`), 0 when it has none or not a count."""
    epoch = row.get("epoch")
    return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) and epoch >= 0 else 0


def read_outputs_file(path: str | Path) -> OutputsFile:
    """Every line of an outputs file as verdicts, with the judge and response model it records."""
    path = Path(path)
    named = OUTPUT_NAME.match(path.name)
    seen: dict[str, int] = {}
    verdicts: list[FileVerdict] = []
    first: OutputsLine | None = None
    recorded_model: str | None = None
    lines = duplicates = 0
    orders: set[int] = set()
    for number, row in iter_rows(path):
        try:
            pair_id = str(row["pair_id"])
            epoch = _epoch_of(row)  # our --epochs files: a line per epoch of a pair, not a duplicate
            count = seen.get(f"{pair_id}\0{epoch}", 0)
            seen[f"{pair_id}\0{epoch}"] = count + 1
            duplicates += count > 0
            line_verdicts = verdicts_of_line(row, pair_id if count == 0 else f"{pair_id}#{count + 1}")
            if epoch:
                line_verdicts = [replace(verdict, epoch=epoch) for verdict in line_verdicts]
        except KeyError as exc:
            raise UserError(f"{path.name} line {number}: missing field {exc.args[0]!r}") from None
        except (TypeError, ValueError) as exc:
            raise UserError(f"{path.name} line {number}: {exc}") from None
        first = first or row
        recorded_model = recorded_model or _recorded_judge_model(row)
        orders.add(len(line_verdicts))
        verdicts.extend(line_verdicts)
        lines += 1
    if not lines:
        raise UserError(f"{path.name}: no judged pairs in the file")
    assert first is not None
    if named:
        dataset, response_model, judge_name = named["dataset"], named["response_model"], named["judge_name"]
        judge_model = judge_model_id(named["judge_model"], recorded_model)
    else:
        dataset = "judgebench"
        response_model = str(first.get("response_model") or path.stem)
        judge_name = str(first.get("judge_name") or "unknown")
        judge_model = recorded_model or "unknown"
    return OutputsFile(path, dataset, response_model, judge_name, judge_model, verdicts, lines, orders, duplicates)


def score_verdicts(
    verdicts: Sequence[metrics.Verdict],
    *,
    seed: int,
    resamples: int,
    known: Mapping[tuple[str, str], SliceAccuracy] | None = None,
    scores: dict[str, metrics.PairScore] | None = None,
    rule: str = "judgebench",
    categories: tuple[str, ...] = CATEGORIES,
) -> Scored:
    """Overall and per-category accuracy with bootstrap intervals, plus consistency and invalid counts,
    computed exactly as a run's results.json computes them (same metric, same seeded bootstrap).

    `known`: the slices a run stored, by (scope, name) as its metric rows ("overall"/"overall",
    "category"/name), scored with this `seed` and `resamples`: a slice whose counts match takes its
    stored interval (`slice_accuracy`), the same numbers without drawing them again. `scores`: the
    verdicts' `metrics.pair_scores`, when the caller has them already. `rule` and `categories`: the
    benchmark's official rule and slices (`Benchmark.rule`, `Benchmark.categories`; JudgeBench's by default)."""
    scores = metrics.pair_scores(verdicts, rule) if scores is None else scores
    parts = metrics.slices(scores, categories)
    stored = known or {}

    def sliced(scope: str, name: str, members: list[metrics.PairScore]) -> SliceAccuracy:
        return slice_accuracy(members, seed, resamples, stored.get((scope, name)))

    sliced_categories = {name: sliced("category", name, members) for name, members in parts["category"].items()}
    return Scored(
        pairs=len(scores),
        overall_accuracy=sliced("overall", "overall", parts["overall"]["overall"]),
        category_accuracy={
            name: sliced_categories[name] for name in [*categories, *sorted(set(sliced_categories) - set(categories))]
        },
        consistency=metrics.consistency(scores),
        invalid_judgments=sum(1 for v in verdicts if v.status == "invalid"),
        failed_judgments=sum(1 for v in verdicts if v.status == "failed"),
    )


def outputs_files(checkout_path: Path) -> list[Path]:
    """The outputs/*.jsonl files of a checkout, sorted; a missing or empty outputs/ is a UserError."""
    outputs = checkout_path / "outputs"
    if not outputs.is_dir():
        raise UserError(
            f"no outputs/ directory in the checkout at {checkout_path} (use a JudgeBench ref that publishes outputs)"
        )
    files = sorted(p for p in outputs.glob("*.jsonl") if p.is_file())
    if not files:
        raise UserError(f"no .jsonl files in {outputs}")
    return files


LFS_POINTER = b"version https://git-lfs"


def why_unreadable(path: Path, error: UserError) -> str:
    """A short reason a published file could not be scored: a Git LFS pointer (the repository keeps the
    file elsewhere), or the reading error (bad JSON, a missing field, not UTF-8)."""
    try:
        with path.open("rb") as handle:
            if handle.read(len(LFS_POINTER)) == LFS_POINTER:
                return "a Git LFS pointer, not the file"
    except OSError:
        return "cannot be read"
    return str(error).removeprefix(f"{path.name} ").removeprefix(f"{path.name}: ")


def missing_from_checkout(checkout_path: Path) -> list[str]:
    """outputs/*.jsonl files the checkout's commit holds but its work tree lacks (a blob not fetched)."""
    import subprocess

    try:
        listed = subprocess.run(
            ["git", "-C", str(checkout_path), "ls-files", "-z", "--", "outputs/*.jsonl"],
            capture_output=True,
            timeout=60,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    names = [name for name in listed.decode("utf-8", "replace").split("\0") if name]
    return sorted(Path(name).name for name in names if not (checkout_path / name).is_file())


UNREAD_LISTED = 3  # unreadable files named in the note; more are counted, the whole list is in the JSON


def unread_note(ranked: int, unread: list[tuple[str, str]]) -> str:
    """One line: how many published files were scored, and which could not be, and why; a long list is
    summarized (the first few, and where the whole list is: the leaderboard JSON's `unread`)."""
    total = ranked + len(unread)
    named = "; ".join(f"{name} ({reason})" for name, reason in unread[:UNREAD_LISTED])
    if len(unread) <= UNREAD_LISTED:
        return f"ranked {ranked} of {total} published files; {len(unread)} could not be read: {named}"
    return (
        f"ranked {ranked} of {total} published files; {len(unread)} could not be read, e.g. {named}; "
        "every one with its reason: the leaderboard JSON's `unread` (--format json)"
    )


__all__ = [
    "FileVerdict",
    "missing_from_checkout",
    "unread_note",
    "why_unreadable",
    "OutputsFile",
    "data_file_parts",
    "judge_model_id",
    "OutputsLine",
    "RecordedJudgment",
    "iter_rows",
    "outputs_files",
    "read_outputs_file",
    "score_verdicts",
    "verdicts_of_line",
]

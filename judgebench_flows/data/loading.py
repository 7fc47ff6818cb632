"""Read JudgeBench pairs from JSONL, validating every row.

A malformed row is skipped, named by its line number and counted in the results, so one bad line costs
one pair rather than the run. Problems that would make every number wrong (duplicate pair ids, a file
with no usable pair) stop the run instead.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from pydantic import ValidationError

from judgebench_flows.core.errors import UserError
from judgebench_flows.core.records import Pair, flip

T = TypeVar("T")


@dataclass(frozen=True)
class SkippedRow:
    line: int
    reason: str


@dataclass
class LoadedPairs:
    pairs: list[Pair]
    skipped: list[SkippedRow] = field(default_factory=list)


def _reason(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors()[:3]:
        where = ".".join(str(p) for p in error["loc"]) or "row"
        parts.append(f"{where}: {'missing' if error['type'] == 'missing' else error['msg']}")
    return "; ".join(parts)


def _rows(path: Path) -> Iterator[tuple[int, int, Pair | SkippedRow]]:
    """(line number, byte offset, pair or skip reason) for every non-blank line, validated."""
    first_line: dict[str, int] = {}
    offset = 0
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            line_offset, offset = offset, offset + len(raw)
            # A byte order mark (common from Windows editors) would otherwise cost the first row.
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as exc:  # never judged with U+FFFD in place of the bytes: skipped, named
                yield (
                    number,
                    line_offset,
                    SkippedRow(
                        number, f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at byte {exc.start + 1} of the line)"
                    ),
                )
                continue
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                yield number, line_offset, SkippedRow(number, f"not valid JSON ({exc.msg} at column {exc.colno})")
                continue
            if not isinstance(row, dict):
                yield number, line_offset, SkippedRow(number, f"expected a JSON object, got {type(row).__name__}")
                continue
            row.pop("swapped", None)
            try:
                pair = Pair.model_validate(row)
            except ValidationError as exc:
                yield number, line_offset, SkippedRow(number, _reason(exc))
                continue
            if pair.pair_id in first_line:
                raise UserError(
                    f"{path.name} line {number}: duplicate pair_id '{pair.pair_id}' (first on line {first_line[pair.pair_id]})"
                )
            first_line[pair.pair_id] = number
            yield number, line_offset, pair


def _no_pairs(path: Path, skipped: list[SkippedRow]) -> UserError:
    detail = f"; {len(skipped)} rows skipped, first: line {skipped[0].line}: {skipped[0].reason}" if skipped else ""
    return UserError(f"{path}: no valid pairs{detail}")


def _scan(path: str | Path, keep: Callable[[int, Pair], T]) -> tuple[list[T], list[SkippedRow]]:
    """`keep(byte offset, pair)` of every valid pair, and the skipped rows; a file with no pair stops the run."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"data file not found: {path}")
    kept: list[T] = []
    skipped: list[SkippedRow] = []
    for _, offset, item in _rows(path):
        if isinstance(item, SkippedRow):
            skipped.append(item)
        else:
            kept.append(keep(offset, item))
    if not kept:
        raise _no_pairs(path, skipped)
    return kept, skipped


def load_pairs(path: str | Path) -> LoadedPairs:
    """Every valid pair in memory: for small files and tools; runs use `index_pairs` and read shards lazily."""
    pairs, skipped = _scan(path, lambda _, pair: pair)
    return LoadedPairs(pairs, skipped)


@dataclass
class PairIndex:
    """Where each valid pair starts in the file: a run reads its shards from here one at a time, so memory
    holds a few shards rather than the whole dataset."""

    path: str
    offsets: list[int]
    skipped: list[SkippedRow] = field(default_factory=list)


def index_pairs(path: str | Path) -> PairIndex:
    """Validate the whole file once (so bad rows and duplicate ids are known up front), keep only offsets."""
    offsets, skipped = _scan(path, lambda offset, _: offset)
    return PairIndex(str(Path(path)), offsets, skipped)


def select_pairs(path: str | Path, max_samples: int | None, seed: int) -> PairIndex:
    """The pairs a run judges: the file indexed (see `index_pairs`), then a seeded subset if asked."""
    index = index_pairs(path)
    index.offsets = sample_pairs(index.offsets, max_samples, seed)
    return index


def read_pairs_at(path: str | Path, offsets: list[int]) -> list[Pair]:
    """The pairs starting at these byte offsets (already validated by `index_pairs`)."""
    pairs = []
    with open(path, "rb") as handle:
        for offset in offsets:
            handle.seek(offset)
            raw = handle.readline().decode("utf-8-sig" if offset == 0 else "utf-8")  # validated by index_pairs
            row = json.loads(raw)
            row.pop("swapped", None)
            pairs.append(Pair.model_validate(row))
    return pairs


def sample_pairs(pairs: list[T], max_samples: int | None, seed: int) -> list[T]:
    """A seeded subset that keeps file order, so the same seed always judges the same pairs (works on
    pairs or on their offsets alike: the choice depends only on the count and the seed)."""
    if max_samples is None or max_samples >= len(pairs):
        return pairs
    chosen = set(random.Random(seed).sample(range(len(pairs)), max_samples))
    return [pair for i, pair in enumerate(pairs) if i in chosen]


def shuffle_responses(pairs: list[Pair], seed: int) -> list[Pair]:
    """Swap A and B (flipping the label) for a seeded half of the pairs; each pair's coin depends only on
    (seed, pair_id), so subsets and reorderings of the file get the same swaps."""
    shuffled = []
    for pair in pairs:
        if random.Random(f"{seed}:{pair.pair_id}").random() < 0.5:
            data = pair.model_dump()
            data.update(response_A=pair.response_B, response_B=pair.response_A, label=flip(pair.label), swapped=True)
            pair = Pair.model_validate(data)
        shuffled.append(pair)
    return shuffled

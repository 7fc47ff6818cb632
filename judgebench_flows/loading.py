"""Read JudgeBench pairs from JSONL, validating every row.

A malformed row is skipped, named by its line number and counted in the results, so one bad line costs
one pair rather than the run. Problems that would make every number wrong (duplicate pair ids, a file
with no usable pair) stop the run instead.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from judgebench_flows.errors import UserError
from judgebench_flows.records import Pair, flip


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


def load_pairs(path: str | Path) -> LoadedPairs:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"data file not found: {path}")
    pairs: list[Pair] = []
    skipped: list[SkippedRow] = []
    first_line: dict[str, int] = {}
    # utf-8-sig: a byte order mark (common from Windows editors) would otherwise cost the first row.
    with path.open(encoding="utf-8-sig", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                skipped.append(SkippedRow(number, f"not valid JSON ({exc.msg} at column {exc.colno})"))
                continue
            if not isinstance(row, dict):
                skipped.append(SkippedRow(number, f"expected a JSON object, got {type(row).__name__}"))
                continue
            row.pop("swapped", None)
            try:
                pair = Pair.model_validate(row)
            except ValidationError as exc:
                skipped.append(SkippedRow(number, _reason(exc)))
                continue
            if pair.pair_id in first_line:
                raise UserError(f"{path.name} line {number}: duplicate pair_id '{pair.pair_id}' (first on line {first_line[pair.pair_id]})")
            first_line[pair.pair_id] = number
            pairs.append(pair)
    if not pairs:
        detail = f"; {len(skipped)} rows skipped, first: line {skipped[0].line}: {skipped[0].reason}" if skipped else ""
        raise UserError(f"{path}: no valid pairs{detail}")
    return LoadedPairs(pairs, skipped)


def sample_pairs(pairs: list[Pair], max_samples: int | None, seed: int) -> list[Pair]:
    """A seeded subset that keeps file order, so the same seed always judges the same pairs."""
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

"""Re-parse the raw answers of a recorded outputs file with our parser, without calling any model.

A judge's accuracy depends on its parser as much as on its model: the same answer read by two parsers
can give two verdicts. Every outputs file (JudgeBench's `outputs/` or one of our runs) keeps each
judgment's raw text in `judgment.response`, so re-parsing it shows exactly which decisions our parser
reads differently from the recorded ones, and what the metric becomes, for free. Arena-Hard's follow-up
turn is already in that text (both answers joined), as our judge parses it.

Judgments whose call failed (null, or status "failed") have no answer to read and stay failed. A file
whose judgments carry no text at all (a reward model's scores) cannot be re-parsed: that is bad input.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from judgebench_flows.core.errors import UserError
from judgebench_flows.data import storage
from judgebench_flows.judges.custom import ParseFailed
from judgebench_flows.scoring.published import (
    VALID_DECISIONS,
    FileVerdict,
    OutputsLine,
    RecordedJudgment,
    iter_rows,
    score_verdicts,
    verdicts_of_line,
)
from judgebench_flows.scoring.result_types import Scored, Section


def judge_for(judge_type: str, judge_template: str | None = None, templates_dir: str | None = None) -> Any:
    """Our judge of that type, for its parser (prompts are not rendered, so any template set will do)."""
    from judgebench_flows.judges import get_judge

    if judge_type == "external" and not judge_template:
        raise UserError(
            "--judge-type external has no parser to re-run: rescore needs an LLM judge type or --judge-template"
        )
    judge = get_judge(judge_type, templates_dir, judge_template)
    if not callable(getattr(judge, "parse", None)):
        raise UserError(
            f"--judge-type {judge_type} has no text parser to re-run (it scores, it does not write a verdict)"
        )
    return judge


def _recorded(judgment: RecordedJudgment) -> str:
    decision = judgment.get("decision")
    return decision.strip() if isinstance(decision, str) else ""


class DecisionChange(BaseModel):
    """A recorded decision our parser reads differently (None: no decision)."""

    pair_id: str
    order: int
    source: str | None
    label: str | None
    recorded: str | None
    ours: str | None


class Rescore(Section):
    """`judgebench rescore`'s result (also its --result-path JSON, in this order): what was re-parsed, the
    decisions that differ, and the metric on the recorded and on the re-parsed decisions."""

    file: str
    judge_type: str
    judge_name_in_file: list[str]
    pairs: int
    judgments: int
    reparsed: int
    failed: int
    no_text: int
    changed: int
    changed_pairs: list[str]
    changes: list[DecisionChange]
    recorded: Scored
    rescored: Scored
    output: str | None = None  # the re-parsed file, when written

    _optional = frozenset({"output"})


def reparsed_line(row: OutputsLine, judge: Any, counts: dict[str, int], changes: list[DecisionChange]) -> OutputsLine:
    """A copy of one outputs line with our parser's decisions; counts what was re-parsed and records
    every decision that differs from the file's in `changes`."""
    new_row = copy.deepcopy(row)
    for order, judgment in enumerate(new_row["judgments"]):
        counts["judgments"] += 1
        if judgment is None or judgment.get("status") == "failed":
            counts["failed"] += 1
            continue
        text = (judgment.get("judgment") or {}).get("response")
        if not isinstance(text, str) or not text.strip():
            counts["no_text"] += 1
            continue
        try:
            ours = judge.parse(text) or ""
        except ParseFailed:
            ours = ""
        counts["reparsed"] += 1
        recorded = _recorded(judgment)
        if ours != recorded:
            changes.append(
                DecisionChange(
                    pair_id=str(row["pair_id"]),
                    order=order,
                    source=row.get("source"),
                    label=row.get("label"),
                    recorded=recorded or None,
                    ours=ours or None,
                )
            )
        judgment["decision"] = ours or None
        if "status" in judgment:
            judgment["status"] = "ok" if ours in VALID_DECISIONS else "invalid"
    return new_row


def rescore_file(
    path: str | Path,
    judge_type: str,
    *,
    judge_template: str | None = None,
    templates_dir: str | None = None,
    seed: int = 42,
    resamples: int = 2000,
    output: str | Path | None = None,
) -> Rescore:
    """Recorded vs re-parsed decisions and metrics of one outputs file; optionally write the re-parsed file."""
    path = str(path)
    label = storage.name(path)
    storage.check_readable("rescore", path)
    if output and storage.is_url(str(output)):
        storage.check_url("--output", str(output))
    judge = judge_for(judge_type, judge_template, templates_dir)
    recorded_verdicts: list[FileVerdict] = []
    ours_verdicts: list[FileVerdict] = []
    changes: list[DecisionChange] = []
    rewritten: list[OutputsLine] = []
    counts = {"judgments": 0, "reparsed": 0, "failed": 0, "no_text": 0}
    file_judges: set[str] = set()
    seen: dict[str, int] = {}
    for number, row in iter_rows(path):
        try:
            pair_id = str(row["pair_id"])
            key = pair_id if pair_id not in seen else f"{pair_id}#{seen[pair_id] + 1}"
            seen[pair_id] = seen.get(pair_id, 0) + 1
            recorded_verdicts.extend(verdicts_of_line(row, key))
            new_row = reparsed_line(row, judge, counts, changes)
            ours_verdicts.extend(verdicts_of_line(new_row, key))
        except KeyError as exc:
            raise UserError(f"{label} line {number}: missing field {exc.args[0]!r}") from None
        except (TypeError, ValueError, AttributeError) as exc:
            raise UserError(f"{label} line {number}: {exc}") from None
        file_judges.add(str(row.get("judge_name") or ""))
        rewritten.append(new_row)
    if not rewritten:
        raise UserError(f"{label}: no judged pairs in the file")
    if not counts["reparsed"]:
        raise UserError(
            f"{label}: no judge answers to re-parse (every judgment.response is empty or failed; a reward model's scores cannot be re-parsed)"
        )
    result = Rescore(
        file=storage.shown(path),
        judge_type=judge_template or judge_type,
        judge_name_in_file=sorted(j for j in file_judges if j),
        pairs=len(rewritten),
        judgments=counts["judgments"],
        reparsed=counts["reparsed"],
        failed=counts["failed"],
        no_text=counts["no_text"],
        changed=len(changes),
        changed_pairs=list(dict.fromkeys(c.pair_id for c in changes)),
        changes=changes,
        recorded=score_verdicts(recorded_verdicts, seed=seed, resamples=resamples),
        rescored=score_verdicts(ours_verdicts, seed=seed, resamples=resamples),
    )
    if output:
        from judgebench_flows.scoring.results import write_jsonl

        result.output = str(write_jsonl(output, rewritten))
    return result


__all__ = ["rescore_file", "judge_for"]

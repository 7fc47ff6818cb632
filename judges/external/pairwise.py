"""A pairwise external judge deciding JudgeBench pairs in-process, with no LLM call.

It goes through the same flow as an LLM judge (both orders, the official metric, publishing), so a
deterministic baseline is scored exactly like a model. The function has the row form with a decision in
place of a score: `evaluate(row, config) -> (text, "A>B" | "B>A" | "A=B" | "")`; the row holds the pair's
fields with `response_A`/`response_B` in the order shown to the judge.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from judgebench_flows.core.errors import UserError
from judgebench_flows.judges.external.config import UserMapping
from judgebench_flows.judges.external.loader import load_judge
from judgebench_flows.judges.external.scoring import InvalidJudgeOutput, check_decision
from judgebench_flows.judges.procedure import ModelCall, Outcome, Sampling

if TYPE_CHECKING:
    from judgebench_flows.core.records import Pair


class ExternalPairwiseJudge:
    """Decides a pair in this process: a `Judge` that ignores its model call and has no first turn."""

    api = "chat"  # the run's caller is never used
    first_turn = None
    follow_up = None

    def __init__(self, path: str, function: str = "evaluate", config: UserMapping | None = None):
        self._function, form = load_judge(path, function)
        if form != "row":
            raise UserError(
                f"Judge function '{function}' in {path} must take a row (row, config) to decide JudgeBench pairs"
            )
        self.path = Path(path)
        self.config = {"reference_column": "ground_truth", **(config or {})}
        self.name = f"external:{self.path.stem}"
        self.sampling: Sampling = {}

    def decide(self, pair: Pair, answer_A: str, answer_B: str) -> tuple[str, str, str | None]:
        """(text, decision, error): a judge that raises or breaks the contract gives an invalid judgment."""
        import pandas as pd  # here, not at import: a run of a built-in judge does not load pandas before its first call

        row = pd.Series({**pair.model_dump(), "response_A": answer_A, "response_B": answer_B})
        try:
            text, decision = check_decision(self._function(row, dict(self.config)))
        except InvalidJudgeOutput as exc:
            return "", "", f"InvalidJudgeOutput: {exc}"
        except Exception as exc:  # the user's judge: its error belongs to this one judgment
            return "", "", f"{type(exc).__name__}: {exc}"
        return text, decision, None

    def is_final(self, text: str) -> bool:
        return False

    async def judge(self, pair: Pair, orders: tuple[int, ...], call: ModelCall) -> list[Outcome]:
        outcomes = []
        for order in orders:
            a, b = (pair.response_A, pair.response_B) if order == 0 else (pair.response_B, pair.response_A)
            started = time.perf_counter()
            text, decision, error = self.decide(pair, a, b)
            status: Literal["ok", "invalid"] = "ok" if decision else "invalid"
            outcomes.append(
                Outcome(
                    status,
                    decision,
                    "",
                    text,
                    error or (None if decision else "no decision"),
                    [],
                    time.perf_counter() - started,
                )
            )
        return outcomes

    def fingerprint(self) -> str:
        source = self.path.read_bytes() if self.path.is_file() else b""
        return "|".join(
            [self.name, hashlib.sha256(source).hexdigest(), json.dumps(self.config, sort_keys=True, default=str)]
        )

"""`Evaluation`: a run's typed results (results.json as `RunResults`) with pandas views of them.

The views are built from the typed fields on demand, so the model stays results.json and the frames are
what a notebook shows: accuracy with its 95% bootstrap interval per slice, and the judgments one row each
(as the results database keeps them: no prompt text).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import PrivateAttr

from judgebench_flows.core.records import JudgmentRecord
from judgebench_flows.scoring.result_types import SliceAccuracy
from judgebench_flows.scoring.run_results import RunResults

if TYPE_CHECKING:
    import pandas as pd

ACCURACY_COLUMNS = ["accuracy", "ci_low", "ci_high", "correct_count", "valid_samples", "total_samples"]
JUDGMENT_COLUMNS = [
    "pair_id",
    "order",
    "epoch",
    "source",
    "category",
    "label",
    "status",
    "decision",
    "decision_for_pair",
    "response",
    "error",
    "latency_s",
    "calls",
    "cached_calls",
    "prompt_tokens",
    "completion_tokens",
    "reasoning_tokens",
]


class Evaluation(RunResults):
    """What `evaluate` returns: every field of results.json, typed (`overall_accuracy`,
    `category_accuracy`, `source_accuracy`, `consistency`, `epochs`, `noise`, `invalid`, `usage`,
    `regression`, `run`, `outputs`), and pandas views of them.

    The frames are built from the typed fields when asked for, so the object stays results.json (`as_json()`
    writes it back) and the judgments are the run's rows in its results database (no prompt text).

    Attributes:
        overall_accuracy: JudgeBench's accuracy over every pair, with its seeded 95% bootstrap interval.
        category_accuracy: The same per category (mmlu-pro, livebench-reasoning, ...).
        usage: What the run sent and paid: judgments, calls, cached calls, tokens, cost.
        run: The run's identity: its id, Prefect flow run, status and timings.

    Examples:
        >>> evaluation = judgebench_flows.evaluate(model="gpt-4o-mini", max_samples=20)  # doctest: +SKIP
        >>> evaluation.overall_accuracy.accuracy, evaluation.overall_accuracy.ci_low  # doctest: +SKIP
        (0.65, 0.5)
        >>> evaluation.accuracy().loc["category"]  # doctest: +SKIP
        >>> evaluation.judgments()[["pair_id", "decision_for_pair", "label"]]  # doctest: +SKIP
    """

    _judgments: list[JudgmentRecord] = PrivateAttr(default_factory=list)

    @classmethod
    def of(cls, results: RunResults, judgments: list[JudgmentRecord]) -> Evaluation:
        evaluation = cls.model_validate(results.as_json())
        evaluation._judgments = judgments
        return evaluation

    def accuracy(self) -> pd.DataFrame:
        """Every slice in one frame: `scope` (overall, category, source) and `name` as the index, the
        accuracy with its interval and counts as columns."""
        import pandas as pd

        return pd.concat(
            [
                _slices({"overall": self.overall_accuracy}, "overall"),
                _slices(self.category_accuracy, "category"),
                _slices(self.source_accuracy, "source"),
            ]
        ).set_index(["scope", "name"])

    def by_category(self) -> pd.DataFrame:
        """Accuracy per category (JudgeBench's mmlu-pro, livebench-reasoning, ...; LLMBar's Natural and
        Adversarial), indexed by category."""
        return _slices(self.category_accuracy, "category").drop(columns="scope").set_index("name")

    def by_source(self) -> pd.DataFrame:
        """Accuracy per source of the questions (the data's `source` field), indexed by source."""
        return _slices(self.source_accuracy, "source").drop(columns="scope").set_index("name")

    def official_statistics(self) -> pd.Series:
        """The benchmark's own statistics, keys and values as its code writes them: LLMBar's statistics.json
        fields (`official`: "correct_average" "94.5%", the kappas, ...); for JudgeBench, whose official
        number is the accuracy results.json always held, `accuracy` alone."""
        import pandas as pd

        official: dict[str, str | float | None] = {**(self.official or {"accuracy": self.overall_accuracy.accuracy})}
        return pd.Series(official, name=self.benchmark or "judgebench", dtype=object)

    def by_epoch(self) -> pd.DataFrame:
        """Each epoch's official accuracy (`--epochs K`; one row with one epoch), indexed by epoch, and the
        judge's own noise beside them in `noise` (typed: `JudgeNoise`, None when not measured)."""
        import pandas as pd

        accuracies: list[float | None] = [self.overall_accuracy.accuracy]
        if self.epoch_accuracy:
            accuracies = [*self.epoch_accuracy]
        return pd.DataFrame({"accuracy": accuracies}, index=pd.RangeIndex(len(accuracies), name="epoch")).astype(float)

    def judgments(self) -> pd.DataFrame:
        """The run's judgments, one row each (a pair judged in both orders is two rows: `order` 0 and 1);
        `decision_for_pair` is the verdict mapped back to the pair, what the metric compares with `label`."""
        import pandas as pd

        rows = [record.model_dump(include=set(JUDGMENT_COLUMNS)) for record in self._judgments]
        return pd.DataFrame(rows, columns=JUDGMENT_COLUMNS)


def _slices(slices: dict[str, SliceAccuracy], scope: str) -> pd.DataFrame:
    import pandas as pd

    rows = [
        {"scope": scope, "name": name, **acc.model_dump(include=set(ACCURACY_COLUMNS))} for name, acc in slices.items()
    ]
    frame = pd.DataFrame(rows, columns=["scope", "name", *ACCURACY_COLUMNS])
    return frame.astype({"accuracy": float, "ci_low": float, "ci_high": float})


__all__ = ["Evaluation"]

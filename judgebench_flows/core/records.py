"""Records that cross module boundaries: a JudgeBench pair, one judgment of it, and accuracy figures.

These are the contract between loading, judging, aggregation, publishing and the database, so they are
pydantic models with explicit fields rather than loose dicts.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Label = Literal["A>B", "B>A"]
# What a judge may decide: "" means it gave no usable verdict.
Decision = Literal["A>B", "B>A", "A=B", ""]
DECISIONS: tuple[str, ...] = ("A>B", "B>A", "A=B", "")
CATEGORIES: tuple[str, ...] = ("mmlu-pro", "livebench-reasoning", "livebench-math", "livecodebench")


def flip(decision: str) -> str:
    """The same verdict seen from the other order: A>B <-> B>A; ties and blanks stay as they are."""
    if decision == "A>B":
        return "B>A"
    if decision == "B>A":
        return "A>B"
    return decision


def category_of(source: str) -> str:
    """JudgeBench's category is the source's known prefix (mmlu-pro-law -> mmlu-pro); a source named as a
    folder is in its first folder (LLMBar's Adversarial/Neighbor -> Adversarial); else the source."""
    for category in CATEGORIES:
        if source == category or source.startswith(category + "-"):
            return category
    return source.split("/", 1)[0] if "/" in source.strip("/") else source


class Pair(BaseModel):
    """One JudgeBench response pair, as in its data/*.jsonl files (unknown extra fields are kept).

    The plug-in point for a benchmark of one's own: any JSONL file of rows with these fields is judged as
    JudgeBench's are (`--data-path` / `evaluate(data_path=...)`); a row that does not validate is skipped,
    named by its line and counted (data/loading.py).

    Attributes:
        pair_id: Unique in the file (a duplicate stops the run).
        source: Where the pair comes from (e.g. "mmlu-pro-law"); its category is derived from it.
        question: The question both responses answer.
        response_A, response_B: The two responses.
        label: The better response: "A>B" or "B>A".
        original_id, response_model: Optional provenance, kept in the results.

    Examples:
        A row of a pairs file::

            {"pair_id": "p1", "source": "mmlu-pro-law", "question": "...", "response_A": "...",
             "response_B": "...", "label": "A>B"}

        >>> Pair.model_validate_json(line).category  # doctest: +SKIP
        'mmlu-pro'
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    pair_id: str = Field(min_length=1)
    source: str = Field(min_length=1)
    question: str
    response_A: str
    response_B: str
    label: Label
    original_id: int | str | None = None
    response_model: str | None = None
    # True when --shuffle-responses swapped A and B (and flipped the label) for this pair.
    swapped: bool = False

    @property
    def category(self) -> str:
        return category_of(self.source)


JudgmentStatus = Literal["ok", "invalid", "failed"]
# A run that measured its judge: one that regressed finished too (that is how it was found to drop).
FINISHED = ("completed", "regressed")


class JudgmentRecord(BaseModel):
    """One judgment of one pair in one order.

    order 0 shows the pair as stored (A first); order 1 shows B first. `decision` is the verdict as the
    judge gave it for what it was shown; `decision_for_pair` maps it back to the pair's own A/B, which is
    what the metric compares with `label`. `status` is "ok" only for a parsed verdict: "invalid" keeps an
    unparseable answer with its raw text, "failed" a call that never got an answer (with `error`).
    """

    pair_id: str
    order: Literal[0, 1]
    # Which sample of the pair (`--epochs K`: every pair judged K times in each order); 0 for one epoch.
    epoch: int = Field(default=0, ge=0)
    source: str
    category: str
    label: Label
    status: JudgmentStatus
    decision: Decision = ""
    decision_for_pair: Decision = ""
    judge_model: str
    prompt: str = ""
    response: str = ""
    error: str | None = None
    latency_s: float = 0.0
    calls: int = 0
    cached_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0  # of completion_tokens, spent by a reasoning model before its answer
    # A reward model's scores of [the first shown response, the second] (JudgeBench's `judgment.scores`).
    scores: list[float] | None = None


class Accuracy(BaseModel):
    """Accuracy of one slice; `accuracy` is correct_count / total_samples (the official denominator),
    None for a slice with no pairs (a category absent from the data), which is not the same as 0."""

    accuracy: float | None
    correct_count: int
    valid_samples: int
    total_samples: int
    # With `--epochs K` each pair counts K times: `accuracy` is correct_count / (total_samples * epochs),
    # the mean of the K epochs' official accuracies (`total_samples` stays the pairs).
    epochs: int = 1
    ci_low: float | None = None
    ci_high: float | None = None

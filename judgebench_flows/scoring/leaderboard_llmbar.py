"""LLMBar's published evaluators as leaderboard rows, and each judge's averages as LLMBar's paper reports them.

LLMBar publishes, per subset, `Dataset/LLMBar/<subset>/evaluators/<Model>/<Strategy>/result.json` for its
GPT-4 and ChatGPT evaluators: per instance (in dataset.json's order) its `results`, whose last stage holds
both orders' parsed winners, "1", "2" or null, the swapped order's (`swap = True`) already mapped back to
the instance. Those winners become verdicts as a run's would be stored (pair id `<subset>/<index>`, order 0
the `swap = False` one, "1" -> "A>B", "2" -> "B>A", null -> invalid) and are scored by LLMBar's rule like
our runs, so a published row and one of ours are comparable; the row's accuracy is then that evaluator's
`correct_average`. Evaluators that publish a statistics.json only (no verdicts) are not listed: a note
says how many.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel

from judgebench_flows.core.benchmarks import LLMBAR
from judgebench_flows.core.benchmarks.llmbar import ADVERSARIAL, NATURAL
from judgebench_flows.core.errors import UserError
from judgebench_flows.core.records import category_of
from judgebench_flows.scoring.published import FileVerdict
from judgebench_flows.scoring.result_types import SliceAccuracy

DATA = Path("Dataset") / "LLMBar"
RESULT = "result.json"
STATISTICS = "statistics.json"
# LLMBar's evaluator folders by the model each ran, as its paper names them (its configs say "gpt-4" and
# "gpt-3.5-turbo"; the paper dates them): what the leaderboard and the view across benchmarks match on.
EVALUATOR_MODELS = {
    "GPT-4": "gpt-4-0613",
    "ChatGPT": "gpt-3.5-turbo-0613",
    "ChatGPT-0301": "gpt-3.5-turbo-0301",
    "PaLM2": "text-bison-001",
    "LLaMA2": "meta-llama/Llama-2-70b-chat-hf",
    "Falcon": "tiiuae/falcon-180B-chat",
}
WINNERS = {"1": "A>B", "2": "B>A"}
LABELS = {1: "A>B", 2: "B>A"}
ORDERS = ("swap = False", "swap = True")


class JudgeAverages(BaseModel):
    """One judge's figures across LLMBar's subsets as its paper reports them: Natural, and Adversarial as
    the mean of the four adversarial subsets' accuracies; None where a subset is missing."""

    judge_name: str
    judge_model: str
    origin: str
    run_ids: list[str] = []
    subsets: dict[str, float | None]
    averages: dict[str, float | None]


class Row(Protocol):
    """What the averages read of a leaderboard row (`leaderboard.Entry`)."""

    @property
    def judge_name(self) -> str: ...
    @property
    def judge_model(self) -> str: ...
    @property
    def origin(self) -> str: ...
    @property
    def subset(self) -> str | None: ...
    @property
    def rank(self) -> int | None: ...
    @property
    def date(self) -> str | None: ...
    @property
    def run_id(self) -> str | None: ...
    @property
    def overall_accuracy(self) -> SliceAccuracy: ...


@dataclass(frozen=True)
class PublishedResult:
    """One published result.json read: where it is and its verdicts."""

    subset: str
    evaluator: str
    strategy: str
    file: str  # relative to Dataset/LLMBar
    verdicts: list[FileVerdict]

    @property
    def judge_name(self) -> str:
        return f"{LLMBAR.judge_prefix}{self.strategy}"

    @property
    def judge_model(self) -> str:
        return EVALUATOR_MODELS.get(self.evaluator, self.evaluator)


def result_files(checkout_path: Path) -> list[tuple[str, Path]]:
    """(subset, result.json) of every published evaluator, subsets in LLMBar's order, then by path."""
    found = []
    for subset in LLMBAR.data_files:
        folder = checkout_path / DATA / subset / "evaluators"
        found += [(subset, path) for path in sorted(folder.glob(f"*/*/{RESULT}")) if path.is_file()]
    return found


def statistics_only(checkout_path: Path) -> list[Path]:
    """The statistics.json files without a result.json beside them: evaluators with no verdicts to score."""
    return [
        path
        for subset in LLMBAR.data_files
        for path in sorted((checkout_path / DATA / subset / "evaluators").glob(f"*/*/{STATISTICS}"))
        if not (path.parent / RESULT).is_file()
    ]


def read_result(path: Path, subset: str) -> list[FileVerdict]:
    """The instances of one result.json as verdicts (two per instance); a malformed file is one line."""
    try:
        instances = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{path.name}: not LLMBar's result.json ({exc})") from None
    if not isinstance(instances, list) or not instances:
        raise UserError(f"{path.name}: not LLMBar's result.json (expected a JSON array of instances)")
    verdicts: list[FileVerdict] = []
    for index, instance in enumerate(instances):
        try:
            verdicts += _instance_verdicts(instance, subset, index)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise UserError(f"{path.name} instance {index}: {exc}") from None
    return verdicts


def _instance_verdicts(instance: dict, subset: str, index: int) -> list[FileVerdict]:
    label = LABELS.get(instance["label"])
    if label is None:
        raise ValueError(f"label {instance['label']!r} is not 1 or 2")
    last = instance["results"][-1]
    if not isinstance(last, dict) or not all(key in last for key in ORDERS):
        raise ValueError(f"its last stage has no {ORDERS[0]!r} and {ORDERS[1]!r}")
    verdicts = []
    for order, key in enumerate(ORDERS):
        decision = WINNERS.get(last[key].get("winner"))
        verdicts.append(
            FileVerdict(
                pair_id=f"{subset}/{index}",
                order=order,
                source=subset,
                category=category_of(subset),
                label=label,
                status="ok" if decision else "invalid",
                decision_for_pair=decision or "",
            )
        )
    return verdicts


def published_results(checkout_path: Path, unread: list[tuple[str, str]] | None = None) -> list[PublishedResult]:
    """Every published result.json's verdicts; an unreadable file goes to `unread` as (file, reason)."""
    results = []
    for subset, path in result_files(checkout_path):
        name = str(path.relative_to(checkout_path / DATA))
        try:
            verdicts = read_result(path, subset)
        except UserError as exc:
            if unread is not None:
                unread.append((name, str(exc).removeprefix(f"{path.name}: ").removeprefix(f"{path.name} ")))
            continue
        results.append(PublishedResult(subset, path.parent.parent.name, path.parent.name, name, verdicts))
    return results


def subset_sizes(checkout_path: Path) -> dict[str, int]:
    """Instances in each subset's dataset.json: what a full result on that subset covers."""
    sizes = {}
    for subset in LLMBAR.data_files:
        try:
            sizes[subset] = len(json.loads((checkout_path / DATA / subset / "dataset.json").read_text("utf-8")))
        except (OSError, ValueError, TypeError):
            continue
    return sizes


def statistics_note(checkout_path: Path) -> str | None:
    """The line saying which evaluators publish statistics only, and are therefore not listed."""
    files = statistics_only(checkout_path)
    if not files:
        return None
    evaluators = sorted({path.parent.parent.name for path in files})
    return (
        f"{len(files)} published statistics.json of {', '.join(evaluators)} have no result.json beside them: "
        "not listed (no verdicts to score alike, no interval)"
    )


def paper_averages(entries: Sequence[Row]) -> list[JudgeAverages]:
    """Each judge's accuracy per subset and LLMBar's two headline figures: Natural, and Adversarial as the
    mean of the four adversarial subsets' accuracies (None unless all four are there). One judge is a judge
    type, model and origin; of several runs on one subset the ranked (full-subset) latest counts. Best
    Adversarial first."""
    judges: dict[tuple[str, str, str], dict[str, Row]] = {}
    for entry in entries:
        if entry.rank is None or entry.subset not in LLMBAR.data_files:
            continue  # a run on part of a subset is not its subset's figure
        chosen = judges.setdefault((entry.judge_name, entry.judge_model, entry.origin), {})
        if entry.subset not in chosen or (entry.date or "") > (chosen[entry.subset].date or ""):
            chosen[entry.subset] = entry
    rows = [_averages(key, chosen) for key, chosen in judges.items()]
    return sorted(rows, key=lambda r: (-_value(r.averages["Adversarial"]), -_value(r.averages[NATURAL]), r.judge_name))


def _averages(key: tuple[str, str, str], chosen: dict[str, Row]) -> JudgeAverages:
    subsets = {
        subset: chosen[subset].overall_accuracy.accuracy if subset in chosen else None for subset in LLMBAR.data_files
    }
    adversarial = [subsets[s] for s in ADVERSARIAL]
    return JudgeAverages(
        judge_name=key[0],
        judge_model=key[1],
        origin=key[2],
        run_ids=sorted({e.run_id for e in chosen.values() if e.run_id}),
        subsets=subsets,
        averages={
            NATURAL: subsets[NATURAL],
            "Adversarial": round(sum(adversarial) / len(adversarial), 6)  # type: ignore[arg-type]
            if all(value is not None for value in adversarial)
            else None,
        },
    )


def _value(value: float | None) -> float:
    return -1.0 if value is None else value


__all__ = [
    "EVALUATOR_MODELS",
    "JudgeAverages",
    "PublishedResult",
    "paper_averages",
    "published_results",
    "read_result",
    "subset_sizes",
]

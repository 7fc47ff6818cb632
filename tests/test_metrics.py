"""The official metric fed a shard at a time: same figures as all at once, bounded memory for the report."""

from __future__ import annotations

import random

from judgebench_flows.core.records import JudgmentRecord, category_of, flip
from judgebench_flows.scoring.metrics import Tally, pair_scores
from judgebench_flows.scoring.results import build_results

SOURCES = ["mmlu-pro-law", "livebench-math", "livebench-reasoning", "livecodebench", "other-source"]


def judgments(n_pairs: int, seed: int = 7) -> list[JudgmentRecord]:
    rng = random.Random(seed)
    records = []
    for i in range(n_pairs):
        label = rng.choice(["A>B", "B>A"])
        source = SOURCES[i % len(SOURCES)]
        for order in (0, 1):
            status = rng.choices(["ok", "invalid", "failed"], weights=[8, 1, 1])[0]
            decision = rng.choice(["A>B", "B>A", "A=B"]) if status == "ok" else ""
            records.append(
                JudgmentRecord(
                    pair_id=f"p{i}",
                    order=order,
                    source=source,
                    category=category_of(source),
                    label=label,
                    status=status,
                    decision=decision,
                    decision_for_pair=decision if order == 0 else flip(decision),
                    judge_model="m",
                    response=f"answer {i}/{order}",
                    error=None if status == "ok" else f"{status} reason after 3 attempts",
                    calls=1,
                    cached_calls=order,
                    prompt_tokens=10,
                    completion_tokens=2,
                )
            )
    return records


def test_streamed_tally_gives_the_same_results_as_one_batch() -> None:
    records = judgments(300)
    whole = Tally.of(records)
    streamed = Tally()
    for start in range(0, len(records), 38):  # shards of 19 whole pairs
        streamed.add(records[start : start + 38])
    a = build_results(whole, seed=3, bootstrap_resamples=200)
    b = build_results(streamed, seed=3, bootstrap_resamples=200)
    assert a == b
    # Paid: answered and not from a cache (order 0 here; a failed judgment's call got no answer).
    paid = sum(1 for r in records if r.order == 0 and r.status != "failed")
    failed = sum(1 for r in records if r.status == "failed")
    assert a.usage.model_dump() == {
        "judgments": 600,
        "calls": 600,
        "cached_calls": 300,
        "paid_calls": paid,
        "failed_calls": failed,
        "prompt_tokens": 6000,
        "completion_tokens": 1200,
        "reasoning_tokens": 0,
    }
    problems = [r for r in records if r.status != "ok"]
    assert a.invalid.invalid_judgments + a.invalid.failed_judgments == len(problems) > 0
    assert a.invalid.pairs_with_invalid == len({r.pair_id for r in problems})
    assert sum(a.invalid.reasons.values()) == len(problems) and set(a.invalid.reasons) == {
        "invalid reason",
        "failed reason",
    }


def test_intervals_do_not_depend_on_the_order_shards_finish() -> None:
    """Dask workers finish shards in any order; the seeded bootstrap must still give the same interval."""
    records = judgments(300)
    shards = [records[start : start + 38] for start in range(0, len(records), 38)]
    in_order, shuffled = Tally(), Tally()
    for shard in shards:
        in_order.add(shard)
    for shard in random.Random(1).sample(shards, len(shards)):
        shuffled.add(shard)
    a = build_results(in_order, seed=3, bootstrap_resamples=200)
    b = build_results(shuffled, seed=3, bootstrap_resamples=200)
    assert a.overall_accuracy == b.overall_accuracy and a.category_accuracy == b.category_accuracy


def test_accuracy_follows_the_two_order_rule() -> None:
    def record(pair: str, order: int, for_pair: str, label: str = "A>B") -> JudgmentRecord:
        return JudgmentRecord(
            pair_id=pair,
            order=order,
            source="livecodebench",
            category="livecodebench",
            label=label,
            status="ok",
            decision=for_pair if order == 0 else flip(for_pair),
            decision_for_pair=for_pair,
            judge_model="m",
        )

    scores = pair_scores(
        [
            record("agree", 0, "A>B"),
            record("agree", 1, "A>B"),
            record("split", 0, "A>B"),
            record("split", 1, "B>A"),
            record("tie", 0, "A>B"),
            record("tie", 1, "A=B"),
            record("wrong", 0, "B>A"),
            record("wrong", 1, "A=B"),
        ]
    )
    assert {p: s.correct for p, s in scores.items()} == {"agree": True, "split": False, "tie": True, "wrong": False}
    assert scores["agree"].consistent and not scores["split"].consistent


def test_report_sample_is_bounded_but_keeps_later_problems() -> None:
    records = judgments(2000)
    tally = Tally(report_limit=100, problem_limit=50)
    for start in range(0, len(records), 100):
        tally.add(records[start : start + 100])
    assert len(tally.report_sample) == 150
    assert tally.report_sample[:100] == [r.model_copy(update={"prompt": ""}) for r in records[:100]]
    assert all(r.status != "ok" for r in tally.report_sample[100:])
    assert tally.invalid + tally.failed > 150  # counted in full even though only some are listed

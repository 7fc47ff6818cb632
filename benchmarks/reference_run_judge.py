"""A stand-in for JudgeBench's run_judge.py, for timing against: the same shape, as a whole process.

run_judge.py reads the pairs, judges them with an asyncio semaphore of --concurrency_limit pairs (the two
orders of a pair one after the other, through the openai client), appends each judged pair to a JSONL as
it completes, then reads that file back and prints the two-order accuracy. This script does the same
against any OpenAI-compatible endpoint, with an arena-hard-shaped prompt and verdict, and nothing else:
no cache, no resume, no retries. Written for this benchmark; it is not JudgeBench's code.

Start-up cost is part of end-to-end time, so it also imports what run_judge.py imports when it starts
(utils/models.py: anthropic and backoff; utils/judges.py: transformers' AutoTokenizer in a class body;
tqdm; jinja2), each only if installed, and says which were missing: run it with an interpreter that has
JudgeBench's requirements.txt installed for a like-for-like start.

    python benchmarks/reference_run_judge.py --pairs FILE.jsonl --concurrency_limit 32 --base-url URL
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re

import openai

STARTUP_IMPORTS = ("anthropic", "backoff", "jinja2", "tqdm.asyncio", "transformers:AutoTokenizer")


def import_like_run_judge() -> list[str]:
    """Import the libraries run_judge.py loads at start; returns the ones not installed here."""
    import importlib

    missing = []
    for name in STARTUP_IMPORTS:
        module, _, attribute = name.partition(":")
        try:
            loaded = importlib.import_module(module)
            if attribute:
                getattr(loaded, attribute)
        except ImportError:
            missing.append(module)
    return missing


VERDICT = re.compile(r"\[\[([AB][<>=]+[AB])\]\]")


def decision_of(text: str) -> str | None:
    found = VERDICT.findall(text or "")
    if not found:
        return None
    label = found[-1].replace(">>", ">").replace("<<", "<")
    return {"A>B": "A>B", "B<A": "A>B", "B>A": "B>A", "A<B": "B>A"}.get(label, "A=B")


async def judge_pairs(pairs: list[dict], client: openai.AsyncOpenAI, model: str, concurrency: int, output: str) -> None:
    semaphore = asyncio.Semaphore(concurrency)
    lock = asyncio.Lock()

    async def judge(question: str, a: str, b: str) -> dict | None:
        prompt = f"<|User Prompt|>\n{question}\n\n<|The Start of Assistant A's Answer|>\n{a}\n<|The End of Assistant A's Answer|>\n\n<|The Start of Assistant B's Answer|>\n{b}\n<|The End of Assistant B's Answer|>"
        try:
            response = await client.chat.completions.create(
                model=model,
                temperature=0,
                max_tokens=4096,
                messages=[
                    {
                        "role": "system",
                        "content": "Please act as an impartial judge. Output your final verdict as [[A>B]] or [[B>A]].",
                    },
                    {"role": "user", "content": prompt},
                ],
            )
        except Exception as exc:
            print(f"failed: {exc}")
            return None
        text = response.choices[0].message.content or ""
        return {"judgment": {"response": text}, "decision": decision_of(text)}

    async def judge_pair(pair: dict) -> dict:
        async with semaphore:
            first = await judge(pair["question"], pair["response_A"], pair["response_B"])
            second = await judge(pair["question"], pair["response_B"], pair["response_A"])
            pair["judgments"] = [first, second]
            return pair

    for finished in asyncio.as_completed([asyncio.create_task(judge_pair(p)) for p in pairs]):
        pair = await finished
        async with lock:
            with open(output, "a") as handle:
                handle.write(json.dumps(pair, ensure_ascii=False) + "\n")


def accuracy(pairs: list[dict]) -> float:
    flip = {"A>B": "B>A", "B>A": "A>B"}
    correct = 0
    for pair in pairs:
        first, second = pair["judgments"]
        decisions = [
            first and first["decision"],
            flip.get(second and second["decision"], second and second["decision"]),
        ]
        score = sum(1 if d == pair["label"] else -1 if d == flip[pair["label"]] else 0 for d in decisions)
        correct += score > 0
    return correct / len(pairs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", required=True)
    parser.add_argument("--concurrency_limit", type=int, default=1)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", default="judge")
    parser.add_argument("--output", default="reference-output.jsonl")
    args = parser.parse_args()
    missing = import_like_run_judge()
    if missing:
        print(f"not installed, so not imported as run_judge.py would: {', '.join(missing)}")
    with open(args.pairs) as handle:
        pairs = [json.loads(line) for line in handle]
    if os.path.exists(args.output):
        os.remove(args.output)
    client = openai.AsyncOpenAI(api_key=os.environ.get("OPENAI_API_KEY", "EMPTY"), base_url=args.base_url)
    asyncio.run(judge_pairs(pairs, client, args.model, args.concurrency_limit, args.output))
    with open(args.output) as handle:
        print(f"accuracy {accuracy([json.loads(line) for line in handle]):.4f}")


if __name__ == "__main__":
    main()

"""Real nights of an unchanged matrix: how many alert, and whether a real drop is named (issue 50).

`bench_alerts.py` simulates the regression check; this runs it for real. A Prefect server of its own
(SQLite, its own PREFECT_HOME), two bundled stand-in endpoints on loopback answering as the oracle judge
(`FakeOpenAIServer` with `testing.oracle`: right on `--accuracy` of the pairs, each model its own seeded
judge, every call's verdict re-drawn at random with probability `--noise`, tonight's `noise_seed` the
night's number), and a 16-cell matrix: 4 judge types (vanilla, arena_hard, skywork_critic, prometheus_2)
x 4 models (2 on each endpoint) x the GPT-4o file, `--pairs` pairs each (`max_samples`), in both orders.
Each night runs in a process of its own, as a worker runs a deployment's flow run, and is one flow run of
`nightly-benchmarks`: its cells reuse only answers their own night paid (`flows/cache_scope.py`), so
every night judges afresh; the script checks it (the stand-ins answered every call of every cell, and no
cell's results count an answer from a cache).

Nights: `--warmup` nights first (the first has no baseline, the next few fewer than `baseline_runs`),
then `--nights` counted nights of the unchanged matrix, then up to `--drop-nights` nights on which one
cell's judge is truly worse and stays so: the stand-ins keep their address, model names and everything
else, and only for that cell (`--drop-model` judged by `--drop-judge`) either the oracle is right on
`--drop` fewer of the pairs (a superset of its mistakes: the drop is real, not noise), or with
`--wrong-share S` a share S of its answers (seeded per call) is turned to the wrong verdict (issue 60:
one answer in twenty, about 6 points at 75%). A night alerts when any cell's results.json says
`regression.regressed` (the per-night test, position bias, or the sequential test flagging tonight).
Goals: at most 1 alerting counted night of 10; the dropped cell named within the drop nights; no other
cell named more than once meanwhile. The nights are reproducible: night n's oracles are made afresh with
noise seed n, so the same command gets the same answers on any commit, and two commits' decisions can be
compared on the same nights.

Printed: a table of the nights (cells alerting, which, the night's process seconds, calls answered,
answers from a cache) and the two verdicts; exit 1 when a goal is missed, 2 without the data.

    python benchmarks/bench_alert_nights.py                 # 3 warm-up + 10 + 1 nights (about 14 minutes)
    python benchmarks/bench_alert_nights.py --judge-types vanilla,arena_hard --pairs 350 \
        --wrong-share 0.05 --drop-nights 7                  # issue 60: 8 cells, a persistent 6-point drop
    python benchmarks/bench_alert_nights.py --nights 3 --warmup 1 --pairs 50   # a quick look

Run by hand; this is a measurement, not a test. Figures: docs/alerts.md, "Real nights".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_judging import GPT4O_FILE, add_data_option, benchmark_data, make_repo, start_prefect_server, stop  # noqa: E402

JUDGE_TYPES = ["vanilla", "arena_hard", "skywork_critic", "prometheus_2"]
MODELS = ["judge-0", "judge-1", "judge-2", "judge-3"]  # judge-0 and -1 on the first endpoint, the rest on the second
NIGHT = """
import asyncio, json, sys
from judgebench_flows.flows.nightly import nightly_benchmarks
state = asyncio.run(nightly_benchmarks(sys.argv[1], retry_delay_seconds=0, return_state=True))
print(json.dumps({"flow_run_id": str(state.state_details.flow_run_id), "completed": state.is_completed(),
                  "message": state.message}))
"""
NIGHT_TIMEOUT_S = 600.0  # one night's process; a night that takes longer is a finding, not a wait


class Judges:
    """What the stand-ins answer tonight: per model an oracle (`auto_oracle`, the request's own verdict
    format), and for one (model, judge type) cell a worse one on the drop night. Swapped between nights."""

    def __init__(self, pairs: list[dict], args: argparse.Namespace) -> None:
        self.pairs, self.args = pairs, args
        self._lock = threading.Lock()
        self._tonight: dict[str, Callable[[dict], Any]] = {}
        self._worse: Callable[[dict], Any] | None = None
        self.worse_calls = 0  # calls the worse judge answered: the drop reached its cell, and only it

    def night(self, number: int, dropped: bool) -> None:
        """Tonight's judges: fresh oracles whose noise is seeded by the night's number (each call re-drawn
        anyway); on the drop night, the dropped cell's judge right on `--drop` fewer pairs."""
        from judgebench_flows.testing.fake_openai import auto_oracle

        a = self.args
        tonight = {
            model: auto_oracle(self.pairs, a.accuracy, seed, noise=a.noise, noise_seed=number)
            for seed, model in enumerate(MODELS)
        }
        worse = self.worse_judge(tonight[a.drop_model], number) if dropped else None
        with self._lock:
            self._tonight, self._worse = tonight, worse

    def worse_judge(self, usual: Callable[[dict], Any], number: int) -> Callable[[dict], Any]:
        """The dropped cell's judge tonight: right on `--drop` fewer pairs, or (`--wrong-share`) the usual
        judge with that share of its answers turned to the wrong verdict, drawn per call from the night and
        the request (an always-wrong oracle answers those, in the request's own format)."""
        from judgebench_flows.testing.fake_openai import auto_oracle

        a = self.args
        seed = MODELS.index(a.drop_model)
        if not a.wrong_share:
            return auto_oracle(self.pairs, a.accuracy - a.drop, seed, noise=a.noise, noise_seed=number)
        wrong = auto_oracle(self.pairs, 0.0, seed)

        def respond(body: dict) -> Any:
            key = f"{number}\0{json.dumps(body.get('messages'), sort_keys=True)}"
            draw = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64
            return wrong(body) if draw < a.wrong_share else usual(body)

        return respond

    def __call__(self, body: dict) -> Any:
        with self._lock:
            tonight, worse = self._tonight, self._worse
        model = str(body.get("model"))
        if worse is not None and model == self.args.drop_model and judge_of(body) == self.args.drop_judge:
            with self._lock:
                self.worse_calls += 1
            return worse(body)
        return tonight[model](body)


# Each judge type's marker in its prompt, as the stand-in tells the verdict format (`JUDGE_VERDICTS`).
MARKERS = {"vanilla": "Output (a)", "arena_hard": "[[A>>B]]", "prometheus_2": "[RESULT]", "skywork_critic": "[[A]]"}


def judge_of(body: dict) -> str | None:
    """The judge type whose prompt this request is, told as `auto_oracle` tells the verdict format: the
    first marker of `JUDGE_VERDICTS` its messages hold."""
    from judgebench_flows.testing.fake_openai import JUDGE_VERDICTS

    text = "\n".join(m["content"] for m in body.get("messages") or [] if isinstance(m.get("content"), str))
    marker = next((marker for marker, _, _ in JUDGE_VERDICTS if marker in text), None)
    return next((judge for judge, known in MARKERS.items() if known == marker), None)


def matrix(urls: list[str], work: Path, repo: tuple[str, str], args: argparse.Namespace) -> dict:
    return {
        "judge_types": args.judge_types,
        "models": [{"model": model, "base_url": urls[i // 2]} for i, model in enumerate(MODELS)],
        "data_files": [GPT4O_FILE],
        "repo_url": repo[0],
        "ref": repo[1],
        "concurrency": args.concurrency,
        "db_url": f"sqlite:///{work}/results.db",
        "output_root": str(work / "nightly"),
        "max_samples": args.pairs,
        "options": {"cache_dir": str(work / "cache"), "bootstrap_resamples": 200},
    }


def run_night(path: Path, env: dict[str, str]) -> tuple[dict, float]:
    """The night in a process of its own: what it printed, and the process's seconds."""
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-c", NIGHT, str(path)], env=env, capture_output=True, text=True, timeout=NIGHT_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        raise SystemExit(f"a night took over {NIGHT_TIMEOUT_S:.0f} s: stopped") from None
    seconds = time.monotonic() - started
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"the night's process failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(lines[-1]), seconds


def new_results(root: Path, seen: set[Path]) -> dict[str, dict]:
    """Each cell's results.json written since the last look, by cell folder name."""
    found = {}
    for path in sorted(root.glob("*/*/results.json")):
        if path.parent.is_symlink() or path.parent.name == "latest" or path in seen:
            continue
        seen.add(path)
        found[path.parent.parent.name] = json.loads(path.read_text())
    return found


def cell_label(folder: str) -> str:
    """A cell folder's judge type and model, short."""
    judge = next((j for j in JUDGE_TYPES if folder.startswith(j)), "?")
    model = next((m for m in MODELS if m in folder), "?")
    return f"{judge}/{model}"


def alerting(results: dict[str, dict]) -> list[str]:
    """The cells whose regression check says regressed: `label (accuracy|sequential|position)`, the test
    that named it (the per-night accuracy test, the sequential test flagging tonight, position bias)."""
    named = []
    for folder, result in sorted(results.items()):
        check = result.get("regression") or {}
        if check.get("regressed"):
            sequential = (check.get("sequential") or {}).get("new")
            why = "accuracy" if check.get("accuracy_regressed") else "sequential" if sequential else "position"
            named.append(f"{cell_label(folder)} ({why})")
    return named


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=10, help="counted nights of the unchanged matrix")
    parser.add_argument("--warmup", type=int, default=3, help="nights before them, not counted")
    parser.add_argument("--pairs", type=int, default=100, help="pairs per cell (max_samples)")
    parser.add_argument("--judge-types", type=lambda v: v.split(","), default=JUDGE_TYPES, help="comma-separated")
    parser.add_argument("--accuracy", type=float, default=0.75, help="the oracle's share of pairs right")
    parser.add_argument("--noise", type=float, default=0.15, help="each call's verdict re-drawn with this probability")
    parser.add_argument("--drop", type=float, default=0.20, help="the share of pairs the dropped judge loses")
    parser.add_argument("--wrong-share", type=float, default=0.0, help="instead: this share of its answers wrong")
    parser.add_argument("--drop-nights", type=int, default=1, help="nights the drop lasts, unless named sooner")
    parser.add_argument("--drop-model", choices=MODELS, default="judge-2")
    parser.add_argument("--drop-judge", choices=JUDGE_TYPES, default="arena_hard")
    parser.add_argument("--concurrency", type=int, default=16, help="calls in flight per endpoint")
    add_data_option(parser)
    args = parser.parse_args()
    data = benchmark_data(args.data)  # before anything starts: no data, one line and exit 2
    problem = bad_options(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench-alert-nights-"))
    env = {**os.environ, "PREFECT_HOME": str(work / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    prefect, api_url = start_prefect_server(env)
    env.update(
        PREFECT_API_URL=api_url,
        PREFECT_LOCAL_STORAGE_PATH=str(work / "storage"),
        PREFECT_LOGGING_LEVEL="WARNING",
        OPENAI_API_KEY="sk-bench",
    )
    try:
        return measure(args, data, work, env)
    finally:
        stop(prefect)  # a server that outlives SIGTERM is killed, not left behind


def bad_options(args: argparse.Namespace) -> str | None:
    """What is wrong with the options, in one line, or None."""
    if not 0 < args.drop < args.accuracy <= 1 or not 0 <= args.noise <= 1 or not 0 <= args.wrong_share < 1:
        return "--drop, --accuracy, --noise, --wrong-share: 0 < drop < accuracy <= 1, 0 <= noise <= 1, 0 <= share < 1"
    if args.nights < 1 or args.warmup < 0 or args.pairs < 2 or args.drop_nights < 1:
        return "--nights >= 1, --warmup >= 0, --pairs >= 2 and --drop-nights >= 1"
    unknown = [j for j in args.judge_types if j not in JUDGE_TYPES]
    if unknown or args.drop_judge not in args.judge_types:
        return (
            f"--judge-types: from {', '.join(JUDGE_TYPES)}, including --drop-judge ({', '.join(unknown) or 'missing'})"
        )
    return None


class Tally:
    """The nights so far: each night's row, counted nights alerting, and what the drop nights named."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.rows, self.counted_alerts = args, [], 0
        self.target = f"{args.drop_judge}/{args.drop_model}"
        self.named_on: int | None = None  # the drop night (1 = its first) that named the dropped cell
        self.others: dict[str, int] = {}  # other cells named on drop nights before it: nights each
        self.detail = ""

    def night(self, number: int, kind: str, named: list[str], results: dict[str, dict]) -> None:
        if kind == "counted":
            self.counted_alerts += bool(named)
        if kind == "drop":
            cells = [n.split(" ")[0] for n in named]
            for cell in cells:
                if cell != self.target:
                    self.others[cell] = self.others.get(cell, 0) + 1
            if self.target in cells and self.named_on is None:
                self.named_on = number - self.args.warmup - self.args.nights
                self.detail = drop_detail(results, self.args)

    def verdicts(self) -> bool:
        a = self.args
        quiet = self.counted_alerts <= max(1, a.nights // 10)
        caught = self.named_on is not None
        calm = all(n <= 1 for n in self.others.values())
        print(
            f"counted nights alerting: {self.counted_alerts} of {a.nights} (goal: at most 1 of 10): "
            f"{'met' if quiet else 'MISSED'}"
        )
        print(
            f"{self.target} named on drop night {self.named_on} (goal: within {a.drop_nights}): "
            f"{'met' if caught else 'MISSED'}; {self.detail}"
        )
        others = ", ".join(f"{c} x{n}" for c, n in sorted(self.others.items())) or "none"
        print(f"other cells named on drop nights: {others} (goal: none more than once): {'met' if calm else 'MISSED'}")
        return quiet and caught and calm


def measure(args: argparse.Namespace, data: Path, work: Path, env: dict[str, str]) -> int:
    import yaml

    from judgebench_flows.testing.fake_openai import FakeOpenAIServer
    from judgebench_flows.testing.oracle import load_pairs

    repo = make_repo(work, data)
    judges = Judges(load_pairs(data / "data" / GPT4O_FILE), args)
    servers = [FakeOpenAIServer(judges) for _ in range(2)]
    cells = len(args.judge_types) * len(MODELS)
    calls_a_night = cells * args.pairs * 2
    seen: set[Path] = set()
    tally = Tally(args)
    started = time.monotonic()
    try:
        for server in servers:
            server.start()
        path = work / "night.yaml"
        path.write_text(yaml.safe_dump(matrix([s.base_url for s in servers], work, repo, args)))
        drop = (
            f"{args.wrong_share:.0%} of answers wrong"
            if args.wrong_share
            else f"right on {args.accuracy - args.drop:.0%}"
        )
        print(
            f"{cells} cells x {args.pairs} pairs in both orders ({calls_a_night} calls a night); oracle right on "
            f"{args.accuracy:.0%} of pairs, noise {args.noise}; up to {args.drop_nights} drop nights: "
            f"{tally.target} {drop}; load average {os.getloadavg()[0]:.1f} at the start",
            flush=True,
        )
        for number in range(1, args.warmup + args.nights + args.drop_nights + 1):
            kind = "warm-up" if number <= args.warmup else "counted" if number <= args.warmup + args.nights else "drop"
            judges.night(number, dropped=kind == "drop")
            worse_before, before = judges.worse_calls, sum(s.answered for s in servers)
            night, seconds = run_night(path, env)
            answered = sum(s.answered for s in servers) - before
            results = new_results(work / "nightly", seen)
            named = alerting(results)
            cached = sum((r.get("usage") or {}).get("cached_calls") or 0 for r in results.values())
            with_baseline = sum(bool(r.get("regression")) for r in results.values())
            tally.night(number, kind, named, results)
            tally.rows.append((number, kind, named, seconds, flagged(results)))
            print(
                f"night {number:2d} ({kind}): {len(named)} of {len(results)} cells alerting"
                f"{': ' + ', '.join(named) if named else ''}; {seconds:.1f} s; {answered} calls answered, "
                f"{cached} from a cache; {with_baseline} cells checked against earlier nights; flagged: "
                f"{', '.join(flagged(results)) or '-'}"
                f"{'' if night['completed'] else '; ended: ' + str(night['message'])[:300]}",
                flush=True,
            )
            if len(results) != cells or answered < calls_a_night or cached:
                print(
                    f"night {number}: expected {cells} cells judged afresh ({calls_a_night} calls, none cached)",
                    file=sys.stderr,
                )
                return 1
            if kind == "drop" and judges.worse_calls - worse_before != args.pairs * 2:
                print(
                    f"the worse judge answered {judges.worse_calls - worse_before} calls, not its cell's "
                    f"{args.pairs * 2}",
                    file=sys.stderr,
                )
                return 1
            if tally.named_on is not None:
                break
    finally:
        for server in servers:
            server.stop()
    print_table(tally.rows, cells)
    met = tally.verdicts()
    print(
        f"total {time.monotonic() - started:.0f} s for {len(tally.rows)} nights; load average "
        f"{os.getloadavg()[0]:.1f} at the end",
        flush=True,
    )
    return 0 if met else 1


def flagged(results: dict[str, dict]) -> list[str]:
    """The cells whose sequential test holds a flag (raised tonight or earlier)."""
    return [
        cell_label(folder)
        for folder, result in sorted(results.items())
        if ((result.get("regression") or {}).get("sequential") or {}).get("flagged")
    ]


def print_table(rows: list[tuple], cells: int) -> None:
    print()
    print("| night | kind | cells alerting | which | sequential flags held | seconds |")
    print("|---|---|---|---|---|---|")
    for number, kind, named, seconds, flags in rows:
        print(
            f"| {number} | {kind} | {len(named)} of {cells} | {', '.join(named) or '-'} | "
            f"{', '.join(flags) or '-'} | {seconds:.0f} |"
        )
    print()


def drop_detail(results: dict[str, dict], args: argparse.Namespace) -> str:
    """The dropped cell's change as its checks measured it (the per-night test's message, which carries
    the sequential test's)."""
    for folder, result in results.items():
        if cell_label(folder) == f"{args.drop_judge}/{args.drop_model}":
            check = result.get("regression") or {}
            return str(check.get("message") or "no regression check")[:500]
    return "the dropped cell's results are missing"


if __name__ == "__main__":
    raise SystemExit(main())

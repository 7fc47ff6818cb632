"""`ShardSink`: where a run's shards go as they finish (their JSONL part, their database rows, the tally,
the progress bar's exact count), so the run holds the shards in flight in memory, not the whole run."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from sqlalchemy.engine import Engine

from judgebench_flows.core import benchmarks
from judgebench_flows.core.records import JudgmentRecord
from judgebench_flows.data import db
from judgebench_flows.judging.run_context import RunContext
from judgebench_flows.judging.shards import JudgeSpec, Shard, judge_of, shard_cache_source, with_prompts
from judgebench_flows.scoring.metrics import Tally
from judgebench_flows.scoring.results import jsonl_rows, write_jsonl


class ShardSink:
    """Takes each shard as it finishes: its JSONL part and database rows are written and it is added to
    the tally now, then its records are let go, so memory holds the shards in flight, not the run."""

    def __init__(
        self,
        engine: Engine,
        run_id: str,
        parts_dir: Path,
        spec: JudgeSpec,
        judge_name: str,
        run: RunContext,
        benchmark: str = benchmarks.DEFAULT,
    ) -> None:
        self.engine, self.run_id, self.parts_dir, self.judge_name = engine, run_id, parts_dir, judge_name
        self.progress = run.progress  # whose hooks hear each shard's final count
        self.judge = judge_of(spec, run.calls)
        self.tally = Tally.for_benchmark(benchmarks.get(benchmark))  # scored by its benchmark's official rule
        # Answers of shards served whole from Prefect's shard cache, by the run that judged them.
        self.shard_cache_sources: Counter[str] = Counter()

    def __call__(self, shard: Shard, records: list[JudgmentRecord]) -> None:
        pairs = shard.load()
        write_jsonl(
            self.parts_dir / f"shard-{shard.index:06d}.jsonl",
            jsonl_rows(pairs, with_prompts(pairs, records, self.judge), self.judge_name),
        )
        db.save_judgments(self.engine, db.judgment_rows(self.run_id, records))
        self.tally.add(records)
        cached = shard_cache_source(records)
        if cached is not None:
            self.shard_cache_sources[cached[0]] += cached[1]
        self.progress.settle(shard.index, len(records))

    def parts(self) -> list[Path]:
        return sorted(self.parts_dir.glob("shard-*.jsonl"))

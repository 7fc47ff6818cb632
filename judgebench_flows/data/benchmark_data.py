"""Where a benchmark's pairs are in its checkout, as the JSONL of pairs every run reads.

JudgeBench's data files are that JSONL already. LLMBar's subsets are JSON arrays of `input`, `output_1`,
`output_2` and `label` (1 or 2) at `Dataset/LLMBar/<subset>/dataset.json`; a run turns a subset into the
same JSONL once per commit (beside the clone in the cache, written atomically), so loading, sharding,
Dask workers and the shard cache read every benchmark alike. A pair's id is `<subset>/<index>`, its
source and category the subset, its label "A>B" for LLMBar's 1 (output_1 is Output (a) in order 0).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from judgebench_flows.core import benchmarks
from judgebench_flows.core.benchmarks import Benchmark
from judgebench_flows.core.config import RunConfig
from judgebench_flows.core.errors import UserError
from judgebench_flows.data.dataset import Checkout, data_file_in, fetch_repository

LLMBAR_DATA = Path("Dataset") / "LLMBar"


def pairs_file(benchmark: Benchmark, checkout: Checkout, data_file: str) -> Path:
    """The JSONL of pairs for `data_file` of `benchmark` in `checkout`, or a one-line error naming the
    subsets there are."""
    if benchmark.layout == "llmbar":
        return llmbar_pairs(checkout, data_file)
    return data_file_in(checkout, data_file)


def prompts_dir(benchmark: Benchmark, checkout: Checkout) -> Path:
    """Where the benchmark's own judges' prompt files are in `checkout`."""
    return checkout.path / benchmark.prompts_dir


def llmbar_subset_file(checkout: Checkout, subset: str) -> Path:
    """`Dataset/LLMBar/<subset>/dataset.json` in the checkout; a subset not there is one line naming those that are."""
    name = subset.strip().strip("/").removesuffix("/dataset.json")
    path = (checkout.path / LLMBAR_DATA / name / "dataset.json").resolve()
    if path.is_file() and (checkout.path / LLMBAR_DATA).resolve() in path.parents:
        return path
    found = sorted(
        str(p.parent.relative_to(checkout.path / LLMBAR_DATA))
        for p in (checkout.path / LLMBAR_DATA).rglob("dataset.json")
    )
    raise UserError(
        f"--data-file '{subset}': no LLMBar subset of that name in {checkout.repo_url} at {checkout.commit[:12]} "
        f"(available: {', '.join(found) or 'none'})"
    )


def llmbar_pairs(checkout: Checkout, subset: str) -> Path:
    """The subset's pairs as JSONL, made once per commit and subset beside the clone."""
    source = llmbar_subset_file(checkout, subset)
    name = str(source.parent.relative_to((checkout.path / LLMBAR_DATA).resolve()))
    target = (
        checkout.path.parent / f"{checkout.path.name}.pairs" / f"{name.replace('/', '-')}@{checkout.commit[:12]}.jsonl"
    )
    if target.is_file():
        return target
    rows = llmbar_rows(source, name)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    os.replace(tmp, target)
    return target


def llmbar_rows(path: Path, subset: str) -> list[dict[str, object]]:
    """LLMBar's instances as pair rows; a row without its fields is kept as it is, for the loader to name."""
    try:
        instances = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: not an LLMBar dataset.json ({exc})") from None
    if not isinstance(instances, list):
        raise UserError(f"{path}: not an LLMBar dataset.json (expected a JSON array of instances)")
    return [_pair_row(instance, subset, i) for i, instance in enumerate(instances)]


def _pair_row(instance: object, subset: str, index: int) -> dict[str, object]:
    if not isinstance(instance, dict):
        return {"pair_id": f"{subset}/{index}", "llmbar_row": instance}
    given = instance.get("label")
    label = {1: "A>B", 2: "B>A"}.get(given, given) if isinstance(given, int) else given  # else the loader names it
    return {
        "pair_id": f"{subset}/{index}",
        "source": subset,
        "question": instance.get("input"),
        "response_A": instance.get("output_1"),
        "response_B": instance.get("output_2"),
        "label": label,
        "original_id": index,
    }


def judge_prompts_dir(
    judge_type: str, data_benchmark: Benchmark, checkout: Checkout, cache_dir: str | None = None
) -> Path:
    """Where a judge's prompts come from when the run names no `--templates-dir`: its own benchmark's
    checkout (LLMBar's evaluators for `llmbar:*`, JudgeBench's templates for its built-in judges), which is
    the run's own checkout when the judge judges its own benchmark, else that benchmark's pinned clone
    (cloned once into the cache, then reused offline). Judges that read no benchmark's prompts get the
    run's checkout's, as they always did."""
    home = benchmarks.home_of_judge(judge_type) or data_benchmark
    if home.name == data_benchmark.name:
        return prompts_dir(home, checkout)
    return prompts_dir(home, fetch_repository(home.repo_url, home.ref, cache_dir))


def run_paths(config: RunConfig, checkout: Checkout) -> tuple[Path, str]:
    """A run's pairs file and its judge's prompts folder in `checkout` (`--templates-dir` when given): the
    flow's fetch, the head start, preflight and `estimate` all read them here."""
    benchmark = benchmarks.get(config.benchmark)
    judge = "custom" if config.judge_template else config.judge_type
    data = pairs_file(benchmark, checkout, config.data_file)
    return data, config.templates_dir or str(judge_prompts_dir(judge, benchmark, checkout, config.cache_dir))

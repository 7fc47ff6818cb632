"""Everything a run's user can get wrong, checked before Prefect starts and before the first paid call.

Judge and templates, output paths, the data file, the repository (a pinned commit is cloned now, so a
missing data file or prompt template is reported before any flow run exists), the results database, the
price table and budget, and the endpoint (reachable, its key variable set). Each problem is one UserError.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from judgebench_flows.core import providers
from judgebench_flows.core.config import RunConfig
from judgebench_flows.core.errors import UserError
from judgebench_flows.core.safe_yaml import regular_file_problem


def check_endpoint_reachable(base_url: str, timeout: float = 5.0) -> None:
    """A TCP connect to the endpoint, so an unreachable one fails in a second rather than after retries."""
    from judgebench_flows.core.net import connect_error, host_port

    problem = connect_error(base_url, timeout=timeout)
    if problem is not None:
        host, port = host_port(base_url)
        raise UserError(f"cannot reach the endpoint {urlsplit(base_url).scheme}://{host}:{port}: {problem}")


def _check_file_url(repo_url: str) -> None:
    """A file:// repository that is not there fails now: in the flow, git's last words ("and the repository
    exists.") name nothing, and the clone task would retry it as if it were a network hiccup."""
    parts = urlsplit(repo_url.strip())
    if parts.scheme.lower() == "file" and not Path(unquote(parts.path)).exists():
        raise UserError(f"--repo-url: no repository at '{repo_url.strip()}'")


def preflight(config: RunConfig) -> None:
    """Check everything checkable before Prefect starts: judge, templates, database, data, endpoint."""
    from judgebench_flows.data import db
    from judgebench_flows.data.dataset import check_repo_url, is_pinned

    _check_judge(config)
    if config.data_path and (problem := regular_file_problem(config.data_path)):
        raise UserError(f"--data-path: {problem}: {config.data_path}")  # a FIFO or /dev/zero is no data file
    from judgebench_flows.data.outputs import check_directory, check_file

    check_directory("--output-dir", config.output_dir)  # results are written after every call is paid for
    check_file("--result-path", config.result_path)
    if config.data_path:
        from judgebench_flows.data.loading import index_pairs

        index_pairs(config.data_path)  # duplicate ids or no usable row: say so before Prefect starts
    if not config.data_path:
        check_repo_url(config.repo_url)
        _check_file_url(config.repo_url)
        if is_pinned(config.ref):
            _warm_clone(config)
    check_local_folders(config)
    db.open_database(config.db_url)
    check_prices(config)
    if config.needs_endpoint:
        check_credentials(config)
        check_endpoint_reachable(config.resolved_base_url())


def check_cell(config: RunConfig, timeout: float = 5.0) -> None:
    """A night's (or a deployment's) cell checked as a single run's preflight checks its configuration,
    before its first call: its judge loads, its price (with a budget), its credentials are there, its
    endpoint is reachable and takes its key (a refused key is otherwise found by the cell's first call,
    possibly hours into the night). The night's repositories and data files are `check_night`'s."""
    from judgebench_flows.data.dataset import is_pinned

    _check_judge(config)
    if not config.data_path and is_pinned(config.ref):
        _warm_clone(config)  # the night fetched it: the clone cache has it; its templates load the judge
    check_prices(config)
    if config.needs_endpoint:
        check_credentials(config)
        check_endpoint_reachable(config.resolved_base_url(), timeout)
        check_key_accepted(config, timeout)


def _check_judge(config: RunConfig) -> None:
    """The judge loads (its type is known; a template, external judge or templates folder is read)."""
    from judgebench_flows.judges import JUDGE_TYPES, get_judge

    if config.judge_template is None and config.judge_type not in JUDGE_TYPES:
        raise UserError(f"unknown judge type '{config.judge_type}' (valid: {', '.join(JUDGE_TYPES)})")
    if config.judge_template or config.judge_type == "external":
        get_judge(
            config.judge_type,
            None,
            config.judge_template,
            config.external_judge_path,
            config.external_judge_function,
            config.external_judge_config,
        )
    elif config.data_path or config.templates_dir:
        get_judge(config.judge_type, config.templates_dir, model=config.model)


def check_key_accepted(config: RunConfig, timeout: float = 5.0) -> None:
    """The endpoint takes the run's key: a wire that can ask without paying (the OpenAI-compatible one's
    `GET /models`, whatever API the judge then calls) asks once; a 401 or 403 is the line the run's first
    call would have stopped with."""
    import asyncio

    from judgebench_flows.calls.providers import model_api
    from judgebench_flows.core.api_keys import describe, read_api_key

    settings, base_url = config.endpoint, config.resolved_base_url()
    key = read_api_key(settings.api_key_env, settings.api_key_secret, provider=settings.provider)
    wire = model_api(settings.provider_name, base_url, config.model, key, timeout, 1, settings=settings)
    probe = getattr(wire, "key_refused", None)
    if probe is None:
        return

    async def ask() -> Any:
        try:
            return await probe(timeout)
        finally:
            await wire.aclose()

    refused = asyncio.run(ask())
    if refused is not None:
        source = describe(settings.api_key_env, settings.api_key_secret, settings.provider)
        raise refused.fatal_error(base_url, config.model, key_source=source)


def check_local_folders(config: RunConfig) -> None:
    """The folders a run writes besides its outputs, writable now, before any call: the cache dir (clones,
    the call cache's journal) and a SQLite results database's folder (exit 8 naming the option)."""
    from sqlalchemy.engine import make_url

    from judgebench_flows.data.journal import default_cache_dir
    from judgebench_flows.data.outputs import check_directory

    check_directory(
        "--cache-dir", str(Path(config.cache_dir).expanduser() if config.cache_dir else default_cache_dir())
    )
    url = make_url(config.db_url)
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        check_directory("--db-url", str(Path(url.database).expanduser().resolve().parent))


def check_credentials(config: RunConfig) -> None:
    """The provider's key variable, or its other credentials, are there (their content is not read here)."""
    providers.get(config.endpoint.provider).check_credentials(config.endpoint, config.resolved_base_url())


def check_prices(config: RunConfig) -> None:
    """The price file parses and, with --max-cost, the model has a price (else nothing can be checked)."""
    from judgebench_flows.core.pricing import batch_of, price_for
    from judgebench_flows.judging.estimate import check_priced

    if config.needs_endpoint and (config.prices or config.max_cost is not None):
        price = price_for(config.priced_model_name, config.prices, batch_of(config), config.resolved_base_url())
        check_priced(config.priced_model_name, price, config.max_cost, config.prices)


def _warm_clone(config: RunConfig) -> None:
    """Clone a pinned commit now, while Prefect's server boots: the flow's fetch task then finds it in the
    cache, and a missing data file or prompt template is reported before any flow run exists."""
    from judgebench_flows.data.benchmark_data import run_paths
    from judgebench_flows.data.dataset import fetch_repository
    from judgebench_flows.judges import get_judge

    checkout = fetch_repository(config.repo_url, config.ref, config.cache_dir)
    _, templates = run_paths(config, checkout)
    if not config.judge_template and config.judge_type != "external":
        get_judge(config.judge_type, templates, model=config.model)


def check_night(configs: Sequence[RunConfig]) -> None:
    """A night's repositories, refs and data files, checked once before its first cell: a wrong
    `data_files`, `repo_url` or `ref` fails the night at once with one line, instead of every cell one
    by one. Each (repository, ref) is fetched once (the cells then find it in the clone cache)."""
    from judgebench_flows.core import benchmarks
    from judgebench_flows.data.benchmark_data import pairs_file
    from judgebench_flows.data.dataset import Checkout, check_repo_url, fetch_repository
    from judgebench_flows.data.outputs import check_directory, run_folders_root

    for root in dict.fromkeys(run_folders_root(config.output_dir) for config in configs):
        if "://" in root:  # a bucket: there, and the chain's credentials accepted, once per night
            check_directory("output_root", root)
    checkouts: dict[tuple[str, str | None, str | None], Checkout] = {}
    for config in configs:
        if config.data_path:
            if problem := regular_file_problem(config.data_path):
                raise UserError(f"data_path: {problem}: {config.data_path}")
            continue
        key = (config.repo_url, config.ref, str(config.cache_dir) if config.cache_dir else None)
        if key not in checkouts:
            check_repo_url(config.repo_url)
            _check_file_url(config.repo_url)
            checkouts[key] = fetch_repository(config.repo_url, config.ref, config.cache_dir)
        try:
            pairs_file(benchmarks.get(config.benchmark), checkouts[key], config.data_file)
        except UserError as exc:
            raise UserError(f"data_files: {exc}") from None


def holds_judgebench_pairs(data_path: str | None) -> bool:
    """External judges score CLEAR-style tables, or decide JudgeBench pairs (a clone, or a JSONL of pairs)."""
    if data_path is None:
        return True
    if not data_path.endswith(".jsonl") or not Path(data_path).is_file():
        return False
    with open(data_path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            if line.strip():
                try:
                    first = json.loads(line)
                except json.JSONDecodeError:
                    return False
                return isinstance(first, dict) and {"pair_id", "response_A", "response_B", "label"} <= first.keys()
    return False


__all__ = [
    "check_cell",
    "check_endpoint_reachable",
    "check_key_accepted",
    "check_night",
    "check_prices",
    "holds_judgebench_pairs",
    "preflight",
]

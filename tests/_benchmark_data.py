"""Where the tests find the JudgeBench benchmark (its `data/` and `utils/templates/`), on any machine.

In order: `JUDGEBENCH_TEST_DATA` (a JudgeBench checkout), `../shared/judgebench` beside the repository
(this project's own machines), then the pinned JudgeBench commit cloned once into the cache by the
package's own fetch (reused offline afterwards). The clone is only tried when GitHub answers within
seconds, so a machine without network skips the tests that need the data instead of waiting on git.
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

GPT4O_FILE = "dataset=judgebench,response_model=gpt-4o-2024-05-13.jsonl"
ENV_VAR = "JUDGEBENCH_TEST_DATA"
BESIDE_REPO = Path(__file__).resolve().parents[2] / "shared" / "judgebench"
MISSING_DATA = (
    f"JudgeBench data not found: git clone https://github.com/ScalerLab/JudgeBench and set {ENV_VAR} to that folder"
)
PROBE_TIMEOUT_S = 3.0


def _has_data(path: Path) -> bool:
    return (path / "data" / GPT4O_FILE).is_file()


def _github_reachable() -> bool:
    try:
        socket.create_connection(("github.com", 443), timeout=PROBE_TIMEOUT_S).close()
    except OSError:
        return False
    return True


def _pinned_clone() -> Path | None:
    """The pinned JudgeBench commit in the package's cache: cloned once when GitHub is reachable."""
    if os.environ.get(ENV_VAR) == "none":  # opt out of any clone: run the suite as a machine without data
        return None
    from judgebench_flows.core.config_defaults import DEFAULT_REF, DEFAULT_REPO_URL
    from judgebench_flows.core.errors import UserError
    from judgebench_flows.data.dataset import DEFAULT_CACHE_DIR, fetch_repository

    key_dirs = (DEFAULT_CACHE_DIR / "repos").glob("*")
    if not any(_has_data(path) for path in key_dirs) and not _github_reachable():
        return None
    try:
        return fetch_repository(DEFAULT_REPO_URL, DEFAULT_REF, DEFAULT_CACHE_DIR).path
    except (UserError, OSError, subprocess.SubprocessError):
        return None


def find_benchmark_data() -> Path | None:
    """A JudgeBench checkout with the data the tests read, or None (those tests then skip)."""
    given = os.environ.get(ENV_VAR)
    if given and given != "none":
        return Path(given).expanduser().resolve()  # named explicitly: used as given, its tests say if wrong
    if _has_data(BESIDE_REPO):
        return BESIDE_REPO
    clone = _pinned_clone()
    return clone if clone is not None and _has_data(clone) else None


# LLMBar (princeton-nlp/LLMBar): its Dataset/LLMBar (data, published results) and LLMEvaluator/evaluators.
LLMBAR_ENV_VAR = "JUDGEBENCH_LLMBAR_TEST_DATA"
LLMBAR_BESIDE_REPO = Path(__file__).resolve().parents[2] / "shared" / "llmbar"
LLMBAR_FILE = Path("Dataset") / "LLMBar" / "Natural" / "dataset.json"
LLMBAR_MISSING = (
    f"LLMBar data not found: git clone https://github.com/princeton-nlp/LLMBar and set {LLMBAR_ENV_VAR} to that folder"
)


def find_llmbar_data() -> Path:
    """The LLMBar checkout the tests read: `JUDGEBENCH_LLMBAR_TEST_DATA`, else ../shared/llmbar (it may
    lack the data: `llmbar_data_available` in conftest says)."""
    given = os.environ.get(LLMBAR_ENV_VAR)
    if given and given != "none":
        return Path(given).expanduser().resolve()
    return LLMBAR_BESIDE_REPO

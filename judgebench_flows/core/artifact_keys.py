"""Prefect artifact keys per configuration.

A keyed artifact is a series: the UI shows its latest version and its history. One key for every
configuration made that latest version whichever nightly cell ran last, so each configuration (judge,
model, endpoint host, data file) gets its own key. Prefect allows only lowercase letters, digits and
dashes in a key.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from urllib.parse import urlsplit

SUMMARY_PREFIX = "judgebench-summary"
ACCURACY_PREFIX = "judgebench-accuracy"
NIGHTLY_KEY = "judgebench-nightly"
_PART_LIMIT = 40


def slug(text: str, limit: int = _PART_LIMIT) -> str:
    """Lowercase letters, digits and single dashes: gpt-4o/mini:latest -> gpt-4o-mini-latest."""
    cleaned = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return cleaned[:limit].strip("-") or "x"


def data_label(data_file: str) -> str:
    """JudgeBench's `dataset=judgebench,response_model=gpt-4o-2024-05-13.jsonl` -> its values only."""
    stem = Path(data_file).name.rsplit(".", 1)[0] if "." in Path(data_file).name else Path(data_file).name
    values = [part.split("=", 1)[1] if "=" in part else part for part in stem.split(",")]
    return "-".join(values)


def endpoint_host(base_url: str | None) -> str:
    """The endpoint's host (and port), never its credentials or path; `local` for judges with no endpoint."""
    if not base_url or base_url.startswith("local:"):
        return "local"
    parts = urlsplit(base_url)
    return (parts.hostname or "endpoint") + (f"-{parts.port}" if parts.port else "")


def configuration_slug(judge: str, model: str, base_url: str | None, data_file: str) -> str:
    """judge-model-host-data, each part shortened, plus a short hash of the full values so two
    configurations whose shortened parts agree still get different keys."""
    full = "\0".join([judge, model, endpoint_host(base_url), data_file])
    digest = hashlib.sha256(full.encode()).hexdigest()[:6]
    parts = [slug(judge, 24), slug(model), slug(endpoint_host(base_url), 30), slug(data_label(data_file))]
    return "-".join([*parts, digest])


def summary_key(configuration: str) -> str:
    return f"{SUMMARY_PREFIX}-{configuration}"


def accuracy_key(configuration: str) -> str:
    return f"{ACCURACY_PREFIX}-{configuration}"


__all__ = ["NIGHTLY_KEY", "accuracy_key", "configuration_slug", "data_label", "endpoint_host", "slug", "summary_key"]

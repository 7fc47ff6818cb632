"""results.json's `provenance`: what a run sent, and what the endpoint said about the model that answered.

A hosted alias (`gpt-4o`, `claude-3-5-sonnet-latest`) or a vLLM server's served model name can change
behind one name; what the answers say (`model`, `system_fingerprint`) and what the server lists
(`/v1/models`: `root`, `max_model_len`, `created`) show it. The other side of the same question is what
we sent: this package's version, the judge prompt's template hash, the sampling as sent, the provider and
the endpoint (never a credential). `scoring.provenance` compares two runs' provenance.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from functools import cache
from urllib.parse import urlsplit, urlunsplit

from pydantic import JsonValue

from judgebench_flows.calls.caller import CallStats
from judgebench_flows.calls.providers import wire_params
from judgebench_flows.calls.request_rules import shape
from judgebench_flows.core.credentials import public_url
from judgebench_flows.core.secrets import redact
from judgebench_flows.core.version import VERSION
from judgebench_flows.judges.procedure import Judge
from judgebench_flows.judging.run_context import RunCalls
from judgebench_flows.judging.shards import JudgeSpec, learned_of
from judgebench_flows.scoring.result_types import Provenance, Sent, Served


@cache
def package_version() -> str:
    try:
        return importlib.metadata.version("judgebench-flows")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return VERSION


def public_endpoint(url: str) -> str:
    """The endpoint as results may name it: no user:password@, no query (a `?key=`), no fragment."""
    parts = urlsplit(public_url(url))
    return redact(urlunsplit(parts._replace(query="", fragment="")))


def template_hash(judge: Judge, fingerprint: str) -> str:
    """The judge prompt's templates, hashed (`TemplateSet.digest`); a judge without templates (custom,
    external, reward): its fingerprint's hash, which changes with its source and prompts."""
    templates, names = getattr(judge, "templates", None), getattr(judge, "template_names", None)
    if templates is not None and names:
        return str(templates.digest(names))[:16]
    return hashlib.sha256(fingerprint.encode()).hexdigest()[:16]


def sampling_sent(spec: JudgeSpec, judge: Judge, calls: RunCalls) -> dict[str, JsonValue]:
    """The judge's sampling as the model's request rule (with what the run learned from 400s) shaped it
    and the provider's wire sends it: what every first-turn request carried."""
    sampling = dict(getattr(judge, "sampling", None) or {})
    _, params = shape(learned_of(spec, calls).rule, [], sampling)
    return dict(wire_params(spec.endpoint.provider, spec.model, params))


def served_of(sent: CallStats) -> Served:
    """The distinct values the answers named, each with its count, and the model's listing."""
    models: dict[str, int] = {}
    fingerprints: dict[str, int] = {}
    for (model, fingerprint), answers in sorted(sent.served.items()):
        if model:
            models[model] = models.get(model, 0) + answers
        if fingerprint:
            fingerprints[fingerprint] = fingerprints.get(fingerprint, 0) + answers
    return Served(
        answers=sum(sent.served.values()),
        models=models,
        system_fingerprints=fingerprints,
        model_entry=sent.model_entry,
    )


def provenance_of(spec: JudgeSpec, judge: Judge, calls: RunCalls, sent: CallStats | None) -> Provenance:
    """What the run sent, and (judged in this process: `sent`) what the endpoint said it answered with."""
    endpoint = spec.endpoint
    return Provenance(
        sent=Sent(
            package_version=package_version(),
            provider=endpoint.provider_name,
            endpoint=public_endpoint(spec.base_url),
            model=spec.model,
            template_hash=template_hash(judge, spec.judge_fingerprint),
            sampling=sampling_sent(spec, judge, calls),
        ),
        served=served_of(sent) if sent is not None else None,
    )


__all__ = ["package_version", "provenance_of", "public_endpoint", "served_of", "template_hash"]

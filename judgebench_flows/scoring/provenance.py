"""Two runs' `provenance` side by side: what the endpoint said differently (the model changed behind its
name) and which of the fields we sent differ. The night's check compares a run with the baseline its
regression check uses (the latest finished run of its configuration); `compare` compares any two."""

from __future__ import annotations

import json

from pydantic import JsonValue
from sqlalchemy.engine import Engine

from judgebench_flows.core.records import FINISHED
from judgebench_flows.data import db
from judgebench_flows.scoring.result_types import Drift, FieldChange, Provenance, Sent, Served

ENTRY_FIELDS = ("id", "root", "max_model_len", "created")  # of a `/models` entry, in the order shown


def _text(value: JsonValue) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _values(counts: dict[str, int]) -> str:
    """The distinct values the answers named, most answers first: `fp_a` or `fp_a (18), fp_b (2)`."""
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    if len(ordered) == 1:
        return ordered[0][0]
    return ", ".join(f"{value} ({n})" for value, n in ordered)


def served_changes(before: Served | None, after: Served | None) -> list[FieldChange]:
    """What the endpoint said differently: the `model` answered as, `system_fingerprint`, the `/models`
    entry's fields. Only where both runs received answers (a run answered from a cache heard nothing)."""
    if before is None or after is None or not before.answers or not after.answers:
        return []
    changes = []
    for name, old, new in (
        ("model", before.models, after.models),
        ("system_fingerprint", before.system_fingerprints, after.system_fingerprints),
    ):
        if set(old) != set(new):
            changes.append(FieldChange(field=name, before=_values(old) or "-", after=_values(new) or "-"))
    old_entry, new_entry = before.model_entry or {}, after.model_entry or {}
    if old_entry and new_entry:
        for name in ENTRY_FIELDS:
            if old_entry.get(name) != new_entry.get(name):
                old_value, new_value = old_entry.get(name), new_entry.get(name)
                changes.append(
                    FieldChange(
                        field=f"models.{name}",
                        before="-" if old_value is None else _text(old_value),
                        after="-" if new_value is None else _text(new_value),
                    )
                )
    return changes


def _flat(sent: Sent) -> dict[str, str]:
    fields = {name: _text(getattr(sent, name)) for name in ("package_version", "provider", "endpoint", "model")}
    fields["template_hash"] = sent.template_hash
    fields |= {f"sampling.{name}": _text(value) for name, value in sent.sampling.items()}
    return fields


def sent_changes(before: Sent, after: Sent) -> list[FieldChange]:
    """Which fields of what was sent differ, each sampling parameter on its own."""
    old, new = _flat(before), _flat(after)
    return [
        FieldChange(field=name, before=old.get(name, "-"), after=new.get(name, "-"))
        for name in [*old, *(n for n in new if n not in old)]
        if old.get(name) != new.get(name)
    ]


def drift_between(baseline: Provenance | None, candidate: Provenance, baseline_run_id: str | None) -> Drift:
    """The candidate's provenance against the baseline's: `changed` when the endpoint said something
    else about the model that answered; the fields sent differently are named beside it."""
    if baseline is None:
        return Drift(baseline_run_id=baseline_run_id, message="")
    served = served_changes(baseline.served, candidate.served)
    sent = sent_changes(baseline.sent, candidate.sent)
    parts = []
    if served:
        parts.append("the endpoint changed: " + "; ".join(change.text() for change in served))
    if sent:
        parts.append("sent differently: " + "; ".join(change.text() for change in sent))
    against = f" (against run {baseline_run_id[:8]})" if baseline_run_id and parts else ""
    return Drift(
        baseline_run_id=baseline_run_id,
        changed=bool(served),
        served=served,
        sent=sent,
        message=", ".join(parts) + against,
    )


def provenance_in(results_json: str | None) -> Provenance | None:
    """A stored results.json's provenance (None: a run from before it was recorded, or unreadable)."""
    if not results_json:
        return None
    try:
        given = json.loads(results_json).get("provenance")
        return Provenance.model_validate(given) if isinstance(given, dict) else None
    except (ValueError, TypeError):
        return None


SERVED_TEXT_LIMIT = 200  # characters of `runs.served_as`


def served_text(served: Served | None) -> str | None:
    """What the endpoint said, in one short line for `history` (`runs.served_as`): the model answered as,
    the fingerprints, the checkpoint a vLLM server lists (`root`) when it is not the name. None: nothing
    heard (no endpoint, answers from a cache, or judged on Dask)."""
    if served is None or not served.answers:
        return None
    parts = [_values(served.models), _values(served.system_fingerprints)]
    entry = served.model_entry or {}
    root = entry.get("root")
    if root is not None and root != entry.get("id"):
        parts.append(f"root {_text(root)}")
    text = " ".join(part for part in parts if part)
    return text[:SERVED_TEXT_LIMIT] or None


LOOK_BACK = 10  # finished runs searched for one whose calls were answered (not all from a cache)


def drift_against_baseline(engine: Engine, config_key: str, run_id: str, candidate: Provenance) -> Drift | None:
    """This run's provenance against the latest finished run of its configuration whose endpoint
    answered (a run answered wholly from a cache heard nothing; else the latest that recorded one); None
    without one."""
    previous = [
        (r.run_id, provenance)
        for r in db.list_runs(engine, limit=LOOK_BACK + 1, config_key=config_key, statuses=FINISHED)
        if r.run_id != run_id and (provenance := provenance_in(r.results_json)) is not None
    ]
    if not previous:
        return None
    heard = [(rid, p) for rid, p in previous if p.served is not None and p.served.answers]
    baseline_run_id, baseline = (heard or previous)[0]
    return drift_between(baseline, candidate, baseline_run_id)


__all__ = [
    "drift_against_baseline",
    "drift_between",
    "provenance_in",
    "sent_changes",
    "served_changes",
    "served_text",
]

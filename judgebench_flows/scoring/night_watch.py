"""A run's sequential check: its configuration's nights since the reference's boundary replayed through
`scoring.sequential.step`, this run the last night; results.json's `regression.sequential`.

The boundary is the newest of: the configuration's last reset (`judgebench alerts reset`, an
`alert_events` row), and its newest run whose served build drifted (`runs.drift`: that run starts the new
reference). A new judge or JudgeBench commit is a new configuration key, so a new history. The replay reads
at most `HISTORY_NIGHTS` runs since then (the reference is the first nights of those). A flag, once raised,
is stored as an event and stays until a reset, whatever later nights show.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

import numpy as np
from sqlalchemy.engine import Engine

from judgebench_flows.core.records import FINISHED
from judgebench_flows.data import db
from judgebench_flows.data.alert_events import FLAGGED, RESET, add_event, latest_event
from judgebench_flows.scoring.alerts import AlertPlan
from judgebench_flows.scoring.metrics import PairScore
from judgebench_flows.scoring.noise import Z95
from judgebench_flows.scoring.result_types import SequentialChange
from judgebench_flows.scoring.sequential import Watch, change, nights_to_detect, paired_shift, pooled_variance, step
from judgebench_flows.scoring.stored_runs import scored_runs

HISTORY_NIGHTS = 60
DETECT_POINTS = 5.0  # the persistent drop whose nights to detection each check states
Night = tuple[str, dict[str, PairScore]]


def runs_since_boundary(engine: Engine, config_key: str, run_id: str) -> tuple[list[db.RunRow], datetime | None]:
    """The stored runs since the boundary, oldest first, and when the newest drifted run among them
    started (None: no drift since the last reset): that run starts the new reference."""
    last = latest_event(engine, config_key)
    reset_at: datetime | None = last.at if last and last.kind == RESET else None
    rows = [
        r
        for r in db.list_runs(engine, limit=HISTORY_NIGHTS + 1, config_key=config_key, statuses=FINISHED)
        if r.run_id != run_id and (reset_at is None or db.as_utc(r.started) > reset_at)
    ][:HISTORY_NIGHTS]
    rows.reverse()
    drifted = [i for i, r in enumerate(rows) if r.drift]
    if not drifted:
        return rows, None
    return rows[drifted[-1] :], db.as_utc(rows[drifted[-1]].started)


def _correct(scores: dict[str, PairScore], pairs: Sequence[str], width: int) -> np.ndarray:
    """One night's per-pair correctness by epoch, (1, pairs, width), NaN where a pair has fewer or none."""
    out = np.full((1, len(pairs), width), np.nan)
    for i, pair in enumerate(pairs):
        if pair in scores:
            values = scores[pair].epoch_credits()  # each epoch's share right (LLMBar: of its orders)
            out[0, i, : len(values)] = values
    return out


def replay(nights: Sequence[Night], pairs: Sequence[str], alpha: float) -> Watch:
    """The nights through the sequential test, oldest first, over `pairs`."""
    width = max((s.epochs for _, scores in nights for s in scores.values()), default=1)
    watch = Watch.start((1,), len(pairs))
    for _, scores in nights:
        watch, _night = step(watch, _correct(scores, pairs, width), alpha)
    return watch


def _by_category(watch: Watch, categories: Sequence[str]) -> dict[str, tuple[float, float]]:
    """Each category's change over the suspected nights against the reference, and its SE."""
    found = {}
    names = np.asarray(categories)
    for name in sorted(set(categories)):
        mask = names == name
        reference = type(watch.reference)(*(a[..., mask] for a in watch.reference.fields()))
        suspect = type(watch.suspect)(*(a[..., mask] for a in watch.suspect.fields()))
        delta, se_night, se_ref, n = paired_shift(suspect, reference, pooled_variance(reference, suspect))
        if int(n[0]):
            found[name] = (float(delta[0]), float(np.hypot(se_night[0], se_ref[0])))
    return found


def sequential_check(
    engine: Engine,
    config_key: str,
    run_id: str,
    scores: dict[str, PairScore],
    plan: AlertPlan,
    within: float,
    rule: str = "judgebench",
) -> SequentialChange | None:
    """This run as the newest night of its configuration's sequential test (None: the plan has none); its
    earlier nights scored by the same benchmark `rule` as `scores`."""
    if not plan.sequential or not scores:
        return None
    rows, drift_at = runs_since_boundary(engine, config_key, run_id)
    nights = [*scored_runs(engine, rows, rule), (run_id, scores)]
    pairs = sorted(scores)
    watch = replay(nights, pairs, plan.sequential_alpha)
    epochs = max(s.epochs for s in scores.values())
    result = SequentialChange(
        statistic=round(float(watch.statistic[0]), 6),
        threshold=None if np.isinf(watch.threshold[0]) else round(float(watch.threshold[0]), 6),
        alpha=plan.sequential_alpha,
        nights=len(nights),
        detect_points=DETECT_POINTS,
        nights_to_detect=nights_to_detect(DETECT_POINTS / 100, within, len(pairs), epochs, plan.sequential_alpha),
    )
    last = latest_event(engine, config_key)
    if last and last.kind == FLAGGED and drift_at is not None and last.at < drift_at:
        last = None  # raised before the served build drifted: the new build's nights start afresh
    if watch.flagged[0]:
        _measured(result, watch, nights, [scores[p].category for p in pairs])
        result.new = int(watch.alarm[0]) == len(nights) - 1 or not (last and last.kind == FLAGGED)
        if result.new:
            add_event(engine, config_key, FLAGGED, run_id, result.model_dump_json())
        else:
            result.message = f"still flagged until `judgebench alerts reset {config_key[:12]}`: {result.message}"
    elif last and last.kind == FLAGGED:  # flagged earlier: stays until a reset
        stored = SequentialChange.model_validate(json.loads(last.detail or "{}"))
        stored.new, stored.nights, stored.nights_to_detect = False, len(nights), result.nights_to_detect
        stored.message = f"still flagged until `judgebench alerts reset {config_key[:12]}`: {stored.message}"
        return stored
    else:
        result.message = (
            f"no change suspected against {min(len(nights) - 1, int(watch.reference_nights[0]))} reference nights "
            f"(statistic {result.statistic:.2f}"
            + (f" of {result.threshold:.2f}" if result.threshold is not None else ", reference still filling")
            + f"); a persistent {DETECT_POINTS:g}-point drop is caught within "
            + (f"{result.nights_to_detect} nights" if result.nights_to_detect else "more than 60 nights")
            + " 90% of the time"
            + ("; a new reference since the served build drifted" if drift_at is not None else "")
        )
    return result


def _measured(result: SequentialChange, watch: Watch, nights: Sequence[Night], categories: list[str]) -> None:
    """A flagged change: since which run, by how much, on which categories, in words."""
    delta, se = (float(x[0]) for x in change(watch))
    since, alarm = int(watch.since[0]), int(watch.alarm[0])
    result.flagged = True
    result.since_run_id = nights[since][0] if 0 <= since < len(nights) else None
    result.flagged_run_id = nights[alarm][0] if 0 <= alarm < len(nights) else None
    result.delta, result.ci_low, result.ci_high = delta, delta - Z95 * se, delta + Z95 * se
    per = _by_category(watch, categories)
    result.categories = {name: round(d, 6) for name, (d, _) in per.items()}
    result.worse_categories = [n for n, (d, s) in sorted(per.items(), key=lambda kv: kv[1][0]) if d + Z95 * s < 0]
    where = ", ".join(result.worse_categories) or "no single category beyond its noise"
    result.message = (
        f"accuracy changed by {delta * 100:+.1f} points (95% CI {result.ci_low * 100:+.1f} to "
        f"{result.ci_high * 100:+.1f}) since run {(result.since_run_id or '?')[:8]}, over "
        f"{len(nights) - since} nights against the {int(watch.reference_nights[0])} nights before; worse on: {where}"
    )


__all__ = ["HISTORY_NIGHTS", "replay", "runs_since_boundary", "sequential_check"]

"""Prefect events for finished judging runs and nights, so Prefect automations can act on them.

A result that needs a person (a regression, a run that failed) used to be a log line, an artifact and a
Failed state: nothing Prefect's automations could match. Every finished `judgebench` run now emits
`judgebench.run.completed`, `judgebench.run.regressed` or `judgebench.run.failed`, and every night
`judgebench.night.completed|regressed|failed`. A nightly cell that failed for a passing reason and will
be tried once more (flows/retries.py) emits `judgebench.run.retrying` instead: the alert waits for the
attempt that decides. Routing them (a webhook, Slack, e-mail, a rerun) is
configured in Prefect (`judgebench automations install`), not in this code.

The run event's resource is the configuration: `judgebench.config.<config_key>`, the key its history
in the results database uses (judge, model, endpoint, data file, commit and prompts), so it is the same
resource night after night while nothing about the configuration changed, and automations can match
one configuration or all of them (`judgebench.config.*`). A run that failed before it knew its commit
(an unreachable repository) names its configuration by the key without commit and prompts.

Nothing secret goes into an event: the payload is built from results.json's public fields and the
configuration's public form (no credentials in URLs), and failure messages pass the log redaction.
Emitting never fails a run: without a Prefect API, or if the events client is down, the event is lost
and the run's own state, artifacts and results still say everything.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from prefect.events import emit_event
from prefect.logging import get_logger
from pydantic import BaseModel
from typing_extensions import NotRequired, TypedDict

from judgebench_flows.calls.limits import EndpointUse
from judgebench_flows.core.config import RunConfig
from judgebench_flows.core.credentials import public_url
from judgebench_flows.core.secrets import redact
from judgebench_flows.scoring.cell_outcome import CellOutcome, RunStatus
from judgebench_flows.scoring.result_types import Drift, RateChange, Regression, SliceAccuracy
from judgebench_flows.scoring.run_results import RunResults

RUN_EVENT_PREFIX = "judgebench.run."
NIGHT_EVENT_PREFIX = "judgebench.night."
CONFIG_RESOURCE_PREFIX = "judgebench.config."
NIGHT_RESOURCE_PREFIX = "judgebench.night."
MESSAGE_LIMIT = 500  # characters of a failure or regression message carried in a payload


@dataclasses.dataclass
class RunTrace:
    """What a judging run has learned about itself so far, for the event of a run that fails midway:
    filled in by the flow as it goes (run id once recorded, commit once fetched, key once known)."""

    run_id: str | None = None
    commit: str | None = None
    config_key: str | None = None
    data_file: str | None = None


class BeforeAfter(TypedDict):
    baseline: float | None
    candidate: float | None


class PositionBiasChange(TypedDict):
    """What changed in position bias (`scoring.regression.position_bias_change`), without its message."""

    changed: bool | None
    order_consistency: BeforeAfter | None
    first_position_rate: BeforeAfter | None


class Change(TypedDict):
    """A run's change against its baseline run (results.json's `regression`), with its interval."""

    delta: float | None
    ci_low: float | None
    ci_high: float | None
    p_drop: float | None
    regressed: bool | None
    baseline_run_id: str | None
    baseline_accuracy: float | None
    n_pairs: int | None
    position_bias: NotRequired[PositionBiasChange]


class FieldChangeJson(TypedDict):
    field: str
    before: str
    after: str


class DriftPayload(TypedDict):
    """What the endpoint said differently from the baseline run (a new `system_fingerprint`, another
    model behind the name: `served`), and which fields sent differ (`sent`); results.json's `drift`."""

    changed: bool
    baseline_run_id: str | None
    served: list[FieldChangeJson]
    sent: list[FieldChangeJson]
    message: str


class RunPayload(TypedDict):
    """A `judgebench.run.*` event's payload (docs/operations.md names its fields; automations match them)."""

    status: RunStatus
    run_id: str | None
    flow_run_id: str | None
    accuracy: float | None
    ci_low: float | None
    ci_high: float | None
    n_pairs: int | None
    change: Change | None
    judgments: int | None
    failed_judgments: int | None
    invalid_judgments: int | None
    cost_usd: float | None
    message: str | None
    # What the endpoint said about the model that answered (results.json's `provenance.served`) and
    # what changed against the baseline (None: nothing recorded, or no baseline).
    served: dict[str, Any] | None
    drift: DriftPayload | None
    retrying: NotRequired[bool]  # set by `run_event`


class RunEvent(TypedDict):
    event: str
    resource: dict[str, str]
    payload: RunPayload


class NightRefused(BaseModel):
    """The one cell a night refused before its first cell reports: its preflight's one line."""

    name: Literal["preflight"] = "preflight"
    status: Literal["failed"] = "failed"
    message: str


class NightPayload(BaseModel):
    """A `judgebench.night.*` event's payload: every cell's outcome, and the night's timing once it ran."""

    status: RunStatus
    attempt: int
    cells: list[CellOutcome | NightRefused]
    counts: dict[RunStatus, int]
    wall_s: float | None = None  # with `endpoints`: left out of a night refused before its first cell
    endpoints: dict[str, EndpointUse] | None = None

    def as_json(self) -> dict[str, Any]:
        """The payload as sent: each cell as its model dumps, the timing only when the night ran."""
        return self.model_dump(exclude={"wall_s", "endpoints"} if self.wall_s is None else None)


def _judge_name(config: RunConfig) -> str:
    if config.judge_template:
        return config.judge_template
    if config.external_judge_path:
        return f"external:{Path(config.external_judge_path).stem}"
    return config.judge_type


def config_resource(config: RunConfig, trace: RunTrace) -> dict[str, str]:
    """The configuration as a Prefect resource: a stable id plus labels automations can match on."""
    data_file = trace.data_file or (Path(config.data_path).name if config.data_path else config.data_file)
    key = trace.config_key or config.config_key(trace.commit)
    labels = {
        "prefect.resource.id": f"{CONFIG_RESOURCE_PREFIX}{key}",
        "prefect.resource.name": f"{_judge_name(config)} / {config.model} / {data_file}",
        "judgebench.judge": _judge_name(config),
        "judgebench.model": config.model,
        "judgebench.dataset": data_file,
        "judgebench.commit": trace.commit or "",
        "judgebench.repo": public_url(config.repo_url) if not config.data_path else "",
        "judgebench.endpoint": config.endpoint_identity() or "",
    }
    return labels


def run_status(results: RunResults | None, error: BaseException | None) -> RunStatus:
    """How the run ended, as the results database records it."""
    if error is not None or results is None or results.run.status == "failed":
        return "failed"
    return "regressed" if results.regressed else "completed"


def _before_after(change: RateChange) -> BeforeAfter:
    return BeforeAfter(baseline=change.baseline, candidate=change.candidate)


def _change(regression: Regression | None) -> Change | None:
    """The change against the baseline run with its interval (None without a baseline)."""
    if regression is None:
        return None
    change = Change(
        delta=regression.delta,
        ci_low=regression.ci_low,
        ci_high=regression.ci_high,
        p_drop=regression.p_drop,
        regressed=regression.regressed,
        baseline_run_id=regression.baseline_run_id,
        baseline_accuracy=regression.baseline_accuracy,
        n_pairs=regression.n_pairs,
    )
    bias = regression.position_bias
    if bias is not None:  # what changed in position bias, without its long message (the payload's message has it)
        change["position_bias"] = PositionBiasChange(
            changed=bias.changed,
            order_consistency=_before_after(bias.order_consistency),
            first_position_rate=_before_after(bias.first_position_rate),
        )
    return change


def run_payload(
    results: RunResults | None, error: BaseException | None, trace: RunTrace, flow_run_id: str | None
) -> RunPayload:
    """What a run measured, in plain JSON: enough for a notification without opening the run."""
    overall = results.overall_accuracy if results is not None else SliceAccuracy()
    invalid, usage = (results.invalid, results.usage) if results is not None else (None, None)
    regression = results.regression if results is not None else None
    served = results.provenance.served if results is not None and results.provenance is not None else None
    if error is not None:
        message: str | None = redact(f"{type(error).__name__}: {error}")
    else:
        message = (results.run.failure if results is not None else None) or (regression.message if regression else None)
    payload: RunPayload = {
        "status": run_status(results, error),
        "run_id": (results.run.run_id if results is not None else None) or trace.run_id,
        "flow_run_id": flow_run_id,
        "accuracy": overall.accuracy,
        "ci_low": overall.ci_low,
        "ci_high": overall.ci_high,
        "n_pairs": results.dataset.n_pairs if results is not None else None,
        "change": _change(regression),
        "judgments": usage.judgments if usage is not None else None,
        "failed_judgments": invalid.failed_judgments if invalid is not None else None,
        "invalid_judgments": invalid.invalid_judgments if invalid is not None else None,
        "cost_usd": usage.dollars if usage is not None else None,
        "message": message[:MESSAGE_LIMIT] if message else None,
        "served": served.model_dump(mode="json") if served is not None else None,
        "drift": _drift(results.drift if results is not None else None),
    }
    return payload


def _drift(drift: Drift | None) -> DriftPayload | None:
    if drift is None:
        return None
    return DriftPayload(
        changed=drift.changed,
        baseline_run_id=drift.baseline_run_id,
        served=[FieldChangeJson(field=c.field, before=c.before, after=c.after) for c in drift.served],
        sent=[FieldChangeJson(field=c.field, before=c.before, after=c.after) for c in drift.sent],
        message=drift.message[:MESSAGE_LIMIT],
    )


def drifted_event(event: RunEvent) -> RunEvent | None:
    """`judgebench.run.drifted` for a run that completed (accuracy within noise) while the endpoint said
    something else about the model than at the baseline run: a change nobody would see otherwise. A
    regressed or failed run's own event carries its drift already."""
    payload = event["payload"]
    drift = payload.get("drift")
    if payload["status"] != "completed" or not drift or not drift["changed"]:
        return None
    return RunEvent(event=RUN_EVENT_PREFIX + "drifted", resource=event["resource"], payload=payload)


def run_event(
    config: RunConfig,
    results: RunResults | None,
    trace: RunTrace,
    error: BaseException | None = None,
    flow_run_id: str | None = None,
    retrying: bool = False,
) -> RunEvent:
    """The run's `judgebench.run.<status>` event as name, resource and payload: `retrying` instead of
    `failed` for a failure that another attempt follows."""
    payload = run_payload(results, error, trace, flow_run_id)
    payload["retrying"] = retrying and payload["status"] == "failed"
    name = RUN_EVENT_PREFIX + ("retrying" if payload["retrying"] else payload["status"])
    return RunEvent(event=name, resource=config_resource(config, trace), payload=payload)


def emit(event: RunEvent) -> None:
    """Send a `run_event` to Prefect, which adds the flow run, flow and deployment as related resources
    from the run context; and `judgebench.run.drifted` after it when its endpoint changed (`drifted_event`)."""
    _emit(event["event"], dict(event["resource"]), event["payload"])
    drifted = drifted_event(event)
    if drifted is not None:
        _emit(drifted["event"], dict(drifted["resource"]), drifted["payload"])


def night_status(statuses: Iterable[str]) -> RunStatus:
    """A night is failed if any cell failed, else regressed if any regressed."""
    seen = set(statuses)
    return "failed" if "failed" in seen else "regressed" if "regressed" in seen else "completed"


def emit_night_event(
    matrix_path: str,
    cells: Sequence[CellOutcome | NightRefused],
    attempt: int = 1,
    wall_s: float | None = None,
    endpoints: dict[str, EndpointUse] | None = None,
) -> NightPayload:
    """Emit `judgebench.night.<status>` with every cell's outcome; the matrix file is its resource.
    Each attempt of a night emits one (`attempt` counts them), since a retried night ends twice.
    `wall_s`, `endpoints`: the night's wall time and each endpoint's calls and busy time."""
    status = night_status(cell.status for cell in cells)
    resource = {
        "prefect.resource.id": f"{NIGHT_RESOURCE_PREFIX}{Path(matrix_path).stem}",
        "prefect.resource.name": f"JudgeBench nightly ({matrix_path})",
        "judgebench.matrix": matrix_path,
    }
    statuses: tuple[RunStatus, ...] = ("completed", "regressed", "failed")
    payload = NightPayload(
        status=status,
        attempt=attempt,
        cells=list(cells),
        counts={s: sum(c.status == s for c in cells) for s in statuses},
        wall_s=wall_s,
        endpoints=endpoints,
    )
    _emit(NIGHT_EVENT_PREFIX + status, resource, payload)
    return payload


def _emit(name: str, resource: dict[str, str], payload: RunPayload | NightPayload) -> None:
    try:
        sent = payload.as_json() if isinstance(payload, NightPayload) else dict(payload)
        emit_event(event=name, resource=resource, payload=sent)
    except Exception as exc:  # an event is a courtesy to automations: the run's own outcome stands
        get_logger("judgebench_flows.events").warning("could not emit %s: %s", name, exc)


__all__ = [
    "NightPayload",
    "NightRefused",
    "RunEvent",
    "RunPayload",
    "RunStatus",
    "RunTrace",
    "config_resource",
    "drifted_event",
    "run_event",
    "emit_night_event",
    "emit",
    "night_status",
    "run_payload",
    "run_status",
]

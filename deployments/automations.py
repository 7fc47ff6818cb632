"""The Prefect automations that run JudgeBench's nights for a team: alerts, and crashed runs recovered.

Three automations on the Prefect server in use, each found by its name, so installing again updates
them in place and `remove` deletes exactly these:

- `judgebench-alert`: on `judgebench.run.regressed`, `judgebench.run.failed` or `judgebench.run.drifted`
  (the endpoint said another model or `system_fingerprint` than at the baseline while accuracy held;
  flows/events.py), send a notification through a Prefect notification block (Slack, e-mail, Teams, a
  custom webhook...) naming the judge, model, accuracy, change against the baseline and what the
  endpoint said differently.
- `judgebench-silent-runs-crashed`: Prefect's documented zombie detection: a run of our deployments
  that sent a heartbeat (the deployments set `PREFECT_FLOWS_HEARTBEAT_FREQUENCY`) and then neither
  another heartbeat nor a final state within `SILENCE` is marked Crashed: its machine is gone.
- `judgebench-reschedule-crashed`: a run of our deployments entering Crashed (its process killed, its
  machine lost, or marked so above) is set back to Scheduled (`AwaitingRetry`), so a worker runs the
  same flow run again; answered calls come from the call cache and finished configurations from
  Prefect's results, so nothing is paid twice. Only while its run count is at most
  `MAX_RESCHEDULES`: a run that keeps crashing stays Crashed for a person to look at.

"Our deployments" are flow runs of a deployment tagged `judgebench` (prefect.yaml, deployments/deploy.py).
"""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

from prefect.automations import Automation
from prefect.blocks.core import Block
from prefect.blocks.notifications import CustomWebhookNotificationBlock, NotificationBlock
from prefect.client.schemas.objects import StateType
from prefect.events.actions import ChangeFlowRunState, SendNotification
from prefect.events.schemas.automations import EventTrigger, Posture
from prefect.exceptions import ObjectNotFound

from judgebench_flows.core.errors import UserError
from judgebench_flows.flows.events import CONFIG_RESOURCE_PREFIX, RUN_EVENT_PREFIX

ALERT = "judgebench-alert"
SILENT_RUNS = "judgebench-silent-runs-crashed"
RESCHEDULE = "judgebench-reschedule-crashed"
NAMES = (ALERT, SILENT_RUNS, RESCHEDULE)
WEBHOOK_BLOCK = "judgebench-alert-webhook"  # the block `--webhook-url` creates
DEPLOYMENT_TAG = "judgebench"
HEARTBEAT_SECONDS = 30  # what the deployments set; Prefect's minimum
SILENCE = timedelta(seconds=90)  # three missed heartbeats, as Prefect's documented automation
MAX_RESCHEDULES = 2

# Related resources every run of our deployments has: its deployment and our tag.
OUR_DEPLOYMENT_RUNS: list[dict[str, str]] = [
    {"prefect.resource.role": "deployment"},
    {"prefect.resource.role": "tag", "prefect.resource.id": f"prefect.tag.{DEPLOYMENT_TAG}"},
]

SUBJECT = (
    "JudgeBench {{ event.event.split('.')[-1] }}: "
    "{{ event.resource['judgebench.judge'] }} / {{ event.resource['judgebench.model'] }}"
)
# Jinja, rendered by the Prefect server with the triggering event; every payload field may be null.
BODY = """\
{{ event.event }}: judge {{ event.resource['judgebench.judge'] }}, model {{ event.resource['judgebench.model'] }}
dataset: {{ event.resource['judgebench.dataset'] }} at {{ event.resource['judgebench.commit'][:12] or '-' }}
{% set p = event.payload %}accuracy: {% if p.accuracy is not none %}{{ '%.2f%%' % (100 * p.accuracy) }}\
{% if p.ci_low is not none %} (95% CI {{ '%.2f' % (100 * p.ci_low) }} - {{ '%.2f' % (100 * p.ci_high) }}){% endif %}\
{% else %}-{% endif %}
change against the baseline: {% if p.change %}{{ '%+.2f' % (100 * p.change.delta) }} points \
(95% CI {{ '%+.2f' % (100 * p.change.ci_low) }} to {{ '%+.2f' % (100 * p.change.ci_high) }}), \
baseline run {{ (p.change.baseline_run_id or '')[:8] }}{% else %}no baseline{% endif %}
failed judgments: {{ p.failed_judgments if p.failed_judgments is not none else '-' }}, \
invalid: {{ p.invalid_judgments if p.invalid_judgments is not none else '-' }} of {{ p.judgments or '-' }}\
{% if p.cost_usd is not none %}, cost ${{ '%.2f' % p.cost_usd }}{% endif %}
run: {{ p.run_id or '-' }} (flow run {{ p.flow_run_id or '-' }})
{% if p.drift and p.drift.changed %}endpoint changed: \
{% for c in p.drift.served %}{{ c.field }} {{ c.before }} -> {{ c.after }}{% if not loop.last %}; {% endif %}{% endfor %}
{% endif %}{{ p.message or '' }}
"""


def alert_automation(block_document_id: UUID) -> Automation:
    return Automation(
        name=ALERT,
        description="JudgeBench: notify when a configuration regressed, its run failed or its endpoint changed.",
        trigger=EventTrigger(
            expect={RUN_EVENT_PREFIX + "regressed", RUN_EVENT_PREFIX + "failed", RUN_EVENT_PREFIX + "drifted"},
            match={"prefect.resource.id": f"{CONFIG_RESOURCE_PREFIX}*"},
            posture=Posture.Reactive,
            threshold=1,
            within=timedelta(0),
        ),
        actions=[SendNotification(block_document_id=block_document_id, subject=SUBJECT, body=BODY)],
    )


def silent_runs_automation() -> Automation:
    """Prefect's documented zombie-flow automation, limited to our deployments' runs."""
    return Automation(
        name=SILENT_RUNS,
        description="JudgeBench: a deployment run whose heartbeats stopped is marked Crashed.",
        trigger=EventTrigger(
            after={"prefect.flow-run.heartbeat"},
            expect={
                "prefect.flow-run.heartbeat",
                "prefect.flow-run.Completed",
                "prefect.flow-run.Failed",
                "prefect.flow-run.Cancelled",
                "prefect.flow-run.Crashed",
            },
            match={"prefect.resource.id": "prefect.flow-run.*"},
            match_related=OUR_DEPLOYMENT_RUNS,  # type: ignore[arg-type]
            for_each={"prefect.resource.id"},
            posture=Posture.Proactive,
            threshold=1,
            within=SILENCE,
        ),
        actions=[
            ChangeFlowRunState(
                name=None,
                state=StateType.CRASHED,
                message=f"no heartbeat for {SILENCE.seconds} s: the process running it is gone",
                force=False,
            )
        ],
    )


def reschedule_automation() -> Automation:
    return Automation(
        name=RESCHEDULE,
        description=f"JudgeBench: a crashed deployment run is scheduled again (at most {MAX_RESCHEDULES} times).",
        trigger=EventTrigger(
            expect={"prefect.flow-run.Crashed"},
            match={
                "prefect.resource.id": "prefect.flow-run.*",
                # the run count when it crashed: 1 on the first attempt; each reschedule adds one
                "prefect.run-count": [str(n) for n in range(1, MAX_RESCHEDULES + 1)],
            },
            match_related=OUR_DEPLOYMENT_RUNS,  # type: ignore[arg-type]
            posture=Posture.Reactive,
            threshold=1,
            within=timedelta(0),
        ),
        actions=[
            ChangeFlowRunState(
                state=StateType.SCHEDULED,
                name="AwaitingRetry",
                message="rescheduled after a crash by the judgebench-reschedule-crashed automation",
                force=False,
            )
        ],
    )


def webhook_block(webhook_url: str) -> CustomWebhookNotificationBlock:
    """The block `--webhook-url` saves: a POST of JSON `{"subject", "body", "name"}` to the URL."""
    if not webhook_url.startswith(("http://", "https://")):
        raise UserError("--webhook-url: must start with http:// or https://")
    return CustomWebhookNotificationBlock(
        name="JudgeBench",
        url=webhook_url,
        method="POST",
        json_data={"subject": "{{subject}}", "body": "{{body}}", "name": "{{name}}"},
        headers=None,
        cookies=None,
    )


def saved_notification_block(name: str) -> UUID:
    """The id of a notification block saved on the server, given as `block-type-slug/name`, or as its
    name when exactly one block of that name exists."""
    from prefect.client.orchestration import get_client

    slug, _, short = name.rpartition("/")
    with get_client(sync_client=True) as client:
        documents = client.read_block_documents(include_secrets=False)
    found = [d for d in documents if d.name == short and d.block_type and (not slug or d.block_type.slug == slug)]
    if len(found) != 1:
        kinds = ", ".join(sorted(d.block_type.slug for d in found if d.block_type))
        why = "not found on the Prefect server" if not found else f"several blocks have it ({kinds}): give TYPE/NAME"
        raise UserError(f"--notify-block: '{name}': {why}")
    [document] = found
    block = Block.load(f"{document.block_type.slug}/{short}")  # type: ignore[union-attr]
    if not isinstance(block, NotificationBlock):
        raise UserError(f"--notify-block: '{name}' is a {type(block).__name__}, not a notification block")
    return document.id


def planned(block_document_id: UUID | None = None) -> list[Automation]:
    """Every automation `install` creates, in order (the alert sends through the given block)."""
    alert = alert_automation(block_document_id or UUID(int=0))
    return [alert, silent_runs_automation(), reschedule_automation()]


def install(webhook_url: str | None = None, block_name: str | None = None) -> list[tuple[str, str]]:
    """Create or update the three automations (and the webhook block for `webhook_url`); returns
    (name, "created" | "updated") for each."""
    if bool(webhook_url) == bool(block_name):
        raise UserError("automations install: give one of --webhook-url URL or --notify-block NAME")
    if webhook_url:
        block_id = webhook_block(webhook_url).save(WEBHOOK_BLOCK, overwrite=True)
        if not isinstance(block_id, UUID):  # called from an event loop, Prefect returns a coroutine
            raise TypeError("automations.install runs outside an event loop")
    else:
        block_id = saved_notification_block(block_name or "")
    return [(automation.name, _create_or_update(automation)) for automation in planned(block_id)]


def _create_or_update(automation: Automation) -> str:
    existing = _existing(automation.name)
    if existing is None:
        automation.create()
        return "created"
    automation.id = existing.id
    automation.update()
    return "updated"


def _existing(name: str) -> Automation | None:
    try:
        found = Automation.read(name=name)
    except ValueError:  # Prefect: "Automation with name ... not found"
        return None
    if not isinstance(found, Automation):  # called from an event loop, Prefect returns a coroutine
        raise TypeError("automations run outside an event loop")
    return found


def remove() -> list[str]:
    """Delete the automations `install` created (and its webhook block); returns the names deleted."""
    removed = []
    for name in NAMES:
        while (automation := _existing(name)) is not None and automation.delete():
            removed.append(name)
    try:
        CustomWebhookNotificationBlock.delete(WEBHOOK_BLOCK)
        removed.append(f"block {WEBHOOK_BLOCK}")
    except (ValueError, ObjectNotFound):
        pass
    return removed


__all__ = ["NAMES", "install", "planned", "remove", "saved_notification_block", "webhook_block"]

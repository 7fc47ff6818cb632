"""`RunSetUp`: what is done once per run before its first call, and recorded so nothing below does it again.

Whoever starts a run sets it up: its door (the `judgebench run` command and `evaluate()`, through
runtime/run.py's `judge_run`; an external judge's run, through `watched_run`) before the flow starts, or,
where there is no door (a deployment's worker process), the flow itself (flows/judgebench_flow.py). The
flow finds the door's set-up on the run's context (`judging.run_context.RunContext.setup`) and does only
what nobody did: the log redaction installed, the judge model's retirement notice said. A night says each
model's notice once for all its cells (`flows/nightly.retirements`), so its cells' set-ups start with it said.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from judgebench_flows.core.secrets import install_log_redaction

if TYPE_CHECKING:
    from judgebench_flows.core.config import RunConfig


@dataclasses.dataclass(eq=False)
class RunSetUp:
    """One run's set-up (see the module docstring): which of its steps are done."""

    redacting: bool = False
    retirement_said: bool = False

    def redact_logs(self) -> None:
        """The API key in use never reaches a log: the one place a run installs the log redaction
        (`secrets.install_log_redaction`, idempotent per process), once per run."""
        if not self.redacting:
            install_log_redaction()
            self.redacting = True

    def say_retirement(self, config: RunConfig, say: Callable[[str], None]) -> None:
        """The judge model's retirement notice (`RunConfig.retirement_notice`: its provider's shutdown date
        past or within 30 days), computed and handed to `say` once per run, if it has one: by the door
        (a line on stderr, a Python warning) or else by the flow (a warning in the run's log)."""
        if self.retirement_said:
            return
        self.retirement_said = True
        notice = config.retirement_notice()
        if notice:
            say(notice)


__all__ = ["RunSetUp"]

"""Keep the API key out of everything we write: logs, errors, results, the database, artifacts.

The key only ever lives in the environment and in the HTTP client. As a second line of defence every log
record in the process passes through a `Redaction`, whichever library or thread created it. Log records
are made process-wide (by any thread, in any library), so the secrets to remove are held by the one
object every record passes through anyway: the `Redaction` installed as logging's record factory by the
run's set-up (`install_log_redaction`, from `core.run_setup.RunSetUp.redact_logs`, or the first
`register_secret`). `redact` asks that same object, so messages we build ourselves are cleaned of exactly
what the logs are.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

MIN_SECRET_LENGTH = 6  # shorter values would redact ordinary words


class Redaction:
    """The secrets of this process, and the log record factory that removes them from every record."""

    def __init__(self, previous: Callable[..., logging.LogRecord]) -> None:
        self._previous = previous
        self.secrets: tuple[str, ...] = ()  # longest first: a secret inside another must not leave the rest showing

    def add(self, value: str | None) -> None:
        if value and len(value) >= MIN_SECRET_LENGTH and value not in self.secrets:
            self.secrets = tuple(sorted((*self.secrets, value), key=len, reverse=True))

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, "***")
        return text

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = self._previous(*args, **kwargs)
        if self.secrets:
            message = record.getMessage()
            cleaned = self.redact(message)
            if cleaned != message:
                record.msg, record.args = cleaned, None
        return record


def installed_redaction() -> Redaction:
    """The process's `Redaction`: logging's record factory when it is one, else a new one put in front of it."""
    factory = logging.getLogRecordFactory()
    if isinstance(factory, Redaction):
        return factory
    redaction = Redaction(factory)
    logging.setLogRecordFactory(redaction)
    return redaction


def register_secret(value: str | None) -> None:
    """Never show `value` again: in log records from now on, and in whatever `redact` cleans."""
    if value and len(value) >= MIN_SECRET_LENGTH:
        installed_redaction().add(value)


def redact(text: str) -> str:
    factory = logging.getLogRecordFactory()
    return factory.redact(text) if isinstance(factory, Redaction) else text


def install_log_redaction() -> None:
    """Redact registered secrets from every log record created from now on, in any logger."""
    installed_redaction().add(os.environ.get("OPENAI_API_KEY"))

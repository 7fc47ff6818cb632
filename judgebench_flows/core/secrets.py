"""Keep the API key out of everything we write: logs, errors, results, the database, artifacts.

The key only ever lives in the environment and in the HTTP client. As a second line of defence every log
record in the process passes through `redact`, whichever library created it.
"""

from __future__ import annotations

import logging
import os

_SECRETS: tuple[str, ...] = ()  # longest first: a secret inside another must not leave the rest showing
_installed = False


def register_secret(value: str | None) -> None:
    global _SECRETS
    if value and len(value) >= 6 and value not in _SECRETS:
        _SECRETS = tuple(sorted((*_SECRETS, value), key=len, reverse=True))


def redact(text: str) -> str:
    for secret in _SECRETS:
        if secret in text:
            text = text.replace(secret, "***")
    return text


def install_log_redaction() -> None:
    """Redact registered secrets from every log record created from now on, in any logger."""
    global _installed
    register_secret(os.environ.get("OPENAI_API_KEY"))
    if _installed:
        return
    _installed = True
    previous = logging.getLogRecordFactory()

    def factory(*args, **kwargs) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        if _SECRETS:
            message = record.getMessage()
            cleaned = redact(message)
            if cleaned != message:
                record.msg, record.args = cleaned, None
        return record

    logging.setLogRecordFactory(factory)

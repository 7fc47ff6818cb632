"""The run's credentials (core/credentials) and the process's redaction (core/secrets) are objects the run
holds, not module registries: a URL's password stays with the run's `Credentials` (a SecretStr, reached by
the threads and tasks of the run's context), and the `Redaction` installed as logging's record factory
cleans log records from any thread and whatever `redact` is given."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading

from judgebench_flows.core import credentials
from judgebench_flows.core.secrets import Redaction, installed_redaction, redact, register_secret

FULL = "postgresql+psycopg://judge:pw-Ctx-7f31a9@db.example.invalid:5432/judgebench"
PUBLIC = "postgresql+psycopg://judge@db.example.invalid:5432/judgebench"


def test_a_run_resolves_its_own_credentials_and_another_context_does_not(monkeypatch) -> None:
    monkeypatch.delenv("JUDGEBENCH_DB_URL", raising=False)

    def run() -> tuple[str, str, str]:
        public = credentials.stash(FULL)
        in_a_thread = asyncio.run(asyncio.to_thread(credentials.resolve, public))
        return public, credentials.resolve(public), in_a_thread

    public, resolved, in_a_thread = contextvars.Context().run(run)
    assert public == PUBLIC and resolved == FULL and in_a_thread == FULL
    assert contextvars.Context().run(credentials.resolve, PUBLIC) == PUBLIC  # another run: not its password
    assert "pw-Ctx-7f31a9" not in repr(contextvars.Context().run(lambda: vars(credentials.run_credentials())))


def test_the_credentials_hold_the_full_url_as_a_secret_str() -> None:
    held = credentials.Credentials()
    assert held.stash(FULL) == PUBLIC
    assert "pw-Ctx-7f31a9" not in repr(vars(held)) and "pw-Ctx-7f31a9" not in str(vars(held))
    assert held.full(PUBLIC) == FULL and held.full("sqlite:///x.db") is None


def test_the_stashed_password_is_redacted_from_log_records_of_any_thread(caplog) -> None:
    contextvars.Context().run(credentials.stash, FULL)
    assert isinstance(logging.getLogRecordFactory(), Redaction) and installed_redaction() is installed_redaction()
    logger = logging.getLogger("judgebench_flows.test_credentials")
    with caplog.at_level(logging.INFO, logger=logger.name):
        thread = threading.Thread(target=logger.info, args=("connecting to %s", FULL))
        thread.start()
        thread.join()
    assert [record.getMessage() for record in caplog.records] == ["connecting to ***"]
    assert redact(f"dsn {FULL}") == "dsn ***"


def test_short_values_are_not_secrets() -> None:
    register_secret("abc")
    assert redact("abcdef abc") == "abcdef abc"

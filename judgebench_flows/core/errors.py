"""The errors a run ends with on purpose, each carrying its meaning and the command's exit code.

Each class says what happened and knows its exit code (`exit_code`) and its one line (`line()`): the
command (cli/main.py `main`) maps any `KnownError` in one place, never by the order of `except` clauses,
and anything else is a bug (exit 3) and keeps its traceback. The codes are the README's contract (its
Exit codes table). Raise a `UserError` at the boundary where the bad input is first seen, naming the row
or option.
"""

from __future__ import annotations

from typing import ClassVar

# The command's exit codes (README, Exit codes): a contract with scripts, CI and schedulers.
EXIT_REGRESSION = 1  # a regression detected (`compare`)
EXIT_USER_ERROR = 2  # bad input or configuration
EXIT_BUG = 3  # an unexpected error: one line, its traceback with --verbose
EXIT_RUN_FAILED = 4  # the run measured too little
EXIT_SERVER = 5  # the Prefect server could not start or stopped during the run: the input was fine, run again
EXIT_BUDGET = 6  # the run spent its --max-cost and stopped; a larger budget resumes it
EXIT_BATCH_REFUSED = 7  # --batch: the provider refused a batch as a whole, for a reason not in our input
EXIT_NOT_WRITABLE = 8  # a path the run writes cannot be written (disk full, permission): the line names it
EXIT_ENDPOINT_UNREACHABLE = 9  # no call answered for --endpoint-lost-timeout, every attempt failed to connect


class KnownError(Exception):
    """A way a run ends that the command knows: shown as one line (`line()`), never with a traceback, and
    the process exits with `exit_code`."""

    exit_code: int = EXIT_USER_ERROR
    prefix: ClassVar[str] = "error"  # the line's first word: what kind of ending it was

    def line(self) -> str:
        """The one line the command ends with (before secrets are redacted from it)."""
        return f"{self.prefix}: {self}"


class UserError(KnownError):
    """Bad input or configuration: shown to the user as one line, never with a traceback. Exit code 2.

    The base of the run's other known endings too (a budget spent, a run that measured too little, ...):
    code that stops on bad input stops on those alike; each subclass says its own exit code."""


class FatalEndpointError(UserError):
    """The endpoint refused the run as a whole (bad key, unknown model): retrying cannot help."""


class BatchRefused(FatalEndpointError):
    """A provider refused a whole batch (`--batch`): exit 2 when the refusal is about our input (an unknown
    model, say), else exit 7: the provider's side, nothing the run could retry."""

    def __init__(self, message: str, our_input: bool = False):
        super().__init__(message)
        self.our_input = our_input
        self.exit_code = EXIT_USER_ERROR if our_input else EXIT_BATCH_REFUSED

    def __reduce__(self):  # Prefect and Dask pickle exceptions
        return (BatchRefused, (str(self), self.our_input))


class RunFailed(FatalEndpointError):
    """The run measured too little: its first calls were all rejected alike, or more of its judgments
    failed or were invalid than `--max-failed-fraction` allows. Exit code 4, not 0 (nothing to trust)
    and not 1 (that means a regression). `results` holds what was published, when it got that far."""

    exit_code = EXIT_RUN_FAILED
    prefix = "run failed"

    def __init__(self, message: str, results: dict | None = None):
        super().__init__(message)
        self.results = results

    def __reduce__(self):  # Prefect and Dask pickle exceptions; keep the message without the results
        return (RunFailed, (str(self),))


class InfrastructureLost(UserError):
    """What the run stands on went away and did not come back in time (the results database, the Prefect
    server): exit 5, one line; nothing received is lost, and the same command resumes."""

    exit_code = EXIT_SERVER

    def line(self) -> str:
        return f"{super().line()}; run the same command again to resume"


class PathNotWritable(UserError):
    """A path the run writes cannot be written (a full disk, no permission): exit 8, one line naming the
    path and its option; the answers received are kept."""

    exit_code = EXIT_NOT_WRITABLE

    def __init__(self, option: str, path: str, reason: str):
        super().__init__(f"{option}: cannot write to '{path}' ({reason})")
        self.option, self.path, self.reason = option, path, reason

    def __reduce__(self):  # Prefect and Dask pickle exceptions
        return (PathNotWritable, (self.option, self.path, self.reason))

    @property
    def remedy(self) -> str:
        """What lets the same command go on: room on a full disk; else a path it may create and write."""
        full = any(word in self.reason.lower() for word in ("no space", "full", "quota"))
        return "free space" if full else "make it writable or pass another path"

    @classmethod
    def of(cls, option: str, path: object, exc: OSError) -> PathNotWritable:
        """From the `OSError` a write raised (its reason as the system says it: "No space left on device")."""
        return cls(option, str(path), exc.strerror or str(exc))

    def line(self) -> str:
        return f"{super().line()}; answers received are kept: {self.remedy} and run the same command again"


class EndpointUnreachable(FatalEndpointError):
    """No call was answered for `--endpoint-lost-timeout` and every attempt failed to connect: exit 9; the
    calls never answered are sent by the same command, once the endpoint is back."""

    exit_code = EXIT_ENDPOINT_UNREACHABLE

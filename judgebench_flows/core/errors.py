"""One error type for everything a user can fix.

The CLI prints a `UserError` as a single line and exits non-zero; anything else is a bug and keeps its
traceback. Raise it at the boundary where the bad input is first seen, naming the row or option.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input or configuration: shown to the user as one line, never with a traceback."""


class FatalEndpointError(UserError):
    """The endpoint refused the run as a whole (bad key, unknown model): retrying cannot help."""


class BatchRefused(FatalEndpointError):
    """A provider refused a whole batch (`--batch`): exit 2 when the refusal is about our input (an unknown
    model, say), else exit 7: the provider's side, nothing the run could retry."""

    def __init__(self, message: str, our_input: bool = False):
        super().__init__(message)
        self.our_input = our_input

    def __reduce__(self):  # Prefect and Dask pickle exceptions
        return (BatchRefused, (str(self), self.our_input))


class RunFailed(FatalEndpointError):
    """The run measured too little: its first calls were all rejected alike, or more of its judgments
    failed or were invalid than `--max-failed-fraction` allows. Exit code 4, not 0 (nothing to trust)
    and not 1 (that means a regression). `results` holds what was published, when it got that far."""

    def __init__(self, message: str, results: dict | None = None):
        super().__init__(message)
        self.results = results

    def __reduce__(self):  # Prefect and Dask pickle exceptions; keep the message without the results
        return (RunFailed, (str(self),))


class InfrastructureLost(UserError):
    """What the run stands on went away and did not come back in time (the results database, the Prefect
    server): exit 5, one line; nothing received is lost, and the same command resumes."""


class PathNotWritable(UserError):
    """A path the run writes cannot be written (a full disk, no permission): exit 8, one line naming the
    path and its option; the answers received are kept."""

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


class EndpointUnreachable(FatalEndpointError):
    """No call was answered for `--endpoint-lost-timeout` and every attempt failed to connect: exit 9; the
    calls never answered are sent by the same command, once the endpoint is back."""

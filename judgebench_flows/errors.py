"""One error type for everything a user can fix.

The CLI prints a `UserError` as a single line and exits non-zero; anything else is a bug and keeps its
traceback. Raise it at the boundary where the bad input is first seen, naming the row or option.
"""


class UserError(Exception):
    """Bad input or configuration: shown to the user as one line, never with a traceback."""


class FatalEndpointError(UserError):
    """The endpoint refused the run as a whole (bad key, unknown model): retrying cannot help."""

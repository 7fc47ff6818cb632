"""Names that become file names, folder names and database values: checked once, where settings are built.

A model, judge or data file name travels far from where it was typed: into the run's folder and its
outputs' file names, the results database, Prefect's parameters and every line a command prints. A NUL
byte there is "embedded null byte" from the operating system only after the first calls are paid; a
control character (ESC, BEL, a newline) is a terminal escape in every listing. So the settings refuse
them when they are built (`RunConfig`, `EndpointSettings`, the nightly matrix), as one line naming the
option, before any call. A long name is accepted (a matrix's up to MAX_NAME_CHARS): the folders and files
it names are shortened with a hash of the whole name (data/outputs.short_name).
"""

from __future__ import annotations

import re

MAX_NAME_CHARS = 4096  # longer is no model, judge or file name: a document pasted into a matrix file
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def name_problem(value: str, limit: int | None = None) -> str | None:
    """Why `value` cannot be a name (a control character, with where it is; longer than `limit`), or None."""
    found = _CONTROL.search(value)
    if found is not None:
        char = ord(found.group())
        return (
            f"must not hold control characters (\\x{char:02x} at character {found.start() + 1}): they end up in "
            "file names, the results database and printed lines"
        )
    if limit is not None and len(value) > limit:
        return f"is {len(value):,} characters long; at most {limit:,}"
    return None


def checked_name(value: str | None, limit: int | None = None) -> str | None:
    """`value` as given, or ValueError saying why it cannot be a name (pydantic's validators raise it). A
    limit is for files whose errors never echo the value (the matrix): a command line's echoes it whole."""
    if value is not None and (problem := name_problem(value, limit)):
        raise ValueError(problem)
    return value


def checked_model_id(value: str | None) -> str | None:
    """A model id looked up in price tables and request rules (`--priced-model`): a name, and no path
    (`../../x`, `/etc/x`, `C:\\x`): an id is never a place in the filesystem."""
    checked_name(value)
    if value is not None:
        parts = re.split(r"[\\/]", value)
        if ".." in parts or value.startswith(("/", "\\", "~")) or re.match(r"[A-Za-z]:[\\/]", value):
            raise ValueError("must be a model id (gpt-4o-2024-08-06), not a path")
    return value


__all__ = ["MAX_NAME_CHARS", "checked_model_id", "checked_name", "name_problem"]

"""Messages on one line, never cut in the middle of a word.

A server's message, a failure's reason or an error line is printed and stored on one line. When one must be
bounded, it is cut at a word boundary with an ellipsis, and the line says where the whole text is (a
message cut mid-word, "... To drop )", reads like a different message).
"""

from __future__ import annotations

ELLIPSIS = "..."


def one_line(text: str) -> str:
    """`text` with every run of whitespace (newlines included) as one space."""
    return " ".join(text.split())


def shorten(text: str, limit: int, whole_in: str | None = None) -> str:
    """`text` on one line, at most `limit` characters before the ellipsis: cut after the last whole word
    that fits, then `...` and, when given, where the whole text is (`whole_in`). A single word longer
    than `limit` (a URL, say) is cut where it must be."""
    line = one_line(text)
    if len(line) <= limit:
        return line
    head = line[: limit + 1]
    cut = head.rsplit(" ", 1)[0] if " " in head else line[:limit]
    return cut.rstrip(" ,;:") + ELLIPSIS + (f" (whole text in {whole_in})" if whole_in else "")


def for_terminal(line: str) -> str:
    """A command's one-line message (an error, a notice) as a script or a log reads it: one line; on a
    terminal (stderr a TTY), wrapped at whole words to its width, so the terminal never cuts a word (or a
    path) in two."""
    import sys

    return wrapped(line) if sys.stderr.isatty() else line


def wrapped(text: str, width: int | None = None) -> str:
    """`text` wrapped at whole words to the terminal's width (`COLUMNS`, else the terminal, else 80), so a
    long notice is never cut by the terminal nor wider than it; words longer than a line stay whole."""
    import shutil
    import textwrap

    columns = width or shutil.get_terminal_size((80, 24)).columns
    return textwrap.fill(one_line(text), width=max(40, columns), break_long_words=False, break_on_hyphens=False)

"""Messages on one line, never cut in the middle of a word.

A server's message, a failure's reason or an error line is printed and stored on one line. When one must be
bounded, it is cut at a word boundary with an ellipsis, and the line says where the whole text is (a
message cut mid-word, "... To drop )", reads like a different message).
"""

from __future__ import annotations

import re

ELLIPSIS = "..."

# What a terminal would act on rather than show: C0 controls (ESC starts escape sequences: a clipboard
# write `ESC]52;c;...`, a clear screen `ESC[2J`; BEL rings; NUL hides), DEL, C1 controls (0x9b is CSI on
# terminals that read 8-bit controls), line and paragraph separators and the bidirectional overrides that
# make a name read as another.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: object, keep: str = "") -> str:
    """Untrusted text (a model or judge name from a cloned repository, a file name, a model's answer) as
    a terminal shows it without acting on it: every control character written out as an escape, `\\x1b`,
    `\\x00`, `\\n`, `\\u202e`, so what a person reads is what the text holds. Everything else is kept,
    and so are the characters in `keep` (`"\\n\\t"`: a multi-line answer in a page)."""
    return _UNSAFE.sub(lambda match: match.group() if match.group() in keep else _escaped(match.group()), str(text))


def page_text(value: object) -> object:
    """A value as an HTML page's template shows it (Jinja's `finalize`, before its autoescape): text with
    its control characters escaped as `printable` does but line breaks and tabs kept (an answer's ESC or BEL
    is not HTML markup, so autoescape alone keeps it raw); anything else as it is, markup the template
    made itself (a macro's output, which has `__html__`) included."""
    if not isinstance(value, str) or hasattr(value, "__html__"):
        return value
    return printable(value, keep="\n\r\t")


def _escaped(char: str) -> str:
    return _NAMED.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


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

    return wrapped(line) if sys.stderr.isatty() else printable(line)


def wrapped(text: str, width: int | None = None) -> str:
    """`text` wrapped at whole words to the terminal's width (`COLUMNS`, else the terminal, else 80), so a
    long notice is never cut by the terminal nor wider than it; words longer than a line stay whole.
    Control characters in it are shown escaped (`printable`): a message may quote a name or an answer."""
    import shutil
    import textwrap

    columns = width or shutil.get_terminal_size((80, 24)).columns
    return textwrap.fill(
        printable(one_line(text)), width=max(40, columns), break_long_words=False, break_on_hyphens=False
    )

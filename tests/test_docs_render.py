"""README.md and docs/*.md render as intended on GitHub: parsed as CommonMark (markdown-it-py, which rich
already brings), every code fence is closed where its author closed it, and every table is well-formed.

A missing opening fence turns half a page into one code block without any error; a table row with a cell
too many or too few renders as text. Both are found here, not by a reader.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE_LINE = re.compile(r"^ {0,3}(```|~~~)")


def fence_lines(text: str) -> list[int]:
    """Line numbers (0-based) of every fence marker in the source, opening or closing."""
    return [n for n, line in enumerate(text.splitlines()) if FENCE_LINE.match(line)]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_fences_open_and_close_where_written(document: Path) -> None:
    """Each fenced block CommonMark finds spans exactly one opening and one closing fence line of the
    source, with no fence line left over: a missing opener or closer pairs the wrong lines."""
    text = document.read_text(encoding="utf-8")
    tokens = MarkdownIt("commonmark").parse(text)
    spans = [token.map for token in tokens if token.type == "fence" and token.map]
    markers = fence_lines(text)
    covered = sorted(line for start, end in spans for line in (start, end - 1))
    assert covered == markers, (
        f"{document.name}: fence lines {[m + 1 for m in markers]} pair as blocks {[(s + 1, e) for s, e in spans]}"
    )


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_tables_are_well_formed(document: Path) -> None:
    """Every run of `|` lines outside code blocks renders as a table (GFM tables), with the same number of
    cells in each row as in its header."""
    text = document.read_text(encoding="utf-8")
    parser = MarkdownIt("commonmark").enable("table")
    tokens = parser.parse(text)
    code = {n for token in tokens if token.type in ("fence", "code_block") and token.map for n in range(*token.map)}
    tables = [token.map for token in tokens if token.type == "table_open" and token.map]
    in_table = {n for start, end in tables for n in range(start, end)}
    lines = text.splitlines()
    stray = [n + 1 for n, line in enumerate(lines) if line.startswith("|") and n not in code and n not in in_table]
    assert not stray, f"{document.name}: lines {stray} look like table rows but do not render as a table"
    for start, end in tables:
        widths = {len(_cells(lines[n])) for n in range(start, end) if lines[n].strip()}
        assert len(widths) == 1, f"{document.name}:{start + 1}: table rows with {sorted(widths)} cells"


def _cells(row: str) -> list[str]:
    inner = row.strip().strip("|")
    return re.split(r"(?<!\\)\|", inner)


def test_the_readme_stays_a_guide() -> None:
    """The README is read top to bottom by a new user: under 300 lines, details in docs/ (issue 45)."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < 300, f"README.md has {len(lines)} lines: move details to docs/ and link them"

"""YAML read with limits: every YAML file the package reads (the nightly matrix, price tables, external
judge configs) goes through `load`, so a hostile or careless file is one line naming its line, never a
process that eats the machine.

PyYAML's `safe_load` refuses Python objects but not size: nine nested anchors of nine aliases each (an
"alias bomb", under a kilobyte) expand to 387 million values once anything walks them (pydantic, JSON,
Prefect's parameters), and a deep `[[[[...` ends in a RecursionError. Here, while the document is
composed, before anything is built from it:

- the file is at most MAX_BYTES (read with `read_limited`, which also refuses FIFOs and devices);
- nesting is at most MAX_DEPTH levels;
- the document, its aliases expanded, holds at most MAX_VALUES values, and an alias inside its own
  anchor (a recursive value) is refused;
- a key given twice in one mapping is refused with both lines (PyYAML keeps the last without a word);
- `[a,b]` in a flow list, two plain words joined by a comma without a space, is refused: YAML reads two
  items where a person often meant one value (`[dataset=judgebench,response_model=gpt-4o.jsonl]`).
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import yaml

from judgebench_flows.core.errors import UserError

MAX_BYTES = 1_000_000  # the shipped matrix is 6 kB, the bundled price table 10 kB
MAX_DEPTH = 40
MAX_VALUES = 100_000  # scalars, lists and mappings, each alias counted as the values it stands for
_STR = "tag:yaml.org,2002:str"
_MERGE = "tag:yaml.org,2002:merge"


class NotReadable(Exception):
    """Why a file could not be read (its callers word the line: `cannot read the matrix file X: why`)."""


def read_limited(path: str | Path) -> str:
    """A local file's text, refused (NotReadable) when it is not a regular file (a FIFO or /dev/zero
    would block or never end), larger than MAX_BYTES, or not UTF-8."""
    target = Path(path).expanduser()
    try:
        mode = target.stat().st_mode
        if not stat.S_ISREG(mode):
            raise NotReadable(f"not a regular file ({file_kind(mode)})")
        with target.open("rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise NotReadable(exc.strerror or str(exc)) from None
    if len(data) > MAX_BYTES:
        raise NotReadable(f"larger than {MAX_BYTES:,} bytes, the most a YAML file here may have")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotReadable(f"not UTF-8 text (byte {exc.start})") from None


def regular_file_problem(path: str | Path) -> str | None:
    """Why `path` is not a file to read (`file not found`, `not a regular file (a FIFO)`: a FIFO would
    block, /dev/zero never end), or None."""
    try:
        mode = Path(path).expanduser().stat().st_mode
    except FileNotFoundError:
        return "file not found"
    except OSError as exc:
        return f"cannot read it: {exc.strerror or exc}"
    return None if stat.S_ISREG(mode) else f"not a regular file ({file_kind(mode)})"


def file_kind(mode: int) -> str:
    """What a path that is not a regular file is, in words: `a directory`, `a FIFO`, `a character device`."""
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((word for test, word in kinds if test(mode)), "not a file")


class _Refused(yaml.YAMLError):
    """A limit or an ambiguity, at a line of the document."""

    def __init__(self, mark: yaml.Mark | None, problem: str) -> None:
        super().__init__(problem)
        self.mark, self.problem = mark, problem


class _LimitedLoader(yaml.SafeLoader):
    """SafeLoader that counts while it composes (aliases expanded, depth) and checks each mapping and flow
    list once composed; nothing is constructed from a document that breaks a limit."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._values = 0
        self._sizes: dict[int, int] = {}  # composed node -> the values it stands for, itself included

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            target = self.anchors.get(event.anchor)  # an unknown anchor: PyYAML's own error below
            if target is not None:
                size = self._sizes.get(id(target))
                if size is None:  # its anchor is still being composed: a value that contains itself
                    raise _Refused(event.start_mark, f"the alias *{event.anchor} is inside its own anchor")
                self._count(size, event.start_mark)
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _Refused(event.start_mark, f"nested deeper than {MAX_DEPTH} levels")
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        self._sizes[id(node)] = 1 + sum(self._sizes.get(id(child), 1) for child in _children(node))
        self._count(1, event.start_mark)
        return node

    def _count(self, values: int, mark: yaml.Mark) -> None:
        self._values += values
        if self._values > MAX_VALUES:
            raise _Refused(
                mark,
                f"the document expands to more than {MAX_VALUES:,} values (aliases counted as what they repeat):"
                " an alias bomb? write the values out or use fewer aliases",
            )

    def compose_mapping_node(self, anchor: str | None) -> yaml.MappingNode:
        node = super().compose_mapping_node(anchor)
        seen: dict[tuple[str, str], yaml.Mark] = {}
        for key, _value in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.tag == _MERGE:
                continue
            first = seen.setdefault((key.tag, key.value), key.start_mark)
            if first is not key.start_mark:
                raise _Refused(key.start_mark, f"key '{key.value}' given twice (first on line {first.line + 1})")
        return node

    def compose_sequence_node(self, anchor: str | None) -> yaml.SequenceNode:
        node = super().compose_sequence_node(anchor)
        if node.flow_style:
            _no_comma_split(node.value)
        return node


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _plain_word(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.style is None and node.tag == _STR


def _no_comma_split(items: list[yaml.Node]) -> None:
    """`[a,b]`: two plain strings with only a comma between them were most likely one value."""
    for first, second in zip(items, items[1:], strict=False):
        if _plain_word(first) and _plain_word(second) and second.start_mark.index == first.end_mark.index + 1:
            joined = f"{first.value},{second.value}"
            raise _Refused(
                first.start_mark,
                f"'{_short(joined)}' in a [ ] list is read as separate items split at the comma "
                f"('{_short(first.value)}' and '{_short(second.value)}'): quote it ('{_short(joined)}') if it "
                "is one value, or put a space after the comma if they are several",
            )


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def syntax_error(where: str, exc: yaml.YAMLError, kind: str = "YAML") -> UserError:
    """`where, line L, column C: not valid YAML: <what PyYAML says>`."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).strip().splitlines()[0]
    at = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return UserError(f"{where}{at}: not valid {kind}: {problem}")


def load(text: str, where: str, kind: str = "YAML") -> Any:
    """`text` parsed as YAML within the limits above; anything wrong is one UserError line,
    `where, line L[, column C]: ...`."""
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > MAX_BYTES:
        raise UserError(f"{where}: {size:,} bytes, more than the {MAX_BYTES:,} a {kind} file here may have")
    loader = _LimitedLoader(text)
    try:
        return loader.get_single_data()
    except _Refused as exc:
        at = f", line {exc.mark.line + 1}" if exc.mark is not None else ""
        raise UserError(f"{where}{at}: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise syntax_error(where, exc, kind) from None
    except RecursionError:  # a limit above should come first; never a traceback
        raise UserError(f"{where}: nested too deeply") from None
    finally:
        loader.dispose()


def compose(text: str) -> yaml.Node | None:
    """The document's node tree (for the line of a key path), None when it breaks a limit or is not YAML."""
    if len(text) > MAX_BYTES:
        return None
    loader = _LimitedLoader(text)
    try:
        return loader.get_single_node()
    except (yaml.YAMLError, RecursionError):
        return None
    finally:
        loader.dispose()


__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_VALUES",
    "NotReadable",
    "compose",
    "file_kind",
    "load",
    "read_limited",
    "regular_file_problem",
    "syntax_error",
]

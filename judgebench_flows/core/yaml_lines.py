"""Where in a YAML file a problem is: its line, for the one-line errors of matrix and price files.

A file a person wrote is fixed in an editor: "matrix.yaml, line 12: models.1.base_url: ..." takes them
there. Syntax errors carry PyYAML's own mark; a problem found when the parsed document is validated
names a key path (`models.1.base_url`), whose line the document's node tree knows.
"""

from __future__ import annotations

import re

import yaml

from judgebench_flows.core.errors import UserError
from judgebench_flows.core.safe_yaml import compose, syntax_error

_KEY_PATH = re.compile(r"([A-Za-z0-9_.\-]+): ")


def key_line(text: str, dotted: str) -> int | None:
    """The 1-based line of the key path `a.b.0.c` in the YAML `text` (the deepest part found)."""
    node = compose(text)  # within the loader's limits: the text was read with them
    line = None
    for part in dotted.split("."):
        if isinstance(node, yaml.MappingNode):
            found = next(((k, v) for k, v in node.value if getattr(k, "value", None) == part), None)
            if found is None:
                break
            line, node = found[0].start_mark.line + 1, found[1]
        elif isinstance(node, yaml.SequenceNode) and part.isdigit() and int(part) < len(node.value):
            node = node.value[int(part)]
            line = node.start_mark.line + 1
        else:
            break
    return line


def with_line(error: UserError, where: str, text: str) -> UserError:
    """`where: key.path: message` as `where, line L: key.path: message` when the key path is in `text`."""
    message = str(error)
    if not message.startswith(f"{where}: "):
        return error
    rest = message[len(where) + 2 :]
    match = _KEY_PATH.match(rest)
    line = key_line(text, match.group(1)) if match else None
    return UserError(f"{where}, line {line}: {rest}") if line else error


__all__ = ["key_line", "syntax_error", "with_line"]

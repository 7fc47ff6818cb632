"""Import a user's Python file (a custom or external judge) as a module of its own.

The module gets a name derived from the file's absolute path and is registered in sys.modules, so
dataclasses and pickling inside the file work and two files with the same name never mix. Errors are
returned to the caller as one line (`Type: message`) to put in its own UserError.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


class ImportFailed(Exception):
    """The file could not be imported; str(exc) is `Type: message` on one line."""


def one_line(exc: BaseException) -> str:
    """`Type: message` on one line: a user's exception text may span lines, and a UserError is one line."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def import_file(path: Path, namespace: str) -> ModuleType:
    resolved = path.resolve()
    name = f"{namespace}_{hashlib.sha256(str(resolved).encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise ImportFailed("not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the user's file: whatever it raised is theirs to fix
        sys.modules.pop(name, None)
        raise ImportFailed(one_line(exc)) from None
    return module

"""Load a user's judge class (`path.py:Class` or `module:Class`) and hold it to the judge contract.

A custom judge is any class with `format(question, answer_A, answer_B) -> messages` and
`parse(text) -> decision`. Its output is checked on every call: a wrong message shape or a decision outside
A>B / B>A / A=B / "" stops the run with one clear line, because a silently wrong decision would corrupt
every number downstream. `parse` raising on one odd answer only makes that judgment invalid.

The contract (docs/judges.md), the plug-in point for a judge of one's own:

    format(question, answer_A, answer_B):
        Args:
            question: The pair's question.
            answer_A, answer_B: The two responses, in the order this judgment shows them (each pair is
                judged in both orders).
        Returns:
            The chat messages to send: a list of {"role": ..., "content": ...}.

    parse(text):
        Args:
            text: The model's answer (a `<think>` scratchpad already removed).
        Returns:
            "A>B", "B>A", "A=B", or "" when the answer gives no verdict (counted invalid, never a decision).

    sampling (optional class attribute): the request's sampling, e.g. {"temperature": 0.0, "max_tokens": 1024}.

Examples:
    A judge in `my_judge.py`, run with `judgebench run --judge-template my_judge.py:Short` or
    `judgebench_flows.evaluate(judge=Short, ...)`::

        class Short:
            sampling = {"temperature": 0.0, "max_tokens": 16}

            def format(self, question, answer_A, answer_B):
                return [{"role": "user", "content": f"{question}\n[A] {answer_A}\n[B] {answer_B}\nAnswer [[A]] or [[B]]."}]

            def parse(self, text):
                return {"[[A]]": "A>B", "[[B]]": "B>A"}.get(text.strip(), "")
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
from pathlib import Path
from types import CodeType

from judgebench_flows.core.errors import UserError
from judgebench_flows.core.records import DECISIONS
from judgebench_flows.judges.files import ImportFailed, import_file, one_line
from judgebench_flows.judges.procedure import ParseFailed, PromptProcedure, Sampling


def _load_module(spec: str):
    target = spec.rsplit(":", 1)[0]
    if target.endswith(".py") or "/" in target or Path(target).is_file():
        path = Path(target)
        if not path.is_file():
            raise UserError(f"--judge-template: file not found: {path}")
        if path.parent.resolve() not in path.resolve().parents:  # e.g. a checkout's file linking to ~/.ssh
            raise UserError(f"--judge-template: {path} links to a file outside its directory: refused")
        try:
            module = import_file(path, "judgebench_custom_judge")
        except ImportFailed as exc:
            raise UserError(f"--judge-template: importing {path} failed: {exc}") from None
        return module, path
    try:
        module = importlib.import_module(target)
    except Exception as exc:
        raise UserError(f"--judge-template: cannot import module '{target}': {one_line(exc)}") from None
    return module, Path(getattr(module, "__file__", None) or target)


def _source_of(cls: type, path: Path) -> str:
    """The whole source file(s) behind the judge, not just the class: a module-level prompt or helper that
    format()/parse() use must change the fingerprint too, or cached shard results would outlive an edit."""
    files = {path.resolve()} if path.is_file() else set()
    try:
        files.add(Path(inspect.getfile(cls)).resolve())
    except (OSError, TypeError):
        pass
    source = "\0".join(f.read_text(encoding="utf-8", errors="replace") for f in sorted(files) if f.is_file())
    return source or _compiled(cls)


def _compiled(cls: type) -> str:
    """A class without a source file (defined in a notebook cell, `judgebench_flows.evaluate`): its methods'
    compiled code and its plain attributes stand in for the source, so an edited cell still changes the
    fingerprint."""
    parts = []
    for name, value in sorted(vars(cls).items()):
        code = getattr(getattr(value, "__func__", value), "__code__", None)
        if code is not None:
            parts.append(f"{name}:{_code_text(code)}")
        elif not name.startswith("__"):
            parts.append(f"{name}={value!r}")
    return "\n".join(parts)


def _code_text(code: CodeType) -> str:
    consts = [_code_text(c) if isinstance(c, CodeType) else repr(c) for c in code.co_consts]
    return f"{code.co_code.hex()}|{consts}|{code.co_names}"


class CustomJudge(PromptProcedure):
    """Wraps a user's judge object so every result it gives is checked before it is used; the user's
    `format`/`parse` class becomes a `Judge` through the same prompt procedure as the built-in judges."""

    def __init__(self, spec: str):
        if ":" not in spec:
            raise UserError(f"--judge-template must be 'path.py:Class' or 'module:Class', got '{spec}'")
        module, path = _load_module(spec)
        class_name = spec.rsplit(":", 1)[1]
        cls = getattr(module, class_name, None)
        if cls is None:
            available = sorted(
                n for n, v in vars(module).items() if inspect.isclass(v) and v.__module__ == module.__name__
            )
            raise UserError(
                f"--judge-template: class '{class_name}' not found in {path} (available: {', '.join(available) or 'none'})"
            )
        for method in ("format", "parse"):
            if not callable(getattr(cls, method, None)):
                raise UserError(
                    f"--judge-template: {class_name} has no {method}() method; a judge needs format() and parse()"
                )
        try:
            self._judge = cls()
        except Exception as exc:
            raise UserError(f"--judge-template: creating {class_name}() failed: {one_line(exc)}") from None
        self.name = f"custom:{class_name}"
        self.spec = spec
        self.sampling: Sampling = dict(getattr(self._judge, "sampling", None) or {"temperature": 0.0})
        self.follow_up = None
        self._source = _source_of(cls, path) or spec

    def format(self, question: str, answer_A: str, answer_B: str) -> list[dict[str, str]]:
        messages = self._judge.format(question, answer_A, answer_B)
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        ok = (
            isinstance(messages, list)
            and messages
            and all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in messages
            )
        )
        if not ok:
            raise UserError(
                f"{self.name}.format() must return a list of {{'role': ..., 'content': ...}} messages, got {type(messages).__name__}"
            )
        return messages

    def parse(self, text: str) -> str:
        try:
            decision = self._judge.parse(text)
        except Exception as exc:
            raise ParseFailed(f"{self.name}.parse raised {one_line(exc)}") from None
        if decision is None:
            return ""
        if decision not in DECISIONS:
            raise UserError(
                f"{self.name}.parse returned {decision!r}; a decision must be one of 'A>B', 'B>A', 'A=B' or ''"
            )
        return decision

    def wants_follow_up(self, text: str) -> bool:
        return False

    def fingerprint(self) -> str:
        return "|".join(
            [self.name, hashlib.sha256(self._source.encode()).hexdigest(), repr(sorted(self.sampling.items()))]
        )

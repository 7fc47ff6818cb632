"""Render judge prompts the way JudgeBench does, from the checkout's own template files.

JudgeBench renders with `trim_blocks` and `lstrip_blocks` and no HTML escaping, so `<`, `&` and quotes in
questions and answers reach the model unchanged. We do the same, in Jinja2's sandbox: template files come
from a cloned repository, and a template must not be able to reach Python internals.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from judgebench_flows.core.errors import UserError


def _environment(loader: jinja2.BaseLoader) -> ImmutableSandboxedEnvironment:
    return ImmutableSandboxedEnvironment(
        loader=loader,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
        keep_trailing_newline=False,
        undefined=jinja2.StrictUndefined,
    )


class _ContainedLoader(jinja2.FileSystemLoader):
    """Template files of one directory, refusing any whose real path is outside it.

    A cloned checkout is someone else's files: a template that is a symlink to `/etc/passwd` (or any
    local file) would otherwise be rendered into every prompt and sent to the endpoint. Data files of a
    checkout are held to the same rule (`dataset.data_file_in`).
    """

    def get_source(self, environment: jinja2.Environment, template: str) -> tuple[str, str, Callable[[], bool]]:
        source, filename, uptodate = super().get_source(environment, template)
        root = Path(self.searchpath[0]).resolve()
        if filename is None or root not in Path(filename).resolve().parents:
            raise UserError(
                f"prompt template '{template}' in {self.searchpath[0]} links to a file outside that directory: refused"
            )
        return source, filename, uptodate


class TemplateSet:
    """Judge prompt templates from one directory (a checkout's utils/templates), with our fallbacks.

    Templates missing from `directory` fall back to the package's own `templates/` (our own wording), so a
    dataset that ships no prompts can still be judged. `digest()` hashes exactly what was used, which is
    part of every cache key: an edited template must never be served from an old cache.
    """

    def __init__(self, directory: str | Path | None = None):
        self.directory = Path(directory) if directory else None
        loaders: list[jinja2.BaseLoader] = []
        if self.directory is not None:
            loaders.append(_ContainedLoader(str(self.directory)))
        loaders.append(jinja2.FileSystemLoader(str(resources.files("judgebench_flows.templates") / "prompts")))
        self._env = _environment(jinja2.ChoiceLoader(loaders))
        self._sources: dict[str, str] = {}
        self._compiled: dict[str, jinja2.Template] = {}
        self._static: dict[str, str] = {}

    def source(self, name: str) -> str:
        """The raw text of template `name` (without .jinja2)."""
        if name not in self._sources:
            try:
                source, _, _ = self._env.loader.get_source(self._env, name + ".jinja2")  # type: ignore[union-attr]
            except jinja2.TemplateNotFound:
                where = self.directory or "the package templates"
                raise UserError(f"prompt template '{name}.jinja2' not found in {where}") from None
            self._sources[name] = source
        return self._sources[name]

    def _template(self, name: str) -> jinja2.Template:
        if name in self._compiled:
            return self._compiled[name]
        try:
            self._compiled[name] = self._env.from_string(self.source(name))
            return self._compiled[name]
        except jinja2.TemplateSyntaxError as exc:
            raise UserError(
                f"prompt template '{name}.jinja2' has a syntax error at line {exc.lineno}: {exc.message}"
            ) from None

    def render(self, name: str, **variables: object) -> str:
        if not variables:  # a template without inputs (a system prompt) renders the same every time
            if name not in self._static:
                self._static[name] = self._render(name)
            return self._static[name]
        return self._render(name, **variables)

    def _render(self, name: str, **variables: object) -> str:
        try:
            return self._template(name).render(**variables)
        except jinja2.UndefinedError as exc:
            raise UserError(f"prompt template '{name}.jinja2' uses an undefined variable: {exc.message}") from None
        except jinja2.exceptions.SecurityError as exc:
            raise UserError(f"prompt template '{name}.jinja2' tried an unsafe operation: {exc}") from None
        except (
            Exception
        ) as exc:  # the template is the checkout's code: the sandbox's range guard, 1/0, a missing include...
            raise UserError(f"prompt template '{name}.jinja2' failed to render: {type(exc).__name__}: {exc}") from None

    def digest(self, names: list[str]) -> str:
        """sha256 over the named templates' sources: changes whenever a prompt the judge uses changes."""
        h = hashlib.sha256()
        for name in sorted(names):
            h.update(name.encode())
            h.update(b"\0")
            h.update(self.source(name).encode())
            h.update(b"\0")
        return h.hexdigest()

    def check(self, names: list[str]) -> None:
        """Compile every named template now, so a broken one fails before any call is paid for."""
        for name in names:
            self._template(name)

"""Command-line options derived from the settings models: an option is written once, as a model field.

Every field of a model (a nested model's fields given flat, as `RunConfig.endpoint`'s are) becomes
`--kebab-name`, plus `--snake_name` and the field's drop-in `aliases` (`json_schema_extra`), with the
field's `description` as help and its default stated there. Values are passed to the model as given
(strings) and validated by it, so an error is the model's, as one line naming the option (exit 2).
Only the shape of a value is decided here: a bool is a flag (`--no-x` when it defaults to on, `--x/--no-x`
when unset means "decide for me"), a list is comma-separated, a dict is JSON.

argparse, not a CLI library: measured with `python -X importtime` beside the settings models on this
machine, pydantic-settings' CLI added 50-190 ms to each command's start and cyclopts 220-280 ms,
argparse 4 ms (docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import sys
import types
import typing
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from typing_extensions import TypedDict

if TYPE_CHECKING:
    from pydantic import JsonValue


class OneLineParser(argparse.ArgumentParser):
    """No prefix matching of options (`--conc` is not `--concurrency`), and a mistake is one line, exit 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", FittingHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        from judgebench_flows.core.text import for_terminal

        sys.stderr.write(for_terminal(f"error: {self.prog.split()[-1]}: {message}") + "\n")
        sys.exit(2)


class FittingHelpFormatter(argparse.HelpFormatter):
    """--help within the terminal: an option's spellings (`--max-samples`, `--max_samples`, ...) name its
    value once, and are wrapped after a comma when they are wider than the terminal; help text is wrapped
    at spaces only, so a file name (`gpt-4o-2024-05-13.jsonl`) is never cut at its hyphens."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 20, width: int | None = None):
        # Help text from column 20, not argparse's 24: a data file's name (58 characters) fits 80 columns.
        super().__init__(prog, indent_increment, max_help_position, width)

    def _split_lines(self, text: str, width: int) -> list[str]:
        import textwrap

        return textwrap.wrap(" ".join(text.split()), width, break_long_words=False, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap

        return textwrap.fill(
            " ".join(text.split()),
            width,
            initial_indent=indent,
            subsequent_indent=indent,
            break_long_words=False,
            break_on_hyphens=False,
        )

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not action.option_strings:
            return super()._format_action_invocation(action)
        names = ", ".join(action.option_strings)
        if action.nargs != 0:
            names += " " + self._format_args(action, self._get_default_metavar_for_optional(action))
        width = max(self._width - self._current_indent, 20)
        if len(names) <= width:
            return names
        lines, line = [], ""
        for part in names.split(", "):
            candidate = f"{line}, {part}" if line else part
            if line and len(candidate) + 1 > width:
                lines.append(line + ",")
                line = part
            else:
                line = candidate
        indent = " " * (self._current_indent + 2)
        return ("\n" + indent).join([*lines, line])


def add_command(sub: argparse._SubParsersAction, name: str, text: str) -> argparse.ArgumentParser:
    """A sub-command whose one-line help is also its --help description; options are never matched by prefix
    (`--judge-typ` is an error, not --judge-type)."""
    return sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".", allow_abbrev=False)


def add_format_option(parser: argparse.ArgumentParser) -> None:
    """`--format` of the listing commands: a table for people, JSON or CSV for scripts."""
    parser.add_argument(
        "--format",
        choices=("table", "json", "csv"),
        default="table",
        help="table (default: fits the terminal), or json/csv on standard output for scripts",
    )


def _plain(annotation: Any) -> Any:
    """`X | None` -> X."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _nested_model(field: FieldInfo) -> type[BaseModel] | None:
    annotation = _plain(field.annotation)
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def model_fields(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """The model's fields by flat option name: a nested settings model's fields stand in for it."""
    flat: dict[str, FieldInfo] = {}
    for name, field in model.model_fields.items():
        nested = _nested_model(field)
        flat.update(model_fields(nested) if nested is not None else {name: field})
    return flat


def _comma_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _json_object(text: str) -> dict[str, JsonValue]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def _help(field: FieldInfo) -> str | None:
    text = field.description
    if field.is_required():
        return f"{text} (required)" if text else text
    default = field.get_default(call_default_factory=True)
    if text and "(default" not in text and default not in (None, "", [], {}) and not isinstance(default, bool):
        text += f" (default {default})"
    if text and default is True:
        text = f"turn off (on by default): {text}"
    return text


class ArgumentOptions(TypedDict, total=False):
    """What `_add` passes to argparse's `add_argument` for one field."""

    dest: str
    default: None
    help: str | None
    action: str | type[argparse.Action]
    choices: list[str]
    type: Callable[[str], object]
    metavar: str


def _add(group: Any, name: str, field: FieldInfo) -> None:
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    aliases, shortcuts = extra.get("aliases"), extra.get("shortcuts")
    flags = [
        f"--{name.replace('_', '-')}",
        *([f"--{name}"] if "_" in name else []),
        *(str(alias) for alias in (aliases if isinstance(aliases, list) else [])),
    ]
    kwargs: ArgumentOptions = {"dest": name, "default": None, "help": _help(field)}
    annotation = _plain(field.annotation)
    origin = typing.get_origin(annotation)
    if annotation is bool:
        default = field.get_default()
        if default is None:
            flags = [flag for flag in flags if "_" not in flag]  # argparse adds --no- to each spelling
            kwargs["action"] = argparse.BooleanOptionalAction
        elif default is True:
            flags = [f"--no-{name.replace('_', '-')}"]
            kwargs["action"] = "store_false"
        else:
            kwargs["action"] = "store_true"
    elif origin is Literal:
        kwargs["choices"] = [str(choice) for choice in typing.get_args(annotation)]
    elif origin is list:
        kwargs["type"], kwargs["metavar"] = _comma_list, "A,B,..."
    elif origin is dict:
        kwargs["type"], kwargs["metavar"] = _json_object, "JSON"
    group.add_argument(*flags, **kwargs)
    for flag, value in (shortcuts if isinstance(shortcuts, dict) else {}).items():  # e.g. --no-cache for --cache off
        group.add_argument(flag, dest=name, action="store_const", const=value, help=f"--{name} {value}")


def add_model_options(
    parser: argparse.ArgumentParser, model: type[BaseModel], skip: Iterable[str] = (), only: Iterable[str] | None = None
) -> None:
    """One option per field of `model` (see the module docstring); `skip`: fields the command sets itself,
    `only`: the fields a command takes from a larger model."""
    skipped, wanted = set(skip), None if only is None else set(only)
    for name, field in model_fields(model).items():
        if name not in skipped and (wanted is None or name in wanted):
            _add(parser, name, field)


def given_options(args: argparse.Namespace, model: type[BaseModel]) -> dict[str, Any]:
    """The model's options the user gave (left-out ones are None in `args`: the model's defaults apply)."""
    return {name: getattr(args, name) for name in model_fields(model) if getattr(args, name, None) is not None}


__all__ = ["OneLineParser", "add_model_options", "given_options", "model_fields"]

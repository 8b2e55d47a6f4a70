"""Wrong input said in one line: which file, which line or field, what is wrong.

A scenario that does not validate would otherwise print pydantic's multi-line dump (a
header, then two lines per error with a documentation URL), and a YAML syntax error names
``<unicode string>`` instead of the file. The CLI prints :func:`one_line` of any error in
:data:`USER_ERRORS` after ``greenserve <command>:`` and exits with status 2.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pydantic
import yaml

from greenserve.argtypes import UsageError

__all__ = ["USER_ERRORS", "BadFileError", "one_line", "reading"]

USER_ERRORS: tuple[type[BaseException], ...] = (
    FileNotFoundError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
    yaml.YAMLError,
    pydantic.ValidationError,
    UsageError,
)
"""Errors in what the user asked for (missing files, unknown traces, a scenario that does
not parse or validate): one line on stderr and exit status 2; ``-v`` shows the traceback."""

_SHOWN_INPUT_CHARS = 40
"""A wrong value longer than this is left out of the message rather than cut."""


class BadFileError(UsageError):
    """A file the user named does not parse or does not validate."""

    def __init__(self, path: Path, reason: str) -> None:
        self.path = path
        self.reason = reason
        # Some loaders name the file themselves ("x.csv is not an Azure-format trace").
        super().__init__(reason if str(path) in reason else f"{path}: {reason}")


@contextlib.contextmanager
def reading(path: Path) -> Iterator[None]:
    """Turn an error raised inside while a loader reads ``path`` into a :class:`BadFileError`
    naming it (the loaders see text, not the file, so their errors cannot say which).

    Caught: YAML errors, validation errors and any ``ValueError``, which is how pandas says
    that a CSV is empty, has a timestamp it cannot parse or bytes that are not text, and
    ``TypeError``, which it raises comparing a column of words with numbers (``-v`` shows
    where, should one come from a bug rather than the file).

    Raises:
        BadFileError: the file is not YAML, does not validate or does not parse.
    """
    try:
        yield
    except BadFileError:
        raise
    except (yaml.YAMLError, ValueError, TypeError) as exc:  # ValidationError is a ValueError
        raise BadFileError(path, _reason(exc)) from exc


def one_line(exc: BaseException) -> str:
    """What is wrong, on one line: the line and column of a YAML error, the field path and
    message of the first validation error (and how many more there are).

    A validation error that no :func:`reading` named a file for says which model failed
    ("invalid Scenario: ..."), the nearest thing to a file name it carries.
    """
    if isinstance(exc, pydantic.ValidationError):
        return f"invalid {exc.title}: {_reason(exc)}"
    return _reason(exc)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, pydantic.ValidationError):
        return _validation_line(exc)
    if isinstance(exc, yaml.MarkedYAMLError):
        return _yaml_line(exc)
    return " ".join(str(exc).split())


def _validation_line(exc: pydantic.ValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return " ".join(str(exc).split())
    first = errors[0]
    text = f"{_field_path(first['loc'])}: {first['msg']}"
    value = first.get("input")
    if isinstance(value, str | int | float | bool) and len(repr(value)) <= _SHOWN_INPUT_CHARS:
        text += f" (got {value!r})"
    if len(errors) > 1:
        others = ", ".join(_field_path(e["loc"]) for e in errors[1:4])
        more = "…" if len(errors) > 4 else ""
        text += f"; {len(errors) - 1} more error(s): {others}{more}"
    return text


def _field_path(loc: tuple[int | str, ...]) -> str:
    """``("regions", 0, "gpus")`` as ``regions[0].gpus``; the document itself as ``(top)``."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "(top)"


def _yaml_line(exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    text = f"{where}YAML syntax error: {exc.problem or exc.context or 'not YAML'}"
    if exc.problem and exc.context:
        since = f" from line {exc.context_mark.line + 1}" if exc.context_mark else ""
        text += f" ({exc.context}{since})"
    return " ".join(text.split())

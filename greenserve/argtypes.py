"""argparse ``type=`` converters for numbers a command cannot use when zero or negative.

argparse turns the ``ArgumentTypeError`` they raise into a usage error naming the option
(exit status 2), where a bare ``float()`` deep in a command would end in a traceback or, for
a zero rate, a division by zero. Options that are each valid but do not go together are
checked by the command, which raises :class:`UsageError` (the same exit status 2).
"""

from __future__ import annotations

import argparse

__all__ = ["UsageError", "positive_float", "positive_floats", "positive_int"]


class UsageError(ValueError):
    """Options that do not go together; the CLI prints it on one line, exit status 2."""


def positive_float(text: str) -> float:
    """A number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0.0:  # also refuses NaN
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return value


def positive_int(text: str) -> int:
    """A whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 1")
    return value


def positive_floats(text: str) -> tuple[float, ...]:
    """A comma-separated list of numbers > 0 (at least one)."""
    values = tuple(positive_float(part.strip()) for part in text.split(",") if part.strip())
    if not values:
        raise argparse.ArgumentTypeError("give at least one number")
    return values

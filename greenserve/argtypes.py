"""argparse ``type=`` converters for numbers a command cannot use outside their range.

argparse turns the ``ArgumentTypeError`` they raise into a usage error naming the option
(exit status 2), where a bare ``float()`` deep in a command would end in a traceback, hang
(a zero tolerance never converges), divide by zero (a zero rate) or print ``NaN`` (which
strict JSON parsers refuse). Options that are each valid but do not go together are checked
by the command, which raises :class:`UsageError` (the same exit status 2).

Which converter an option takes: counts, sizes, durations and rates are positive; an option
whose 0 has a documented meaning ("0: fit once", a trace offset) is non-negative; a share or
a percentile is a :func:`fraction`; a seed is a :func:`seed` (numpy refuses negative ones).
"""

from __future__ import annotations

import argparse
import math

__all__ = [
    "IntBetween",
    "UsageError",
    "fraction",
    "non_negative_float",
    "non_negative_int",
    "non_negative_ints",
    "port",
    "positive_float",
    "positive_floats",
    "positive_int",
    "positive_ints",
    "seed",
]


class UsageError(ValueError):
    """Options that do not go together; the CLI prints it on one line, exit status 2."""


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    # "inf" parses as a float but no duration, rate or count can be infinite.
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def positive_float(text: str) -> float:
    """A finite number > 0."""
    value = _number(text)
    if value <= 0.0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return value


def non_negative_float(text: str) -> float:
    """A finite number >= 0 (for options where 0 has a meaning, such as a trace offset)."""
    value = _number(text)
    if value < 0.0:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 0")
    return value


def fraction(text: str) -> float:
    """A number strictly between 0 and 1: a share, a percentile or a relative precision."""
    value = _number(text)
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0 and < 1")
    return value


def positive_int(text: str) -> int:
    """A whole number >= 1."""
    value = _whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 1")
    return value


def non_negative_int(text: str) -> int:
    """A whole number >= 0 (for options where 0 has a meaning, such as "0: fit once")."""
    value = _whole(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 0")
    return value


def seed(text: str) -> int:
    """A random seed: a whole number >= 0, since numpy's ``default_rng`` refuses negative
    seeds with a traceback deep inside a bench."""
    return non_negative_int(text)


def port(text: str) -> int:
    """A TCP port, 0 to 65535 (0: the system picks a free one)."""
    value = _whole(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0 to 65535)")
    return value


class IntBetween:
    """A converter for whole numbers from ``low`` to ``high``, both included (for a count
    with a hard upper bound, such as the 48 half-hour episodes of a day)."""

    def __init__(self, low: int, high: int) -> None:
        self.low = low
        self.high = high

    def __call__(self, text: str) -> int:
        value = _whole(text)
        if not self.low <= value <= self.high:
            raise argparse.ArgumentTypeError(f"{text!r} must be from {self.low} to {self.high}")
        return value


def positive_floats(text: str) -> tuple[float, ...]:
    """A comma-separated list of numbers > 0 (at least one)."""
    values = tuple(positive_float(part.strip()) for part in text.split(",") if part.strip())
    if not values:
        raise argparse.ArgumentTypeError("give at least one number")
    return values


def non_negative_floats(text: str) -> tuple[float, ...]:
    """A comma-separated list of numbers >= 0 (at least one)."""
    values = tuple(non_negative_float(part.strip()) for part in text.split(",") if part.strip())
    if not values:
        raise argparse.ArgumentTypeError("give at least one number")
    return values


def positive_ints(text: str) -> tuple[int, ...]:
    """A comma-separated list of whole numbers > 0 (at least one)."""
    values = tuple(positive_int(part.strip()) for part in text.split(",") if part.strip())
    if not values:
        raise argparse.ArgumentTypeError("give at least one whole number")
    return values


def non_negative_ints(text: str) -> tuple[int, ...]:
    """A comma-separated list of whole numbers >= 0; an empty one gives none (for a list of
    extras that may be left out)."""
    return tuple(non_negative_int(part.strip()) for part in text.split(",") if part.strip())

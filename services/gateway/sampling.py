"""OpenAI's sampling fields, validated as OpenAI validates them, into ``proto`` ``Sampling``.

The ranges are OpenAI's documented ones, which are also what ``proto.messages.Sampling``
enforces on decode: checking them here answers a bad value with OpenAI's 400 naming the
field, where the bus would only say ``malformed``. ``null`` is the same as leaving a field
out, and a request that sets none of them carries no ``Sampling`` at all.
"""

from __future__ import annotations

from typing import Any, Final

from proto.messages import MAX_STOP_LENGTH, MAX_STOP_SEQUENCES, Sampling
from services.gateway.errors import ApiError

__all__ = ["SAMPLING_FIELDS", "parse_sampling"]

_INT64: Final = 1 << 63

SAMPLING_FIELDS: Final = (
    "temperature",
    "top_p",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
)
"""The OpenAI fields that reach the engine (a vLLM worker) in ``Request.sampling``."""

_UNSET: Final = Sampling()


def _number(
    body: dict[str, Any], name: str, low: float, high: float, *, open_low: bool = False
) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ApiError("invalid_type", f"{name} must be a number", param=name)
    # Compared before float(): JSON integers are unbounded, and float(10**400) overflows.
    if not ((low < value) if open_low else (low <= value)) or not value <= high:
        interval = f"{'(' if open_low else '['}{low:g}, {high:g}]"
        shown = str(value)
        shown = shown if len(shown) <= 24 else f"{shown[:21]}..."
        raise ApiError("invalid_value", f"{name} must be in {interval}, got {shown}", param=name)
    return float(value)


def _seed(body: dict[str, Any]) -> int | None:
    value = body.get("seed")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError("invalid_type", "seed must be an integer", param="seed")
    if not -_INT64 <= value < _INT64:
        raise ApiError("invalid_value", "seed must fit in a signed 64-bit integer", param="seed")
    return value


def _stop(body: dict[str, Any]) -> list[str] | None:
    stop = body.get("stop")
    if stop is None:
        return None
    sequences = [stop] if isinstance(stop, str) else stop
    if not isinstance(sequences, list) or not all(isinstance(s, str) for s in sequences):
        raise ApiError("invalid_type", "stop must be a string or a list of strings", param="stop")
    if len(sequences) > MAX_STOP_SEQUENCES:
        raise ApiError(
            "invalid_value",
            f"stop has {len(sequences)} sequences > {MAX_STOP_SEQUENCES}",
            param="stop",
        )
    if any(len(s) > MAX_STOP_LENGTH for s in sequences):
        raise ApiError(
            "invalid_value",
            f"a stop sequence is longer than {MAX_STOP_LENGTH} characters",
            param="stop",
        )
    # An empty sequence would end every answer at once on an engine that matched it (vLLM
    # does): no client means that, so "" is read as "no stop sequence" and dropped.
    return [s for s in sequences if s] or None


def parse_sampling(body: dict[str, Any]) -> Sampling | None:
    """The sampling fields of an OpenAI body; ``None`` when it sets none of them.

    Raises:
        ApiError: ``invalid_type`` / ``invalid_value`` naming the field.
    """
    sampling = Sampling(
        temperature=_number(body, "temperature", 0.0, 2.0),
        top_p=_number(body, "top_p", 0.0, 1.0, open_low=True),
        stop=_stop(body),
        seed=_seed(body),
        presence_penalty=_number(body, "presence_penalty", -2.0, 2.0),
        frequency_penalty=_number(body, "frequency_penalty", -2.0, 2.0),
    )
    return None if sampling == _UNSET else sampling

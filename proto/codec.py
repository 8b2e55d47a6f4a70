"""One MessagePack codec for every message, validating on decode.

Decoders are built once per type (msgspec caches the schema); ``decode`` raises
:class:`DecodeError` for anything malformed — bad MessagePack, wrong types, values out of
range, or a message of another kind — so a service turns it into an error reply.
"""

from __future__ import annotations

from typing import Any, TypeVar, Union

import msgspec

from proto import messages

__all__ = ["DecodeError", "decode", "decode_any", "encode", "request_endings"]

T = TypeVar("T", bound=msgspec.Struct)

_encoder = msgspec.msgpack.Encoder()
_decoders: dict[type[Any], msgspec.msgpack.Decoder[Any]] = {}

_ALL = tuple(
    getattr(messages, name)
    for name in messages.__all__
    if isinstance(getattr(messages, name), type)
    and issubclass(getattr(messages, name), msgspec.Struct)
)
# A union of tagged structs: msgspec picks the struct by the ``type`` tag.
_any_decoder: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(Union[_ALL])  # noqa: UP007


class DecodeError(ValueError):
    """A payload is not a valid message of the expected type."""


def encode(message: msgspec.Struct) -> bytes:
    """Encode a message as MessagePack."""
    return _encoder.encode(message)


def decode(data: bytes, kind: type[T]) -> T:
    """Decode and validate ``data`` as a ``kind`` message.

    Raises:
        DecodeError: when ``data`` is not valid MessagePack or not a valid ``kind``.
    """
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.msgpack.Decoder(kind)
    try:
        result: T = decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError) as exc:
        raise DecodeError(f"invalid {kind.__name__}: {exc}") from exc
    return result


def decode_any(data: bytes) -> msgspec.Struct:
    """Decode any protocol message, telling its kind by its tag."""
    try:
        result: msgspec.Struct = _any_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError) as exc:
        raise DecodeError(f"invalid message: {exc}") from exc
    return result


def request_endings(data: bytes) -> list[msgspec.Struct]:
    """Decode a ``request.done`` event: the Completions and ErrorReplies it reports.

    The event is one :class:`~proto.messages.Completion`, one
    :class:`~proto.messages.ErrorReply`, or a :class:`~proto.messages.CompletionBatch`;
    any other kind reports nothing.

    Raises:
        DecodeError: when ``data`` is not a valid message.
    """
    message = decode_any(data)
    if isinstance(message, messages.CompletionBatch):
        return list(message.completions)
    if isinstance(message, messages.Completion | messages.ErrorReply):
        return [message]
    return []

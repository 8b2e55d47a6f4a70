"""Property tests: hostile payloads either decode to a valid message or raise DecodeError.

A service turns a DecodeError into an error reply; any other exception would escape the
handler boundary. So for every message type T, ``decode(data, T)`` is fed arbitrary bytes,
corrupted valid payloads, arbitrary MessagePack maps and valid maps with fields replaced by
wrong types, negative or absurd token counts, NaN/inf and huge strings. Whatever decodes is
then checked, independently of msgspec, against the limits declared in ``proto.messages``.

Cancels are decoded together with their subject (``shared.cancels.cancelled_id``: the
client id is the subject's last token), so that pair gets its own property: a hostile
token or payload gives ``None``, never an exception, and anything else exactly
``<token>.<id>``.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any

import msgspec
import msgspec.inspect as mi
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proto.codec import DecodeError, decode
from proto.messages import MAX_TOKENS_LIMIT, CancelRequest, SubmitReply
from proto.subjects import Subjects, valid_token
from shared.cancels import cancelled_id
from tests.unit.proto.samples import KINDS, sample_of

FUZZ = settings(
    max_examples=100,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

_HUGE = ["x" * 513, "é" * 2049, "id" * 70, "a\nb", "", " ", "gs.v1.>"]
_ABSURD_INTS = [0, -1, -(2**63), 2**63 - 1, 2**64 - 1, MAX_TOKENS_LIMIT, MAX_TOKENS_LIMIT + 1]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.sampled_from(_ABSURD_INTS),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(_HUGE),
    st.binary(max_size=40),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=4,
)


def _within(t: mi.Type, value: Any, where: str) -> None:
    """Assert that a decoded value obeys the declared msgspec type and limits."""
    if isinstance(t, mi.UnionType):
        errors = []
        for option in t.types:
            try:
                _within(option, value, where)
            except AssertionError as exc:
                errors.append(str(exc))
            else:
                return
        raise AssertionError(f"{where}: {value!r:.60} fits no option: {errors}")
    if isinstance(t, mi.NoneType):
        assert value is None, where
    elif isinstance(t, mi.BoolType):
        assert type(value) is bool, where
    elif isinstance(t, mi.IntType | mi.FloatType):
        assert type(value) is (int if isinstance(t, mi.IntType) else float), where
        assert t.ge is None or value >= t.ge, where
        assert t.le is None or value <= t.le, where
        assert t.gt is None or value > t.gt, where
        assert t.lt is None or value < t.lt, where
        assert t.ge is None or not math.isnan(value), where
    elif isinstance(t, mi.StrType):
        assert type(value) is str, where
        assert t.min_length is None or len(value) >= t.min_length, where
        assert t.max_length is None or len(value) <= t.max_length, where
        assert t.pattern is None or re.search(t.pattern, value), where
    elif isinstance(t, mi.ListType):
        assert type(value) is list, where
        for i, item in enumerate(value):
            _within(t.item_type, item, f"{where}[{i}]")
    elif isinstance(t, mi.DictType):
        assert type(value) is dict, where
        for key, item in value.items():
            _within(t.key_type, key, f"{where}.key")
            _within(t.value_type, item, f"{where}[{key!r}]")
    elif isinstance(t, mi.StructType):
        assert type(value) is t.cls, where
        for field in t.fields:
            _within(field.type, getattr(value, field.name), f"{where}.{field.name}")
    else:  # pragma: no cover - a new msgspec type in proto.messages needs a branch here
        pytest.fail(f"{where}: unchecked type {t!r}")


@functools.cache
def _type_info(kind: type[msgspec.Struct]) -> mi.Type:
    return mi.type_info(kind)


def _decode_or_reject(data: bytes, kind: type[msgspec.Struct]) -> None:
    """The property: a valid, in-limits ``kind`` comes back, or DecodeError is raised."""
    try:
        message = decode(data, kind)
    except DecodeError:
        return
    _within(_type_info(kind), message, kind.__name__)
    assert decode(msgspec.msgpack.encode(message), kind) == message


def _dict_nodes(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths to every map inside a message's builtins form (nested structs included)."""
    found: list[tuple[Any, ...]] = []
    if isinstance(value, dict):
        found.append(path)
        children = value.items()
    elif isinstance(value, list):
        children = enumerate(value)  # type: ignore[assignment]
    else:
        return found
    for key, child in children:
        found += _dict_nodes(child, (*path, key))
    return found


def _node(root: Any, path: tuple[Any, ...]) -> dict[str, Any]:
    node = root
    for key in path:
        node = node[key]
    assert isinstance(node, dict)
    return node


def _sample_map(kind: type[msgspec.Struct]) -> dict[str, Any]:
    raw = msgspec.to_builtins(sample_of(kind))
    assert isinstance(raw, dict)
    return raw


@st.composite
def corrupted_payloads(draw: st.DrawFn, kind: type[msgspec.Struct]) -> bytes:
    """A valid payload of ``kind``, truncated and with a few bytes overwritten."""
    payload = bytearray(msgspec.msgpack.encode(sample_of(kind)))
    flips = draw(st.lists(st.tuples(st.integers(0, len(payload) - 1), st.integers(0, 255)),
                          max_size=4))  # fmt: skip
    for index, byte in flips:
        payload[index] = byte
    return bytes(payload[: draw(st.integers(min_value=1, max_value=len(payload)))])


@st.composite
def hostile_maps(draw: st.DrawFn, kind: type[msgspec.Struct]) -> bytes:
    """A valid map of ``kind`` with fields of one (possibly nested) map dropped or replaced."""
    raw = _sample_map(kind)
    node = _node(raw, draw(st.sampled_from(_dict_nodes(raw))))
    keys: st.SearchStrategy[str] = st.text(max_size=6)
    if node:
        names = st.sampled_from(sorted(node))
        for name in draw(st.sets(names, max_size=2)):
            if name != "type":
                del node[name]
        keys = names | keys
    node.update(draw(st.dictionaries(keys, values, min_size=1, max_size=3)))
    return msgspec.msgpack.encode(raw)


@st.composite
def arbitrary_maps(draw: st.DrawFn, kind: type[msgspec.Struct]) -> bytes:
    """An arbitrary map, sometimes carrying ``kind``'s tag so decoding gets past it."""
    raw = draw(st.dictionaries(st.text(max_size=12), values, max_size=8))
    if draw(st.booleans()):
        raw["type"] = _sample_map(kind)["type"]
    return msgspec.msgpack.encode(raw)


def hostile_payloads(kind: type[msgspec.Struct]) -> st.SearchStrategy[bytes]:
    """Every kind of hostile payload for one message type."""
    return st.one_of(
        st.binary(max_size=200), corrupted_payloads(kind), hostile_maps(kind), arbitrary_maps(kind)
    )


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
@FUZZ
@given(data=st.data())
def test_hostile_payloads_decode_validly_or_raise_decode_error(
    kind: type[msgspec.Struct], data: st.DataObject
) -> None:
    """Test that random bytes, corrupted payloads and hostile maps never escape DecodeError."""
    _decode_or_reject(data.draw(hostile_payloads(kind), label="payload"), kind)


_CLIENT_TOKENS = st.from_regex(r"[A-Za-z0-9_-]{1,128}", fullmatch=True)
_HOSTILE_TOKENS = st.sampled_from(["*", ">", "a%b", "é", "x" * 129, "$G", "\x00", "a.b", ""])
_CANCEL_IDS = _CLIENT_TOKENS | st.sampled_from(["x" * 129, "a.b", "*", "", "r\n"])


@FUZZ
@given(
    token=_CLIENT_TOKENS | _HOSTILE_TOKENS | st.text(max_size=140),
    payload=hostile_payloads(CancelRequest)
    | st.builds(CancelRequest, request_id=_CLIENT_TOKENS).map(msgspec.msgpack.encode)
    | st.fixed_dictionaries(
        {"type": st.just("gs.v1.cancel"), "request_id": _CANCEL_IDS},
        optional={"reason": st.text(max_size=300), "at": st.floats() | st.integers()},
    ).map(msgspec.msgpack.encode),
)
def test_a_cancel_names_its_subject_s_client_and_one_token_id_or_nothing(
    token: str, payload: bytes
) -> None:
    """Test that ``cancelled_id`` never raises on a hostile subject token or payload: it is
    None unless the token is a client id and the payload a valid CancelRequest, and then
    ``<token>.<id>`` with exactly one dot, so no cancel can name another client's request."""
    subject = f"{Subjects('gs').cancel_wildcard.removesuffix('*')}{token}"
    found = cancelled_id(subject, payload)
    last = subject.rpartition(".")[2]
    try:
        message: CancelRequest | None = decode(payload, CancelRequest)
    except DecodeError:
        message = None
    if message is None or not valid_token(last):
        assert found is None
        return
    _within(_type_info(CancelRequest), message, "CancelRequest")
    assert found == f"{last}.{message.request_id}"
    assert found.split(".") == [last, message.request_id]


def _invalid_utf8_payload() -> bytes:
    ok = msgspec.msgpack.encode({"type": "gs.v1.submit_reply", "request_id": "ab", "accepted": 1})
    return ok.replace(b"\xa2ab", b"\xa2a\xff")


def test_invalid_utf8_in_a_string_field_raises_decode_error() -> None:
    """Test that a string that is not UTF-8 is a DecodeError like any other bad value."""
    with pytest.raises(DecodeError):
        decode(_invalid_utf8_payload(), SubmitReply)

"""Hypothesis strategies of bad input for ``bench fuzz``, derived from the message schemas.

Each message type's strategy comes from ``msgspec.inspect``: a *valid* value of every field
(bounds, patterns, tags), then up to two fields replaced by wrong types or values just out
of range, fields dropped, the tag changed, or the encoding byte-mutated and truncated;
beside those, random bytes and random MessagePack. Near-valid cases matter most: they pass
the decoder's first checks and reach the semantic ones.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import msgspec
import msgspec.inspect as mi

__all__ = [
    "HOSTILE_CLIENT_TOKENS",
    "HOSTILE_SUBJECTS",
    "OK",
    "cancel_cases",
    "collect",
    "fill",
    "forecast_query_cases",
    "http_cases",
    "ingress_cases",
    "payloads",
]

INT64 = (-(2**63), 2**63 - 1)
OK = "\x00ok"
"""Stands for the case's own id or reply subject until the case is numbered."""
HOSTILE_SUBJECTS = ("{ok} x", "{ok}\r\nPUB x 1", "{ok}.*", "{ok}.>", "", "{ok}" + "." * 600)
"""Reply subjects a client might send: whitespace, protocol injection, wildcards, empty."""
HOSTILE_CLIENT_TOKENS = (
    "*",
    ">",
    "a%b",
    "\u00e9",
    "x" * 129,
    "$G",
    "\x00",
    "a\x7fb",
    "\u00c4\u200b",
)
"""Last tokens of ``cancel.client.<token>`` that NATS delivers to ``cancel.client.*`` but that
are no client id: wildcards, punctuation, non-ASCII, NUL, 129 characters. (A ``.`` or
whitespace would change the subject's tokens, and nobody would hear the cancel.)"""


def _st() -> Any:
    try:
        from hypothesis import strategies
    except ImportError as exc:  # a dev dependency
        raise SystemExit("bench fuzz needs hypothesis: pip install 'greenserve[dev]'") from exc
    return strategies


def wrong() -> Any:
    """Values of the wrong type, extremes and huge strings."""
    st = _st()
    small_ints = st.integers(*INT64)
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(INT64[0], 2**64 - 1),
        st.sampled_from([-1, 0, 2**31, 2**63 - 1, 2**64 - 1, INT64[0]]),
        st.floats(),
        st.text(max_size=12),
        st.binary(max_size=12),
        st.integers(0, 70_000).map(lambda n: "x" * n),
        st.lists(small_ints, max_size=3),
        st.dictionaries(st.text(max_size=4), small_ints, max_size=2),
    )


def _bounds(t: mi.IntType) -> tuple[int, int]:
    low = t.ge if t.ge is not None else (t.gt + 1 if t.gt is not None else -(2**20))
    high = t.le if t.le is not None else (t.lt - 1 if t.lt is not None else 2**20)
    return low, high


def value(t: mi.Type, *, valid: bool, depth: int = 0) -> Any:
    """A value of type ``t``: inside its bounds, or (``valid=False``) just outside them."""
    st = _st()
    if isinstance(t, mi.IntType):
        low, high = _bounds(t)
        return st.integers(low, high) if valid else st.integers(low - 3, high + 3)
    if isinstance(t, mi.FloatType):
        if not valid:
            return st.floats()
        floor: float = t.ge if t.ge is not None else -1e12
        return st.floats(floor, t.le if t.le is not None else 1e12, allow_nan=False)
    if isinstance(t, mi.StrType):
        if t.pattern:
            return st.from_regex(t.pattern, fullmatch=True) if valid else st.text(max_size=8)
        return st.text(min_size=t.min_length or 0, max_size=min(t.max_length or 24, 24))
    if isinstance(t, mi.BoolType):
        return st.booleans()
    if isinstance(t, mi.NoneType):
        return st.none()
    if isinstance(t, mi.UnionType):
        return st.one_of(*(value(u, valid=valid, depth=depth) for u in t.types))
    if isinstance(t, mi.ListType):
        item = value(t.item_type, valid=valid, depth=depth + 1)
        return st.lists(item, max_size=2 if depth < 2 else 0)
    if isinstance(t, mi.DictType):
        item = value(t.value_type, valid=valid, depth=depth + 1)
        return st.dictionaries(st.text(max_size=6), item, max_size=2 if depth < 2 else 0)
    if isinstance(t, mi.StructType):
        return shaped(t, depth=depth + 1)
    return wrong()


def shaped(t: mi.StructType, *, depth: int = 0, overrides: dict[str, Any] | None = None) -> Any:
    """Maps shaped like ``t``: valid, then up to two fields broken, one dropped, or re-tagged."""
    st = _st()
    tag_field = t.tag_field or "type"
    fields = {f.encode_name: value(f.type, valid=True, depth=depth) for f in t.fields}
    fields.update(overrides or {})
    base = st.fixed_dictionaries({tag_field: st.just(t.tag), **fields})
    if depth >= 2:
        return base
    names = sorted(fields)
    broken = st.dictionaries(
        st.sampled_from(names),
        st.one_of(*(value(f.type, valid=False) for f in t.fields)) | wrong(),
        max_size=2,
    )
    dropped = st.sets(st.sampled_from([*names, tag_field]), max_size=1)
    tags = st.sampled_from([t.tag, t.tag, t.tag, "gs.v1.nope", 7])

    def assemble(parts: tuple[dict[str, Any], dict[str, Any], set[str], Any]) -> dict[str, Any]:
        good, bad, gone, tag = parts
        out = {**good, **bad, tag_field: tag}
        return {k: v for k, v in out.items() if k not in gone}

    return st.tuples(base, broken, dropped, tags).map(assemble)


def _encode(message: Any) -> bytes:
    try:
        return msgspec.msgpack.encode(message)
    except OverflowError:  # an int beyond 64 bits has no MessagePack form
        return b"\xc1"


def _mutated(base: Any) -> Any:
    """Encode, then flip bytes and maybe truncate (malformed MessagePack)."""
    st = _st()
    flips = st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), max_size=4)

    def apply(args: tuple[bytes, list[tuple[int, int]], int]) -> bytes:
        data, edits, cut = args
        buf = bytearray(data)
        for at, byte in edits:
            if buf:
                buf[at % len(buf)] = byte
        return bytes(buf[: max(0, len(buf) - cut)])

    return st.tuples(base, flips, st.integers(0, 4)).map(apply)


def _msgpack_any() -> Any:
    st = _st()
    leaves = st.none() | st.booleans() | st.integers(*INT64) | st.floats()
    leaves = leaves | st.text(max_size=16) | st.binary(max_size=16)
    tree = st.recursive(
        leaves,
        lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c),
        max_leaves=8,
    )
    return tree.map(_encode)


def payloads(kind: type[msgspec.Struct]) -> Any:
    """Bad (and some good) MessagePack payloads aimed at ``kind``."""
    st = _st()
    info = mi.type_info(kind)
    assert isinstance(info, mi.StructType)
    near = shaped(info).map(_encode)
    return st.one_of(st.binary(max_size=256), _msgpack_any(), near, near, _mutated(near))


def collect(strategy: Any, count: int, seed: int, each: Callable[[Any], None]) -> None:
    """Call ``each`` on ``count`` examples (fewer if hypothesis runs out of new ones)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as fix_seed

    @fix_seed(seed)
    @settings(
        max_examples=count,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def draw(example: Any) -> None:
        each(example)

    draw()


def ingress_cases(
    request_type: type[msgspec.Struct], models: list[str], count: int, seed: int
) -> list[Any]:
    """Request payloads: raw bytes, or near-valid maps with OK placeholders to :func:`fill`."""
    st = _st()
    info = mi.type_info(request_type)
    assert isinstance(info, mi.StructType)
    big = st.integers(0, 600_000).map(lambda n: "p" * n)
    overrides = {
        "request_id": st.just(OK),
        "reply_subject": st.just(OK) | st.just(OK) | st.sampled_from(HOSTILE_SUBJECTS),
        "model": st.sampled_from([*models, "gpt-99"]),
        "max_tokens": st.integers(1, 48),
        "prompt_tokens": st.none() | st.integers(1, 512) | st.integers(7000, 9000),
        "prompt": st.none() | st.text(max_size=40) | big,
    }
    maps = shaped(info, overrides=overrides)
    raw = st.one_of(st.binary(max_size=256), _msgpack_any())
    flipped = st.tuples(maps, st.integers(0, 1 << 16), st.integers(0, 255))
    out: list[Any] = []
    collect(st.one_of(raw, maps, maps, maps, flipped), count, seed, out.append)
    return out


def cancel_cases(kind: type[msgspec.Struct], count: int, seed: int) -> list[tuple[str, bytes]]:
    """(client token, payload) for ``cancel.client.<token>``: mostly :data:`OK` (the case's
    own valid client id, see :func:`fill`), else a hostile token; payloads as
    :func:`payloads` makes them, with absurd but in-schema values beside the broken ones
    (128-character ids, 256-character reasons, ``at`` of 0 and 10^18) and just-outside ones."""
    st = _st()
    info = mi.type_info(kind)
    assert isinstance(info, mi.StructType)
    id_field = next(f for f in info.fields if f.encode_name == "request_id")
    overrides = {
        "request_id": value(id_field.type, valid=True)
        | st.sampled_from(["x" * 128, "x" * 129, "a.b", "*", ""]),
        "reason": st.text(max_size=24) | st.sampled_from(["r" * 256, "r" * 257, "\x00" * 256]),
        "at": st.floats(0.0, 1e18) | st.sampled_from([0.0, -0.0, 1e18, 1.0000001e18]),
    }
    near = shaped(info, overrides=overrides).map(_encode)
    payload = st.one_of(st.binary(max_size=256), _msgpack_any(), near, near, _mutated(near))
    client = st.just(OK) | st.just(OK) | st.just(OK) | st.sampled_from(HOSTILE_CLIENT_TOKENS)
    out: list[tuple[str, bytes]] = []
    collect(st.tuples(client, payload), count, seed, out.append)
    return out


def fill(case: Any, own_id: str, own_subject: str) -> bytes:
    """The payload of one ingress case, with its own id and reply subject filled in."""
    if isinstance(case, bytes):
        return case
    fields, flip = (case[0], case[1:]) if isinstance(case, tuple) else (case, None)
    filled: dict[str, Any] = {}
    for key, item in fields.items():
        if item == OK:
            item = own_id if key == "request_id" else own_subject
        elif key == "reply_subject" and isinstance(item, str):
            item = item.replace("{ok}", own_subject)
        filled[key] = item
    data = _encode(filled)
    if flip:
        buf = bytearray(data)
        buf[flip[0] % len(buf)] = flip[1]
        data = bytes(buf)
    return data


def http_cases(models: list[str], count: int, seed: int) -> list[tuple[str, bytes]]:
    """(path, body) for the gateway: near-valid OpenAI bodies, random JSON, random bytes."""
    st = _st()
    bad = wrong().filter(lambda v: not isinstance(v, bytes | float) or v == v)
    message = st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system"]), "content": st.text(max_size=30)}
    )
    required = {
        "model": st.sampled_from([*models, "gpt-99"]),
        "prompt": st.text(max_size=40) | st.lists(st.integers(0, 50_000), min_size=1, max_size=8),
        "messages": st.lists(message, min_size=1, max_size=3),
    }
    optional = {
        "max_tokens": st.integers(1, 32),
        "prompt_tokens": st.integers(1, 512),
        "ignore_eos": st.booleans(),
        "stream": st.booleans(),
        "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
    }
    absurd = {
        "model": st.just(""),
        "prompt": st.integers(0, 600_000).map(lambda n: "p" * n) | st.lists(st.text(), min_size=2),
        "messages": st.lists(bad, min_size=1, max_size=2) | st.just([]),
        "max_tokens": st.integers(-(2**40), 0) | st.integers(2**20 + 1, 2**62),
        "prompt_tokens": st.integers(-5, 0) | st.integers(8000, 2**62),
        "n": st.integers(-1, 3),
    }
    one_absurd = st.sampled_from(sorted(absurd)).flatmap(lambda k: absurd[k].map(lambda v: {k: v}))
    one_wrong = st.sampled_from([*required, *optional]).flatmap(lambda k: bad.map(lambda v: {k: v}))
    body = st.tuples(
        st.fixed_dictionaries(required, optional=optional),
        st.just({}) | one_absurd,
        st.just({}) | one_wrong,
        st.sets(st.sampled_from(sorted(required)), max_size=1),
    ).map(
        lambda p: json.dumps(
            {k: v for k, v in {**p[0], **p[1], **p[2]}.items() if k not in p[3]}, default=str
        ).encode()
    )
    json_any = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
        max_leaves=6,
    )
    raw = st.binary(max_size=200) | json_any.map(lambda v: json.dumps(v).encode())
    path = st.sampled_from(["/v1/completions", "/v1/chat/completions"])
    out: list[tuple[str, bytes]] = []
    collect(st.tuples(path, body | body | raw), count, seed, out.append)
    return out


def forecast_query_cases(count: int, seed: int) -> list[str]:
    """Query strings for the carbon-aware forecast route: near-valid parameters (known and
    unknown regions, ISO times, window lengths), absurd ones and random keys and text."""
    from urllib.parse import urlencode

    st = _st()
    times = st.datetimes().map(lambda t: t.isoformat()) | st.text(max_size=30)
    value = {
        "location": st.sampled_from(["PJM", "CISO", "ERCO", "", " ", "PJM\x00"])
        | st.text(max_size=300),
        "windowSize": st.integers(-(2**40), 2**40).map(str)
        | st.sampled_from(["60", "240", "90", "1e3", "0x10", ""])
        | st.text(max_size=10),
        "dataStartAt": times,
        "dataEndAt": times,
    }
    pair = st.sampled_from(sorted(value)).flatmap(lambda k: value[k].map(lambda v: (k, v)))
    noise = st.tuples(st.text(max_size=8), st.text(max_size=20))
    query = st.lists(pair | noise, max_size=8).map(urlencode)
    out: list[str] = []
    collect(query, count, seed, out.append)
    return out

"""Measure the wire codec: msgspec's validating MessagePack codec against ``msgpack``.

Usage: ``.venv/bin/python tools/bench_codec.py [--repeat 7] [--json]``

For a typical ClassifiedRequest (the largest message on the hot path, it crosses the bus
three times per request) and a typical TokenChunk (the most frequent one), it times one
encode + decode + validate round as the services do it:

* ``msgspec``: :func:`proto.codec.encode` then :func:`proto.codec.decode` into the typed
  Struct, with every type, range and pattern of ``proto.messages`` checked in C;
* ``msgpack+checks``: ``msgpack.packb`` of the equivalent dict, ``msgpack.unpackb`` and the
  hand-written checks below, which enforce the same rules (tag, required fields, types,
  bounds, id patterns). They return a plain dict, not a typed object, so this side is a
  lower bound on what an equally safe msgpack path costs;
* ``msgpack raw``: pack + unpack with no validation at all (unsafe; for scale only).

Before timing, the hand-written checks are run against msgspec on a set of malformed
variants, and the tool stops if they ever disagree, so the comparison stays like for like.
``msgpack`` is optional: without it the tool says so and exits 0.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import statistics
import sys
import timeit
import typing
from collections.abc import Callable
from typing import Any

import msgspec

from proto.codec import DecodeError, decode, encode
from proto.messages import (
    FINITE_LIMIT,
    MAX_STOP_LENGTH,
    MAX_STOP_SEQUENCES,
    MAX_TOKENS_LIMIT,
    ClassifiedRequest,
    Id,
    Request,
    RequestId,
    Subject,
    TokenChunk,
)

__all__ = [
    "ManualValidationError",
    "check_classified_request",
    "check_token_chunk",
    "main",
    "malformed_variants",
    "typical_classified_request",
    "typical_token_chunk",
]


def _pattern(alias: object) -> re.Pattern[str]:
    """The pattern of a constrained string type of ``proto.messages``: a msgpack service
    would share the schema's constants too, and copies drifted from them before."""
    meta = typing.get_args(alias)[1]
    return re.compile(meta.pattern)


_ID = _pattern(Id)
_REQUEST_ID = _pattern(RequestId)
_SUBJECT = _pattern(Subject)


class ManualValidationError(ValueError):
    """The hand-written checks rejected a payload."""


def _req(obj: dict[str, Any], key: str) -> Any:
    if key not in obj:
        raise ManualValidationError(f"missing {key}")
    return obj[key]


def _tag(obj: Any, tag: str) -> dict[str, Any]:
    if not isinstance(obj, dict) or obj.get("type") != tag:
        raise ManualValidationError(f"not a {tag}")
    return obj


def _int(value: Any, lo: int, hi: int | None = None) -> int:
    # bool is an int subclass in Python but not on the wire schema.
    if type(value) is not int or value < lo or (hi is not None and value > hi):
        raise ManualValidationError(f"bad int {value!r}")
    return value


def _float(value: Any, lo: float = -FINITE_LIMIT, hi: float = FINITE_LIMIT) -> float:
    # The schema's floats are finite and bounded (proto.messages.Finite, NonNeg).
    if type(value) not in (int, float) or not lo <= value <= hi:
        raise ManualValidationError(f"bad float {value!r}")
    return float(value)


def _str(value: Any, lo: int = 0, hi: int | None = None) -> str:
    if type(value) is not str or len(value) < lo or (hi is not None and len(value) > hi):
        raise ManualValidationError(f"bad str {value!r:.40}")
    return value


def _id(value: Any, pattern: re.Pattern[str] | None = None) -> str:
    if type(value) is not str or (pattern or _ID).fullmatch(value) is None:
        raise ManualValidationError(f"bad id {value!r:.40}")
    return value


def _bool(value: Any) -> bool:
    if type(value) is not bool:
        raise ManualValidationError(f"bad bool {value!r}")
    return value


def _str_map(value: Any) -> dict[str, str]:
    if type(value) is not dict:
        raise ManualValidationError("not a map")
    return {_str(k): _str(v) for k, v in value.items()}


def _float_between(value: Any, lo: float, hi: float, *, open_low: bool = False) -> float:
    number = _float(value, lo)
    if number > hi or (open_low and number == lo):
        raise ManualValidationError(f"bad float {value!r}")
    return number


def _check_sampling(obj: Any) -> dict[str, Any]:
    # A struct field of one struct type (not a union) may leave its tag out, as msgspec reads it.
    d = _tag({"type": "gs.v1.sampling", **obj} if isinstance(obj, dict) else obj, "gs.v1.sampling")
    out: dict[str, Any] = {}
    if d.get("temperature") is not None:
        out["temperature"] = _float_between(d["temperature"], 0.0, 2.0)
    if d.get("top_p") is not None:
        out["top_p"] = _float_between(d["top_p"], 0.0, 1.0, open_low=True)
    stop = d.get("stop")
    if stop is not None:
        if type(stop) is not list or not 1 <= len(stop) <= MAX_STOP_SEQUENCES:
            raise ManualValidationError(f"bad stop {stop!r:.40}")
        out["stop"] = [_str(s, 1, MAX_STOP_LENGTH) for s in stop]
    if d.get("seed") is not None:
        out["seed"] = _int(d["seed"], -(1 << 63), (1 << 63) - 1)
    for penalty in ("presence_penalty", "frequency_penalty"):
        if d.get(penalty) is not None:
            out[penalty] = _float_between(d[penalty], -2.0, 2.0)
    return out


def _check_request(obj: Any) -> dict[str, Any]:
    d = _tag(obj, "gs.v1.request")
    out: dict[str, Any] = {
        "request_id": _id(_req(d, "request_id"), _REQUEST_ID),
        "model": _str(_req(d, "model"), 1, 128),
        "reply_subject": _id(_str(_req(d, "reply_subject"), 1, 512), _SUBJECT),
        "sent_at": _float(_req(d, "sent_at"), 0.0),
        "max_tokens": _int(_req(d, "max_tokens"), 1, MAX_TOKENS_LIMIT),
    }
    prompt_tokens = d.get("prompt_tokens")
    out["prompt_tokens"] = (
        None if prompt_tokens is None else _int(prompt_tokens, 1, MAX_TOKENS_LIMIT)
    )
    prompt = d.get("prompt")
    out["prompt"] = None if prompt is None else _str(prompt, 0, 4_000_000)
    out["ignore_eos"] = _bool(d.get("ignore_eos", True))
    out["stream"] = _bool(d.get("stream", True))
    client_id = d.get("client_id")
    out["client_id"] = None if client_id is None else _id(client_id)
    sampling = d.get("sampling")
    out["sampling"] = None if sampling is None else _check_sampling(sampling)
    return out


def check_classified_request(obj: Any) -> dict[str, Any]:
    """Validate a decoded ClassifiedRequest dict by hand, as a msgpack service would.

    Raises:
        ManualValidationError: any rule of ``proto.messages.ClassifiedRequest`` is broken.
    """
    d = _tag(obj, "gs.v1.classified")
    return {
        "request": _check_request(_req(d, "request")),
        "input_tokens": _int(_req(d, "input_tokens"), 1, MAX_TOKENS_LIMIT),
        "predicted_output_tokens": _int(_req(d, "predicted_output_tokens"), 1, MAX_TOKENS_LIMIT),
        "request_class": _str(_req(d, "request_class"), 1, 16),
        "pool_id": _id(_req(d, "pool_id")),
        "region": _id(_req(d, "region")),
        "arrival_s": _float(_req(d, "arrival_s")),
        "ttft_slo_ms": _float(_req(d, "ttft_slo_ms"), 0.0),
        "tbt_slo_ms": _float(_req(d, "tbt_slo_ms"), 0.0),
        "profile_ttft_ms": _float(_req(d, "profile_ttft_ms"), 0.0),
        "profile_tbt_ms": _float(_req(d, "profile_tbt_ms"), 0.0),
        "lat_s": _float(_req(d, "lat_s"), 0.0),
        "deadline_s": _float(_req(d, "deadline_s")),
        "classified_at": _float(_req(d, "classified_at"), 0.0),
        "trace": _str_map(d.get("trace", {})),
        "ingress_seq": _int(d.get("ingress_seq", 0), 0),
    }


def check_token_chunk(obj: Any) -> dict[str, Any]:
    """Validate a decoded TokenChunk dict by hand.

    Raises:
        ManualValidationError: any rule of ``proto.messages.TokenChunk`` is broken.
    """
    d = _tag(obj, "gs.v1.chunk")
    times = _req(d, "token_times")
    if type(times) is not list:
        raise ManualValidationError("token_times is not a list")
    text = d.get("text")
    return {
        "request_id": _id(_req(d, "request_id")),
        "worker_id": _id(_req(d, "worker_id")),
        "first_index": _int(_req(d, "first_index"), 0),
        "token_times": [_float(t) for t in times],
        "text": None if text is None else _str(text),
    }


def typical_classified_request() -> ClassifiedRequest:
    """A ClassifiedRequest shaped like one from the Azure conversation trace."""
    request = Request(
        request_id="conv-000000012345",
        model="llama-3-8b",
        reply_subject="gs.v1.client.loadgen-7f3a.conv-000000012345",
        sent_at=1_763_000_000.125,
        max_tokens=129,
        prompt_tokens=1020,
        client_id="loadgen-7f3a",
    )
    return ClassifiedRequest(
        request=request,
        input_tokens=1020,
        predicted_output_tokens=129,
        request_class="ML",
        pool_id="pjm-a100",
        region="PJM",
        arrival_s=1_656_633_612.5,
        ttft_slo_ms=500.0,
        tbt_slo_ms=100.0,
        profile_ttft_ms=180.0,
        profile_tbt_ms=22.0,
        lat_s=3.018,
        deadline_s=1_656_633_616.7252,
        classified_at=1_763_000_000.127,
    )


def typical_token_chunk() -> TokenChunk:
    """A TokenChunk with three coalesced tokens (50 ms flush window, ~20 ms TBT)."""
    t0 = 1_763_000_000.4
    return TokenChunk(
        request_id="conv-000000012345",
        worker_id="worker-0",
        first_index=17,
        token_times=[t0, t0 + 0.021, t0 + 0.043],
    )


def malformed_variants(sample: dict[str, Any]) -> list[dict[str, Any]]:
    """Copies of a message dict, each broken in one way a bad client could break it."""
    bad_values: list[Any] = [-1, 0, True, "12", None, 2**40, "bad id!", "", 1.5, [1], {}]
    variants: list[dict[str, Any]] = []
    for key in sample:
        if key == "type":
            continue
        for bad in bad_values:
            variants.append({**sample, key: bad})
        variants.append({k: v for k, v in sample.items() if k != key})
    variants.append({**sample, "type": "gs.v1.completion"})
    return variants


def _agree(msg: msgspec.Struct, check: Callable[[Any], dict[str, Any]]) -> int:
    """Return how many variants both paths judged; raise if they ever disagree."""
    sample = msgspec.to_builtins(msg)
    variants = [sample, *malformed_variants(sample)]
    if "request" in sample:
        variants += [{**sample, "request": v} for v in malformed_variants(sample["request"])]
    for variant in variants:
        payload = msgspec.msgpack.encode(variant)
        try:
            decode(payload, type(msg))
            ours = True
        except DecodeError:
            ours = False
        try:
            check(msgspec.msgpack.decode(payload))
            theirs = True
        except ManualValidationError:
            theirs = False
        if ours != theirs:
            raise SystemExit(f"hand-written checks disagree with msgspec on {variant!r:.200}")
    return len(variants)


def _time_us(fn: Callable[[], object], repeat: int) -> dict[str, float]:
    timer = timeit.Timer(fn)
    number, _ = timer.autorange()
    runs = [t / number * 1e6 for t in timer.repeat(repeat=repeat, number=number)]
    return {"best_us": round(min(runs), 3), "median_us": round(statistics.median(runs), 3)}


def _msgspec_round(msg: msgspec.Struct) -> Callable[[], object]:
    kind = type(msg)
    return lambda: decode(encode(msg), kind)


def _msgpack_round(
    msgpack: Any, as_dict: dict[str, Any], check: Callable[[Any], dict[str, Any]] | None
) -> Callable[[], object]:
    packb, unpackb = msgpack.packb, msgpack.unpackb
    if check is None:
        return lambda: unpackb(packb(as_dict))
    return lambda: check(unpackb(packb(as_dict)))


def measure(msgpack: Any, repeat: int) -> dict[str, Any]:
    """Time every codec path on both typical messages."""
    results: dict[str, Any] = {}
    cases: list[tuple[str, msgspec.Struct, Callable[[Any], dict[str, Any]]]] = [
        ("ClassifiedRequest", typical_classified_request(), check_classified_request),
        ("TokenChunk", typical_token_chunk(), check_token_chunk),
    ]
    for name, msg, check in cases:
        as_dict = msgspec.to_builtins(msg)
        packed = msgpack.packb(as_dict)
        agreed = _agree(msg, check)
        paths = {
            "msgspec": _time_us(_msgspec_round(msg), repeat),
            "msgpack+checks": _time_us(_msgpack_round(msgpack, as_dict, check), repeat),
            "msgpack raw": _time_us(_msgpack_round(msgpack, as_dict, None), repeat),
        }
        speedup = paths["msgpack+checks"]["best_us"] / paths["msgspec"]["best_us"]
        results[name] = {
            "bytes_msgspec": len(encode(msg)),
            "bytes_msgpack": len(packed),
            "variants_agreed": agreed,
            "paths": paths,
            "msgspec_speedup_vs_msgpack_checks": round(speedup, 2),
        }
    return results


def main(argv: list[str] | None = None) -> int:
    """Run the measurement; print a table, and the JSON as the last line with ``--json``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=7, help="timing repeats (best is kept)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON last")
    args = parser.parse_args(argv)
    try:
        msgpack: Any = importlib.import_module("msgpack")
    except ImportError:
        print(
            "msgpack is not installed, so there is nothing to compare msgspec with; "
            "install it with `.venv/bin/pip install msgpack` to run this benchmark.",
        )
        return 0
    results = measure(msgpack, args.repeat)
    info = {
        "python": sys.version.split()[0],
        "msgspec": msgspec.__version__,
        "msgpack": ".".join(str(p) for p in msgpack.version),
    }
    print(f"encode + decode + validate, µs per message (best of {args.repeat}; median)")
    for name, res in results.items():
        print(f"{name}: {res['bytes_msgspec']} B (msgpack {res['bytes_msgpack']} B)")
        for path, t in res["paths"].items():
            print(f"  {path:<15} {t['best_us']:8.2f}  ({t['median_us']:.2f})")
        print(f"  msgspec is {res['msgspec_speedup_vs_msgpack_checks']}x faster than checks")
    if args.json:
        print(json.dumps({"versions": info, "results": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Round trips and limits of every protocol message through ``proto.codec``."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from proto.codec import DecodeError, decode, decode_any, encode, request_endings
from proto.messages import (
    MAX_TOKENS_LIMIT,
    ClassifiedRequest,
    Completion,
    CompletionBatch,
    ErrorReply,
    Request,
    Sampling,
)
from tests.unit.proto.samples import KINDS, SAMPLES, sample_of


def _as_dict(message: msgspec.Struct) -> dict[str, Any]:
    raw = msgspec.to_builtins(message)
    assert isinstance(raw, dict)
    return raw


def test_every_message_type_has_a_sample() -> None:
    """Test that the samples cover every message type exported by proto.messages."""
    assert sorted(type(s).__name__ for s in SAMPLES) == sorted(k.__name__ for k in KINDS)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_a_message_survives_encode_and_decode_unchanged(kind: type[msgspec.Struct]) -> None:
    """Test that decode(encode(m), T) gives back an equal message, and decode_any agrees."""
    sample = sample_of(kind)
    payload = encode(sample)
    assert decode(payload, kind) == sample
    assert decode_any(payload) == sample
    assert encode(decode(payload, kind)) == payload


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_a_message_carries_its_versioned_tag_on_the_wire(kind: type[msgspec.Struct]) -> None:
    """Test that every message is a map whose type tag names protocol v1."""
    raw = msgspec.msgpack.decode(encode(sample_of(kind)))
    assert isinstance(raw, dict)
    assert raw["type"].startswith("gs.v1.")


def test_no_message_decodes_as_another_kind() -> None:
    """Test that a message sent to the wrong decoder fails on its tag, for every pair."""
    for sample in SAMPLES:
        payload = encode(sample)
        for kind in KINDS:
            if kind is type(sample):
                continue
            with pytest.raises(DecodeError):
                decode(payload, kind)


def test_tags_are_unique() -> None:
    """Test that no two message types share a wire tag."""
    tags = [_as_dict(s)["type"] for s in SAMPLES]
    assert len(set(tags)) == len(tags)


def test_unknown_fields_are_ignored_so_v1_can_grow() -> None:
    """Test that a field added by a newer sender is ignored by an older receiver."""
    raw = {**_as_dict(sample_of(Request)), "priority": 3}
    assert decode(msgspec.msgpack.encode(raw), Request) == sample_of(Request)


@pytest.mark.parametrize("field", ["max_tokens", "prompt_tokens"])
@pytest.mark.parametrize("count", [0, -1, MAX_TOKENS_LIMIT + 1, 2**63 - 1, True, 12.0, "12"])
def test_request_token_counts_outside_the_limit_are_rejected(field: str, count: object) -> None:
    """Test that token counts that are not integers in 1..2^20 fail validation."""
    raw = {**_as_dict(sample_of(Request)), field: count}
    with pytest.raises(DecodeError, match=field):
        decode(msgspec.msgpack.encode(raw), Request)


@pytest.mark.parametrize("field", ["input_tokens", "predicted_output_tokens"])
def test_classified_token_counts_at_the_limits_are_accepted(field: str) -> None:
    """Test that 1 and 2^20 tokens are both valid (the limits are inclusive)."""
    base = _as_dict(sample_of(ClassifiedRequest))
    for count in (1, MAX_TOKENS_LIMIT):
        decoded = decode(msgspec.msgpack.encode({**base, field: count}), ClassifiedRequest)
        assert getattr(decoded, field) == count


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("request_id", "has space"),
        ("request_id", "a.b.c"),  # one '.' at most: <client id>.<request id>
        ("request_id", ".b"),
        ("request_id", "a." + "x" * 129),
        ("request_id", "x" * 129),
        ("request_id", ""),
        ("model", ""),
        ("reply_subject", "s" * 513),
        ("prompt", "p" * 4_000_001),
        ("sent_at", -0.5),
        ("ignore_eos", 1),
    ],
)
def test_request_fields_beyond_their_limits_are_rejected(field: str, value: object) -> None:
    """Test that ids, lengths, negative times and wrong types are caught at decode."""
    raw = {**_as_dict(sample_of(Request)), field: value}
    with pytest.raises(DecodeError):
        decode(msgspec.msgpack.encode(raw), Request)


def test_a_request_from_before_sampling_decodes_with_the_engine_defaults() -> None:
    """Test that a Request encoded without ``sampling`` (older senders) decodes to None."""
    raw = _as_dict(sample_of(Request))
    del raw["sampling"]
    decoded = decode(msgspec.msgpack.encode(raw), Request)
    assert decoded.sampling is None
    assert decoded == msgspec.structs.replace(sample_of(Request), sampling=None)


def test_only_the_sampling_fields_a_client_set_are_on_the_wire() -> None:
    """Test that unset sampling fields cost nothing and decode back as None."""
    payload = encode(Sampling(stop=["###"]))
    assert msgspec.msgpack.decode(payload) == {"type": "gs.v1.sampling", "stop": ["###"]}
    assert decode(payload, Sampling) == Sampling(stop=["###"], temperature=None, seed=None)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", -0.1),
        ("temperature", 2.01),
        ("temperature", float("nan")),
        ("temperature", "hot"),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("stop", ["a", "b", "c", "d", "e"]),
        ("stop", []),
        ("stop", [""]),
        ("stop", ["x" * 513]),
        ("stop", "###"),  # the gateway sends a list even for one string
        ("seed", 1 << 63),
        ("seed", (1 << 64) - 1),  # MessagePack carries up to uint64
        ("seed", 1.5),
        ("presence_penalty", -2.5),
        ("frequency_penalty", 2.5),
    ],
)
def test_sampling_values_beyond_openai_s_ranges_are_rejected(field: str, value: object) -> None:
    """Test that sampling parameters outside OpenAI's documented ranges fail validation,
    inside a Request too."""
    with pytest.raises(DecodeError, match=field):
        decode(msgspec.msgpack.encode({"type": "gs.v1.sampling", field: value}), Sampling)
    raw = _as_dict(sample_of(Request))
    raw["sampling"] = {"type": "gs.v1.sampling", field: value}
    with pytest.raises(DecodeError, match=field):
        decode(msgspec.msgpack.encode(raw), Request)


def test_sampling_values_at_their_limits_are_accepted() -> None:
    """Test that the range limits are inclusive where OpenAI's are (top_p excludes 0)."""
    edge = Sampling(
        temperature=2.0,
        top_p=1.0,
        stop=["x" * 512] * 4,
        seed=-(1 << 63),
        presence_penalty=-2.0,
        frequency_penalty=2.0,
    )
    assert decode(encode(edge), Sampling) == edge
    assert decode(encode(Sampling(temperature=0.0, seed=(1 << 63) - 1)), Sampling).seed == (
        (1 << 63) - 1
    )


def test_a_missing_required_field_is_named_in_the_error() -> None:
    """Test that the DecodeError says which field is missing."""
    raw = _as_dict(sample_of(ClassifiedRequest))
    del raw["deadline_s"]
    with pytest.raises(DecodeError, match="deadline_s"):
        decode(msgspec.msgpack.encode(raw), ClassifiedRequest)


def test_decode_error_is_a_value_error() -> None:
    """Test that callers catching ValueError also catch malformed payloads."""
    with pytest.raises(ValueError, match="invalid Request"):
        decode(b"\xc1", Request)


def test_request_done_events_decode_to_the_requests_they_end() -> None:
    """Test that request_endings flattens a CompletionBatch and passes single endings through."""
    completion, error = sample_of(Completion), sample_of(ErrorReply)
    assert isinstance(completion, Completion)
    other = msgspec.structs.replace(completion, request_id="conv-43")
    batch = CompletionBatch(completions=[completion, other])
    assert request_endings(encode(batch)) == [completion, other]
    assert request_endings(encode(completion)) == [completion]
    assert request_endings(encode(error)) == [error]
    assert request_endings(encode(sample_of(Request))) == []  # not an ending
    with pytest.raises(DecodeError):
        request_endings(b"\xc1")
    with pytest.raises(DecodeError):  # an empty batch reports nothing and is refused
        request_endings(
            msgspec.msgpack.encode({"type": "gs.v1.completion_batch", "completions": []})
        )

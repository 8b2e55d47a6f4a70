"""OpenAI's sampling fields: validated with OpenAI's errors and carried in ``Request.sampling``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proto.codec import decode, encode
from proto.messages import Request, Sampling
from services.gateway.errors import ApiError
from services.gateway.openai_schema import ParsedRequest, parse_body, to_request
from services.gateway.sampling import SAMPLING_FIELDS, parse_sampling

_PROMPT = {"model": "llama-3-8b", "prompt": "x"}
_CHAT = {"model": "llama-3-8b", "messages": [{"role": "user", "content": "x"}]}


def _parse(body: dict[str, Any] | bytes, endpoint: str = "completion") -> ParsedRequest:
    return parse_body(
        body if isinstance(body, bytes) else json.dumps(body).encode(),
        endpoint,  # type: ignore[arg-type]
        models=frozenset({"llama-3-8b"}),
        default_max_tokens=16,
        chat_default_max_tokens=1024,
        max_tokens_limit=1 << 20,
    )


def _request(parsed: ParsedRequest) -> Request:
    return to_request(
        parsed,
        request_id="r1",
        reply_subject="gs.v1.client.c.r1",
        client_id="c",
        sent_at=1.0,
        chars_per_token=4.0,
    )


def test_every_sampling_field_a_client_sets_reaches_the_bus_request() -> None:
    """Test that the six fields are parsed, put in Request.sampling and survive the wire."""
    body = {
        **_CHAT,
        "temperature": 0.7,
        "top_p": 0.9,
        "stop": ["\n\nUser:", "###"],
        "seed": 1234,
        "presence_penalty": -0.5,
        "frequency_penalty": 1,  # JSON integers are numbers too
    }
    request = _request(_parse(body, "chat"))
    expected = Sampling(
        temperature=0.7,
        top_p=0.9,
        stop=["\n\nUser:", "###"],
        seed=1234,
        presence_penalty=-0.5,
        frequency_penalty=1.0,
    )
    assert request.sampling == expected
    assert isinstance(request.sampling.frequency_penalty, float)
    assert decode(encode(request), Request) == request


def test_a_request_without_sampling_fields_carries_none() -> None:
    """Test that no field, or every field null, leaves Request.sampling None (engine
    defaults), so the common request carries nothing more."""
    assert _request(_parse(_PROMPT)).sampling is None
    nulls = dict.fromkeys(SAMPLING_FIELDS)
    assert _parse({**_PROMPT, **nulls}).sampling is None


@pytest.mark.parametrize(
    ("stop", "expected"),
    [
        ("\n", ["\n"]),
        (["a", "b"], ["a", "b"]),
        ("", None),  # no stop sequence, not "stop at once"
        (["", "END"], ["END"]),
        ([], None),
        ("x" * 512, ["x" * 512]),
    ],
)
def test_stop_is_always_carried_as_a_list_without_empty_sequences(
    stop: object, expected: list[str] | None
) -> None:
    """Test OpenAI's two shapes of ``stop`` and that an empty sequence is dropped."""
    sampling = parse_sampling({"stop": stop})
    assert (sampling.stop if sampling is not None else None) == expected


@pytest.mark.parametrize(
    ("field", "value", "code"),
    [
        ("temperature", "0.5", "invalid_type"),
        ("temperature", True, "invalid_type"),
        ("temperature", -0.1, "invalid_value"),
        ("temperature", 2.5, "invalid_value"),
        ("top_p", 0, "invalid_value"),
        ("top_p", 1.01, "invalid_value"),
        ("top_p", [0.5], "invalid_type"),
        ("stop", 5, "invalid_type"),
        ("stop", ["a", 5], "invalid_type"),
        ("stop", {"a": 1}, "invalid_type"),
        ("stop", ["a"] * 5, "invalid_value"),
        ("stop", ["x" * 513], "invalid_value"),
        ("seed", 1.5, "invalid_type"),
        ("seed", False, "invalid_type"),
        ("seed", 1 << 63, "invalid_value"),
        ("seed", -(1 << 63) - 1, "invalid_value"),
        ("presence_penalty", -2.01, "invalid_value"),
        ("frequency_penalty", 3, "invalid_value"),
        ("temperature", 10**400, "invalid_value"),  # JSON integers are unbounded
        ("frequency_penalty", "high", "invalid_type"),
    ],
)
@pytest.mark.parametrize("endpoint", ["completion", "chat"])
def test_a_bad_sampling_field_is_openai_s_400_naming_it(
    field: str, value: object, code: str, endpoint: str
) -> None:
    """Test that each wrong type or out-of-range value is refused with status 400, the
    documented code and ``param`` naming the field, on both endpoints."""
    base = _CHAT if endpoint == "chat" else _PROMPT
    with pytest.raises(ApiError) as caught:
        _parse({**base, field: value}, endpoint)
    err = caught.value
    assert (err.status, err.code, err.param) == (400, code, field)
    assert err.body()["error"]["type"] == "invalid_request_error"


def test_range_limits_are_inclusive_as_openai_s_are() -> None:
    """Test the edges: temperature 0 and 2, top_p 1, seed int64 bounds, penalties ±2."""
    edges = {
        "temperature": 2,
        "top_p": 1,
        "seed": -(1 << 63),
        "presence_penalty": -2,
        "frequency_penalty": 2.0,
    }
    assert parse_sampling(edges) == Sampling(
        temperature=2.0, top_p=1.0, seed=-(1 << 63), presence_penalty=-2.0, frequency_penalty=2.0
    )
    assert parse_sampling({"temperature": 0, "seed": (1 << 63) - 1}) == Sampling(
        temperature=0.0, seed=(1 << 63) - 1
    )


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.integers(min_value=-5, max_value=5)
    | st.floats(allow_nan=False, min_value=-5.0, max_value=5.0)
    | st.text(max_size=600),
    lambda inner: st.lists(inner, max_size=6),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None, database=None)
@given(body=st.fixed_dictionaries({}, optional=dict.fromkeys(SAMPLING_FIELDS, _JSON)))
def test_what_the_gateway_accepts_is_exactly_what_the_wire_decodes(
    body: dict[str, Any],
) -> None:
    """Test, for arbitrary JSON values, that the gateway either refuses a field by name or
    builds a Sampling that passes the protocol's own limits: no request it accepts can
    then be refused by the classifier as ``malformed``."""
    refused: ApiError | None = None
    try:
        sampling = parse_sampling(body)
    except ApiError as err:
        refused, sampling = err, None
    if refused is not None:
        assert refused.param in SAMPLING_FIELDS
        assert refused.code in {"invalid_type", "invalid_value"}
    elif sampling is not None:
        assert decode(encode(sampling), Sampling) == sampling

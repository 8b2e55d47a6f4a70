"""Validation of OpenAI bodies, the bus request built from them, and response shapes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from proto.messages import TokenChunk
from services.gateway.errors import ApiError, status_of_upstream
from services.gateway.openai_schema import (
    CO2_HEADER,
    ENERGY_HEADER,
    ParsedRequest,
    chat_prompt,
    footprint_headers,
    parse_body,
    stream_chunk,
    to_request,
    usage,
)
from services.gateway.replies import TokenText
from shared.config import GatewaySettings, load_settings

MODELS = frozenset({"llama-3-8b"})
_CHAT = {"model": "llama-3-8b", "messages": [{"role": "user", "content": "x"}]}


def _parse(body: Any, endpoint: str = "completion") -> ParsedRequest:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return parse_body(
        raw,
        endpoint,  # type: ignore[arg-type]
        models=MODELS,
        default_max_tokens=16,
        chat_default_max_tokens=1024,
        max_tokens_limit=1 << 20,
    )


def _code(body: Any, endpoint: str = "completion") -> tuple[int, str, str | None]:
    with pytest.raises(ApiError) as caught:
        _parse(body, endpoint)
    return caught.value.status, caught.value.code, caught.value.param


def test_a_plain_completion_gets_the_default_max_tokens_and_ignore_eos_off() -> None:
    """Test that a minimal body parses with OpenAI's default of 16 tokens and ignore_eos false."""
    parsed = _parse({"model": "llama-3-8b", "prompt": "hi"})
    assert (parsed.max_tokens, parsed.ignore_eos, parsed.stream) == (16, False, False)


def test_a_token_id_prompt_gives_its_length_as_prompt_tokens() -> None:
    """Test that a prompt of token ids is counted, not sent as text."""
    parsed = _parse({"model": "llama-3-8b", "prompt": [1, 2, 3]})
    assert (parsed.prompt, parsed.prompt_tokens) == (None, 3)


def test_chat_messages_render_into_one_prompt_and_max_completion_tokens_is_used() -> None:
    """Test that chat messages become role-prefixed lines and max_completion_tokens is used."""
    parsed = _parse(
        {
            "model": "llama-3-8b",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            "max_completion_tokens": 5,
        },
        "chat",
    )
    assert (parsed.prompt, parsed.max_tokens) == (chat_prompt([("user", "hi")]), 5)


def test_a_chat_without_a_limit_gets_the_chat_default_not_the_completions_16() -> None:
    """Test that a chat request naming no limit gets chat_default_max_tokens (OpenAI's chat
    API has no small default), a completion still 16, and an explicit limit wins on both."""
    assert _parse(_CHAT, "chat").max_tokens == 1024
    assert _parse({**_CHAT, "max_tokens": None}, "chat").max_tokens == 1024
    assert _parse({**_CHAT, "max_tokens": 7}, "chat").max_tokens == 7
    assert _parse({**_CHAT, "max_completion_tokens": 9}, "chat").max_tokens == 9
    assert _parse({"model": "llama-3-8b", "prompt": "x"}).max_tokens == 16


def test_chat_default_max_tokens_must_fit_the_limit() -> None:
    """Test that GatewaySettings refuses a chat default above max_tokens_limit."""
    with pytest.raises(ValidationError, match="chat_default_max_tokens"):
        GatewaySettings(max_tokens_limit=512)
    assert (
        GatewaySettings(max_tokens_limit=512, chat_default_max_tokens=512).max_tokens_limit == 512
    )
    assert GatewaySettings().chat_default_max_tokens == 1024


def test_both_token_limits_are_refused_as_openai_refuses_them() -> None:
    """Test that max_tokens with max_completion_tokens is OpenAI's 400, not a silent pick."""
    body = {"model": "llama-3-8b", "messages": [{"role": "user", "content": "x"}]}
    both = {**body, "max_tokens": 3, "max_completion_tokens": 5}
    assert _code(both, "chat") == (400, "invalid_parameter_combination", "max_tokens")
    assert _parse({**body, "max_tokens": 3, "max_completion_tokens": None}, "chat").max_tokens == 3


def test_one_token_id_prompt_in_a_batch_is_served_and_several_are_refused() -> None:
    """Test the openai client's ``Iterable[Iterable[int]]`` prompt: one list is one prompt."""
    assert _parse({"model": "llama-3-8b", "prompt": [[5, 6, 7, 8]]}).prompt_tokens == 4
    assert _code({"model": "llama-3-8b", "prompt": [[1], [2]]}) == (400, "unsupported", "prompt")


def test_json_nested_past_the_decoder_s_depth_is_invalid_json() -> None:
    """Test that msgspec's RecursionError on deep nesting is a 400, not an escaping error."""
    assert _code(b"[" * 5000 + b"]" * 5000) == (400, "invalid_json", None)


def test_stream_options_need_stream_and_name_their_field() -> None:
    """Test that stream_options without stream is refused and a bad include_usage is named."""
    body = {"model": "llama-3-8b", "prompt": "x", "stream_options": {"include_usage": True}}
    assert _code(body) == (400, "invalid_value", "stream_options")
    assert _parse({**body, "stream": True}).include_usage
    bad = {**body, "stream": True, "stream_options": {"include_usage": 1}}
    assert _code(bad) == (400, "invalid_type", "stream_options.include_usage")


@pytest.mark.parametrize(
    ("body", "endpoint", "expected"),
    [
        ({"stop": 5}, "completion", (400, "invalid_type", "stop")),
        ({"stop": ["a"] * 5}, "completion", (400, "invalid_value", "stop")),
        ({"user": 5}, "completion", (400, "invalid_type", "user")),
        ({"logprobs": 0}, "completion", (400, "unsupported", "logprobs")),
        ({"logprobs": "yes"}, "completion", (400, "invalid_type", "logprobs")),
        ({"logprobs": True}, "chat", (400, "unsupported", "logprobs")),
        ({"logprobs": 1}, "chat", (400, "invalid_type", "logprobs")),
        (
            {"response_format": {"type": "json_schema"}},
            "chat",
            (400, "unsupported", "response_format"),
        ),
        ({"response_format": "json"}, "chat", (400, "invalid_type", "response_format")),
        ({"tool_choice": "required"}, "chat", (400, "unsupported", "tool_choice")),
        (
            {"tool_choice": {"type": "function", "function": {"name": "f"}}},
            "chat",
            (400, "unsupported", "tool_choice"),
        ),
        (
            {"messages": [{"role": "robot", "content": "x"}]},
            "chat",
            (400, "invalid_value", "messages[0].role"),
        ),
    ],
)
def test_fields_that_cannot_be_honoured_or_are_mistyped_are_named(
    body: dict[str, Any], endpoint: str, expected: tuple[int, str, str | None]
) -> None:
    """Test that an optional field asking for an answer shape the gateway cannot give, or of
    the wrong type, is refused with the field named rather than silently ignored."""
    base = _CHAT if endpoint == "chat" else {"model": "llama-3-8b", "prompt": "x"}
    assert _code({**base, **body}, endpoint) == expected


def test_fields_that_only_tune_sampling_are_accepted() -> None:
    """Test that the usual sampling fields, text output and optional tools still pass."""
    tool = {"type": "function", "function": {"name": "f"}}
    chat = {
        **_CHAT,
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": None},
        ],
        "stop": ["\n"],
        "user": "u1",
        "temperature": 0.2,
        "logprobs": False,
        "response_format": {"type": "text"},
        "tools": [tool],
        "tool_choice": "auto",
    }
    assert _parse(chat, "chat").prompt == chat_prompt(
        [("system", "be brief"), ("user", "hi"), ("assistant", "")]
    )
    plain = _parse({"model": "llama-3-8b", "prompt": "x", "stop": "\n", "logprobs": None})
    assert plain.prompt == "x"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"{not json", (400, "invalid_json", None)),
        ({"prompt": "x"}, (400, "missing_field", "model")),
        ({"model": "nope", "prompt": "x"}, (404, "model_not_found", "model")),
        (
            {"model": "llama-3-8b", "prompt": "x", "max_tokens": 0},
            (400, "invalid_value", "max_tokens"),
        ),
        (
            {"model": "llama-3-8b", "prompt": "x", "max_tokens": True},
            (400, "invalid_type", "max_tokens"),
        ),
        ({"model": "llama-3-8b", "prompt": "x", "n": 2}, (400, "invalid_value", "n")),
        ({"model": "llama-3-8b", "prompt": "x", "stream": "yes"}, (400, "invalid_type", "stream")),
        ({"model": "llama-3-8b", "prompt": ["a", "b"]}, (400, "unsupported", "prompt")),
        ({"model": "llama-3-8b", "prompt": 7}, (400, "invalid_type", "prompt")),
        (
            {"model": "llama-3-8b", "prompt_tokens": -1, "prompt": "x"},
            (400, "invalid_value", "prompt_tokens"),
        ),
    ],
)
def test_bad_completion_bodies_are_refused_with_status_code_and_param(
    body: Any, expected: tuple[int, str, str | None]
) -> None:
    """Test that each malformed body is refused with its documented status, code and field."""
    assert _code(body) == expected


def test_a_chat_message_without_a_role_is_refused() -> None:
    """Test that a message lacking its role names the offending field."""
    assert _code({"model": "llama-3-8b", "messages": [{"content": "x"}]}, "chat") == (
        400,
        "invalid_type",
        "messages[0].role",
    )


def test_the_request_estimates_prompt_tokens_only_without_a_tokenizer() -> None:
    """Test that text length is estimated per chars_per_token, or left to the tokenizer."""
    parsed = _parse({"model": "llama-3-8b", "prompt": "x" * 9})
    common: dict[str, Any] = {
        "request_id": "r1",
        "reply_subject": "gs.v1.client.c.r1",
        "client_id": "c",
        "sent_at": 1.0,
    }
    assert to_request(parsed, chars_per_token=4.0, **common).prompt_tokens == 3
    assert to_request(parsed, chars_per_token=None, **common).prompt_tokens is None


def test_a_default_limit_is_cut_to_what_the_prompt_leaves_of_the_context() -> None:
    """Test that a long chat prompt without a limit gets the rest of the context (as vLLM
    does) instead of a default that the classifier would refuse as too_long, and that a
    limit the client set is left for the classifier to judge."""
    common: dict[str, Any] = {
        "request_id": "r1",
        "reply_subject": "gs.v1.client.c.r1",
        "client_id": "c",
        "sent_at": 1.0,
        "context_tokens": 8192,
    }
    long_chat = {"model": "llama-3-8b", "messages": [{"role": "user", "content": "x"}]}
    parsed = _parse({**long_chat, "prompt_tokens": 7700}, "chat")
    assert to_request(parsed, chars_per_token=4.0, **common).max_tokens == 492
    short = _parse({**long_chat, "prompt_tokens": 100}, "chat")
    assert to_request(short, chars_per_token=4.0, **common).max_tokens == 1024
    given = _parse({**long_chat, "prompt_tokens": 7700, "max_tokens": 1000}, "chat")
    assert to_request(given, chars_per_token=4.0, **common).max_tokens == 1000
    # Only the text known (the classifier tokenises): estimated at 3 characters a token.
    text = _parse(
        {"model": "llama-3-8b", "messages": [{"role": "user", "content": "y" * 23000}]}, "chat"
    )
    assert to_request(text, chars_per_token=None, **common).max_tokens < 8192 - 23000 // 4
    # A prompt beyond the context is left to the classifier's too_long.
    over = _parse({**long_chat, "prompt_tokens": 9000}, "chat")
    assert to_request(over, chars_per_token=4.0, **common).max_tokens == 1024


def test_upstream_codes_map_to_statuses_and_unknown_ones_to_bad_gateway() -> None:
    """Test the ErrorReply code → HTTP status table, with 502 for codes it does not know."""
    got = [status_of_upstream(c) for c in ("too_long", "unknown_model", "no_plan", "internal", "?")]
    assert got == [400, 404, 503, 500, 502]


def test_an_unclassifiable_request_is_the_client_s_400_not_a_bad_gateway() -> None:
    """Test that the classifier's ``unclassifiable`` (e.g. the oracle predictor given
    ignore_eos false) reaches the client as OpenAI's invalid_request_error, not a 502."""
    err = ApiError("unclassifiable", "classifier: the oracle needs ignore_eos")
    assert (err.status, err.error_type) == (400, "invalid_request_error")
    assert err.body()["error"]["code"] == "unclassifiable"


def test_a_usage_only_chunk_has_no_choices() -> None:
    """Test that the final usage chunk follows OpenAI: empty choices and a usage object."""
    parsed = _parse({"model": "llama-3-8b", "prompt": "x"})
    chunk = stream_chunk(parsed, "r", 0, text=None, token_usage={"total_tokens": 3})
    assert (chunk["choices"], chunk["usage"]) == ([], {"total_tokens": 3})


def test_with_include_usage_every_chunk_has_usage_null_until_the_last() -> None:
    """Test OpenAI's stream shape: usage on every chunk when asked for, absent otherwise."""
    body = {"model": "llama-3-8b", "prompt": "x", "stream": True}
    asked = _parse({**body, "stream_options": {"include_usage": True}})
    assert stream_chunk(asked, "r", 0, text=" a")["usage"] is None
    assert "usage" not in stream_chunk(_parse(body), "r", 0, text=" a")


def _chunk(first: int, n: int, text: str | None = None) -> TokenChunk:
    return TokenChunk(
        request_id="r", worker_id="w", first_index=first, token_times=[0.0] * n, text=text
    )


def test_token_text_drops_repeated_chunks_and_pads_to_the_completion_count() -> None:
    """Test that a re-sent chunk adds nothing and finish() fills tokens never streamed."""
    tokens = TokenText("·")
    streamed = [tokens.add(_chunk(0, 2)), tokens.add(_chunk(0, 2)), tokens.add(_chunk(2, 1))]
    assert (streamed, tokens.finish(5), tokens.text) == (["··", "", "·"], "··", "·····")


def test_token_text_uses_real_text_when_the_worker_sends_it() -> None:
    """Test that text from a real engine is passed through and never padded."""
    tokens = TokenText("·")
    tokens.add(_chunk(0, 2, "Hello"))
    assert (tokens.finish(4), tokens.text) == ("", "Hello")


def test_gateway_settings_read_typed_environment_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Test that GREENSERVE_GATEWAY__* variables become typed fields."""
    monkeypatch.setenv("GREENSERVE_GATEWAY__PORT", "9000")
    monkeypatch.setenv("GREENSERVE_GATEWAY__REQUEST_TIMEOUT_S", "2.5")
    config = load_settings().gateway
    assert (config.port, config.request_timeout_s) == (9000, 2.5)


def test_gateway_settings_refuse_unknown_fields() -> None:
    """Test that a misspelt setting is an error, not silently ignored."""
    with pytest.raises(ValidationError):
        load_settings(gateway={"prot": 1})


def test_usage_carries_energy_and_co2_as_extension_fields_and_headers() -> None:
    """Test that the footprint joins OpenAI's usage fields without changing them, that an
    unknown CO2 is null in the body and absent from the headers."""
    body = usage(24, 7, 12.5, 0.0015)
    assert body == {
        "prompt_tokens": 24,
        "completion_tokens": 7,
        "total_tokens": 31,
        "gpu_energy_joules": 12.5,
        "co2_grams": 0.0015,
    }
    assert usage(24, 7, 12.5, None)["co2_grams"] is None
    assert set(usage(24, 7)) == {"prompt_tokens", "completion_tokens", "total_tokens"}
    assert footprint_headers(12.5, None) == {ENERGY_HEADER: "12.500000"}
    assert footprint_headers(12.5, 0.0015)[CO2_HEADER] == "0.001500000"

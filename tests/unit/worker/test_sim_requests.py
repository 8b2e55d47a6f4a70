"""Unit tests of sim-engine request validation."""

from __future__ import annotations

from typing import Any

import pytest

from loadgen.sim_requests import (
    CHARS_PER_TOKEN,
    DEFAULT_MAX_TOKENS,
    CompletionParams,
    parse_completion_request,
)


def _ok(body: dict[str, Any]) -> CompletionParams:
    parsed = parse_completion_request({"model": "m", **body}, "m")
    assert isinstance(parsed, CompletionParams)
    return parsed


def test_token_id_prompts_are_sized_by_length_and_text_by_characters() -> None:
    """Test that prompt sizes come from id counts or the characters-per-token rule."""
    assert _ok({"prompt": [1, 2, 3]}).prompt_tokens == 3
    assert _ok({"prompt": [[7] * 5]}).prompt_tokens == 5
    assert _ok({"prompt": "x" * 40}).prompt_tokens == round(40 / CHARS_PER_TOKEN)
    assert _ok({"prompt": ["abcd"]}).prompt_tokens == 1


def test_defaults_and_stream_options_are_taken() -> None:
    """Test that max_tokens defaults to 16 and stream options are read."""
    params = _ok(
        {
            "prompt": "hi",
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
    )
    assert (params.max_tokens, params.stream, params.include_usage, params.continuous_usage) == (
        DEFAULT_MAX_TOKENS,
        True,
        True,
        True,
    )
    assert params.usage(4) == {"prompt_tokens": 1, "completion_tokens": 4, "total_tokens": 5}


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"model": "other", "prompt": "a"}, 404),
        ({"model": "m"}, 400),
        ({"model": "m", "prompt": ""}, 400),
        ({"model": "m", "prompt": [1, -2]}, 400),
        ({"model": "m", "prompt": ["a", "b"]}, 400),
        ({"model": "m", "prompt": "a", "max_tokens": 0}, 400),
        ({"model": "m", "prompt": "a", "max_tokens": 2.5}, 400),
        ({"model": "m", "prompt": "a", "n": 2}, 400),
        ({"model": "m", "prompt": "a", "stream_options": {"include_usage": True}}, 400),
    ],
)
def test_invalid_bodies_get_the_status_vllm_would_give(body: dict[str, Any], status: int) -> None:
    """Test that an unknown model is 404 and malformed fields are 400."""
    parsed = parse_completion_request(body, "m")
    assert isinstance(parsed, tuple)
    assert parsed[0] == status

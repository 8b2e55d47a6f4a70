"""Tests of prompt token counting and the refusal of impossible counts."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from services.classifier.tokenizer import (
    PromptTokenCounter,
    TokenCountError,
    TokenizerUnavailableError,
    check_token_counts,
    load_tokenizer,
)

if TYPE_CHECKING:
    from pathlib import Path


class _WhitespaceTokenizer:
    """A stand-in tokenizer: one token per word plus a BOS token."""

    def encode(self, text: str) -> list[int]:
        return [0] + [hash(word) % 1000 for word in text.split()]


@pytest.mark.parametrize(
    ("prompt_tokens", "max_output_tokens", "message"),
    [
        (-5, None, "negative"),
        (0, None, "zero tokens"),
        (4096, None, "no room"),
        (5000, None, "no room"),
        (4000, 97, "exceeds"),
        (100, 0, "max_output_tokens"),
    ],
)
def test_impossible_counts_are_refused(
    prompt_tokens: int, max_output_tokens: int | None, message: str
) -> None:
    """Test that negative, zero and beyond-context counts raise TokenCountError."""
    with pytest.raises(TokenCountError, match=message):
        check_token_counts(prompt_tokens, context_tokens=4096, max_output_tokens=max_output_tokens)


def test_counts_that_fit_are_returned_unchanged() -> None:
    """Test that a prompt plus cap exactly filling the context is accepted."""
    assert check_token_counts(4000, context_tokens=4096, max_output_tokens=96) == 4000
    assert check_token_counts(1, context_tokens=4096) == 1


def test_non_integer_counts_are_refused() -> None:
    """Test that a bool or float count is an error rather than a silent conversion."""
    with pytest.raises(TokenCountError, match="integer"):
        check_token_counts(True, context_tokens=4096)
    with pytest.raises(TokenCountError, match="integer"):
        check_token_counts(12.5, context_tokens=4096)  # type: ignore[arg-type]


def test_counter_prefers_the_tokenizer_when_text_is_given() -> None:
    """Test that a configured tokenizer's count overrides the client's count."""
    counter = PromptTokenCounter(context_tokens=4096, tokenizer=_WhitespaceTokenizer())
    assert counter.exact
    assert counter.count(text="three short words", given_tokens=999) == 4
    assert counter.count(given_tokens=17) == 17


def test_counter_without_tokenizer_uses_the_given_count_and_validates_it() -> None:
    """Test that without a tokenizer the given count is used, and a missing one is an error."""
    counter = PromptTokenCounter(context_tokens=2048)
    assert counter.count(text="ignored words", given_tokens=12) == 12
    with pytest.raises(TokenCountError, match="neither"):
        counter.count(text="no tokenizer and no count")
    with pytest.raises(TokenCountError, match="context"):
        counter.count(given_tokens=3000)


def test_tokenizer_text_beyond_the_context_is_refused() -> None:
    """Test that an exact count past the window is refused even if the client said less."""
    counter = PromptTokenCounter(context_tokens=8, tokenizer=_WhitespaceTokenizer())
    with pytest.raises(TokenCountError, match="no room"):
        counter.count(text="one two three four five six seven eight", given_tokens=3)


def test_loading_a_missing_tokenizer_explains_why(tmp_path: Path) -> None:
    """Test that a configured but unusable tokenizer path raises TokenizerUnavailableError."""
    with pytest.raises(TokenizerUnavailableError, match=r"transformers|does not exist|tokenizer"):
        load_tokenizer(tmp_path / "no-such-model")

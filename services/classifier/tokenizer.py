"""Exact prompt token counts, and validation of counts that cannot be right.

The classifier needs the prompt length in the served model's tokens (DynamoLLM §1.1 and
FREESH §2.2 thresholds are in tokens). With the model's tokenizer files configured, a Hugging
Face tokenizer counts the prompt text exactly; otherwise the count the request (or the trace)
carries is used. Either way, a count that is negative, zero, or beyond the model's context
window is refused with :class:`TokenCountError`.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "PromptTokenCounter",
    "TextTokenizer",
    "TokenCountError",
    "TokenizerUnavailableError",
    "check_token_counts",
    "load_hf_tokenizer",
    "load_tokenizer",
]


class TokenCountError(ValueError):
    """A prompt or output token count is impossible for the model."""


class TokenizerUnavailableError(ImportError):
    """A tokenizer was configured but cannot be loaded (missing ``transformers`` or files)."""


class TextTokenizer(Protocol):
    """Anything that turns text into token ids (a Hugging Face tokenizer qualifies)."""

    def encode(self, text: str) -> list[int]:
        """Return the token ids of ``text``."""
        ...


def check_token_counts(
    prompt_tokens: int, *, context_tokens: int, max_output_tokens: int | None = None
) -> int:
    """Return ``prompt_tokens`` if the request can fit in the model's context window.

    Args:
        prompt_tokens: input length in tokens.
        context_tokens: the model's context window (prompt plus generated tokens).
        max_output_tokens: the request's generation cap, when it has one.

    Raises:
        TokenCountError: for a negative or zero prompt, a prompt that leaves no room to
            generate, or a prompt plus cap beyond the window.
    """
    if isinstance(prompt_tokens, bool) or not isinstance(prompt_tokens, int):
        raise TokenCountError(f"prompt token count must be an integer, got {prompt_tokens!r}")
    if prompt_tokens < 0:
        raise TokenCountError(f"prompt token count is negative ({prompt_tokens})")
    if prompt_tokens == 0:
        raise TokenCountError("prompt has zero tokens; an empty prompt cannot be served")
    if prompt_tokens >= context_tokens:
        raise TokenCountError(
            f"prompt of {prompt_tokens} tokens leaves no room to generate in the model's "
            f"context of {context_tokens} tokens"
        )
    if max_output_tokens is not None:
        if max_output_tokens < 1:
            raise TokenCountError(f"max_output_tokens must be ≥ 1, got {max_output_tokens}")
        if prompt_tokens + max_output_tokens > context_tokens:
            raise TokenCountError(
                f"prompt ({prompt_tokens}) plus max_output_tokens ({max_output_tokens}) "
                f"exceeds the model's context of {context_tokens} tokens"
            )
    return prompt_tokens


def load_hf_tokenizer(path: Path) -> TextTokenizer:
    """Load a Hugging Face tokenizer from a local folder (explicit loader; does I/O).

    Raises:
        TokenizerUnavailableError: when ``transformers`` is not installed or the folder holds
            no tokenizer files.
    """
    if importlib.util.find_spec("transformers") is None:
        raise TokenizerUnavailableError(
            f"tokenizer files configured at {path}, but the 'transformers' package is not "
            "installed; install it or unset the tokenizer path to use the request's count"
        )
    if not path.is_dir():
        raise TokenizerUnavailableError(f"tokenizer folder {path} does not exist")
    transformers: Any = importlib.import_module("transformers")
    try:
        tokenizer: TextTokenizer = transformers.AutoTokenizer.from_pretrained(
            str(path), local_files_only=True
        )
    except (OSError, ValueError) as error:
        raise TokenizerUnavailableError(f"no usable tokenizer in {path}: {error}") from error
    return tokenizer


def load_tokenizer(path: str | Path) -> Callable[[str], int]:
    """Load a local Hugging Face tokenizer and return a text → token-count function.

    Raises:
        TokenizerUnavailableError: as :func:`load_hf_tokenizer`.
    """
    tokenizer = load_hf_tokenizer(Path(path))

    def count_tokens(text: str) -> int:
        return len(tokenizer.encode(text))

    return count_tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptTokenCounter:
    """Counts a request's prompt tokens: exactly from text when a tokenizer is set.

    Special tokens the tokenizer adds (BOS and the like) are counted, as the engine sees them.
    """

    context_tokens: int
    """The served model's context window in tokens."""
    tokenizer: TextTokenizer | None = None
    """The model's tokenizer; None means trust the given count."""

    def __post_init__(self) -> None:
        """Validate the context window."""
        if self.context_tokens < 2:
            raise ValueError(f"context_tokens must be ≥ 2, got {self.context_tokens}")

    @property
    def exact(self) -> bool:
        """Whether counts come from the tokenizer rather than the request."""
        return self.tokenizer is not None

    def count(
        self,
        *,
        text: str | None = None,
        given_tokens: int | None = None,
        max_output_tokens: int | None = None,
    ) -> int:
        """Return the validated prompt length.

        With a tokenizer and ``text`` the count is exact; otherwise ``given_tokens`` is used.

        Raises:
            TokenCountError: when no count can be had, or the count is impossible.
        """
        if self.tokenizer is not None and text is not None:
            prompt_tokens = len(self.tokenizer.encode(text))
        elif given_tokens is not None:
            prompt_tokens = given_tokens
        else:
            raise TokenCountError("request has neither a token count nor text to tokenize")
        return check_token_counts(
            prompt_tokens, context_tokens=self.context_tokens, max_output_tokens=max_output_tokens
        )

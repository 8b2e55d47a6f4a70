"""Validation of ``POST /v1/completions`` bodies for ``greenserve sim-engine`` (pure).

Accepts what vLLM accepts for one completion: ``prompt`` as text, a list of token ids, or
a one-element list of either; ``max_tokens`` (default 16, the OpenAI default); ``stream``;
``stream_options`` (``include_usage``, ``continuous_usage_stats``); ``n`` only 1. Unknown
fields (``ignore_eos``, ``temperature``…) are accepted and ignored: the engine model has no
end-of-sequence, so every request generates exactly ``max_tokens`` tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

__all__ = ["CHARS_PER_TOKEN", "DEFAULT_MAX_TOKENS", "CompletionParams", "parse_completion_request"]

CHARS_PER_TOKEN: Final = 4.0
"""Characters per token used to size a text prompt (the usual English rule of thumb for
BPE tokenizers); clients that know the exact count send token ids instead."""

DEFAULT_MAX_TOKENS: Final = 16


@dataclass(frozen=True, slots=True, kw_only=True)
class CompletionParams:
    """One validated completion request."""

    prompt_tokens: int
    max_tokens: int
    stream: bool = False
    include_usage: bool = False
    continuous_usage: bool = False

    def usage(self, completion_tokens: int) -> dict[str, int]:
        """OpenAI ``usage`` object after ``completion_tokens`` tokens."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": self.prompt_tokens + completion_tokens,
        }


def _prompt_tokens(prompt: Any) -> int | None:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        return max(1, round(len(prompt) / CHARS_PER_TOKEN)) if prompt else None
    if isinstance(prompt, list) and prompt and all(type(t) is int and t >= 0 for t in prompt):
        return len(prompt)
    return None


def parse_completion_request(body: Any, served_model: str) -> CompletionParams | tuple[int, str]:
    """Validate a body; returns the parameters or (HTTP status, message)."""
    if not isinstance(body, dict):
        return 400, "the body must be a JSON object"
    if body.get("model") != served_model:
        return 404, f"The model `{body.get('model')}` does not exist."
    prompt_tokens = _prompt_tokens(body.get("prompt"))
    if prompt_tokens is None:
        return 400, "prompt must be non-empty text or a list of token ids (one prompt)"
    max_tokens = body.get("max_tokens", DEFAULT_MAX_TOKENS)
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
    if type(max_tokens) is not int or max_tokens < 1:
        return 400, "max_tokens must be a positive integer"
    if body.get("n", 1) != 1:
        return 400, "only n=1 is supported"
    stream = bool(body.get("stream", False))
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        return 400, "stream_options must be an object"
    if options and not stream:
        return 400, "stream_options is only allowed when stream is true"
    return CompletionParams(
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        stream=stream,
        include_usage=bool(options.get("include_usage", False)),
        continuous_usage=bool(options.get("continuous_usage_stats", False)),
    )

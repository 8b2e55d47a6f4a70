"""Settings of the HTTP gateway (OpenAI-compatible ingress)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from proto.subjects import valid_token
from shared.settings.section import _Section

__all__ = ["GatewaySettings"]


class GatewaySettings(_Section):
    """HTTP ingress (OpenAI-compatible); the models it serves are ``classifier.models``."""

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    """TCP port of the OpenAI-compatible API; 0 picks a free one (tests)."""
    request_timeout_s: float = Field(default=300.0, gt=0.0)
    """Longest silence (no chunk, completion or error) before the gateway answers 504."""
    publish_timeout_s: float = Field(default=5.0, gt=0.0)
    """Longest wait for JetStream to store a request before the gateway answers 503."""
    max_body_bytes: int = Field(default=1 << 20, ge=1024)
    """Larger bodies are refused with 413 before they are read (NATS max payload is 1 MiB)."""
    default_max_tokens: int = Field(default=16, ge=1)
    """Output cap when a completion request names none (OpenAI's default for completions)."""
    chat_default_max_tokens: int = Field(default=1024, ge=1)
    """Output cap when a chat request names none. OpenAI's chat API has no small default (an
    answer runs to its end), so 16 would cut nearly every answer short with ``finish_reason``
    ``length``; 1024 holds a long answer while keeping a forgotten limit from tying up a
    batch slot for a whole context. A vLLM worker stops at end-of-sequence first, so a short
    answer costs only its own tokens; a simulated worker has no end-of-sequence and generates
    exactly this many. Like ``default_max_tokens`` it is cut to what the prompt leaves of
    ``classifier.max_context_tokens`` (docs/gateway.md)."""
    max_tokens_limit: int = Field(default=1 << 20, ge=1, le=1 << 20)
    """``max_tokens`` above this is absurd and refused with 400."""
    placeholder_token: str = " tok"
    """Text sent for each generated token when the worker streams no text (simulated GPUs)."""
    chars_per_token: float = Field(default=4.0, gt=0.0)
    """Prompt-length estimate (characters per token) when no tokenizer is configured."""
    cells: tuple[str, ...] = ()
    """Namespaces of the cells this gateway spreads requests over, each request to the one
    it has the fewest requests in flight with (``services/gateway/cells.py``); empty: its
    own stack only. ``greenserve up --cells N`` gives every cell's gateway all N."""
    cell_retry_s: float = Field(default=5.0, gt=0.0)
    """How long a cell whose ingress stream did not answer is skipped."""
    # Hardening (docs/gateway.md, "Limits and keys"): the ceiling, timeouts and API keys.
    max_in_flight: int = Field(default=0, ge=0)
    """Completion requests held at once; more get 429 ``overloaded`` with ``Retry-After``.
    0: half the process's open-file limit (each held request holds a client socket; at the
    limit ``accept`` fails for everyone, health checks included)."""
    overload_retry_after_s: float = Field(default=1.0, gt=0.0)
    """``Retry-After`` of an ``overloaded`` 429 (1 s: the header's smallest whole unit)."""
    idle_timeout_s: float = Field(default=30.0, gt=0.0)
    """A connection without a complete request head this long after it opened (or after its
    last response) is closed: idle keep-alive and slow headers alike (aiohttp's keep-alive
    timer). Above the keep-alive expiry of httpx (5 s) and aiohttp's client (15 s), so the
    server never closes a connection those clients are about to reuse."""
    body_timeout_s: float = Field(default=30.0, gt=0.0)
    """Longest time to receive a request's body; a slower one gets 408 ``body_timeout``."""
    api_keys_file: Path | None = None
    """OpenAI-style API keys (one per line, or JSON/YAML with per-key limits; hashes or
    keys: ``shared/security/api_keys.py``); ``None``: no key needed (the local demo).
    ``greenserve up --secure`` generates one."""
    api_key_requests_per_min: int = Field(default=0, ge=0)
    """Per-key rate limit for keys whose entry names none; 0: none (the ceiling still holds)."""

    @model_validator(mode="after")
    def _default_within_limit(self) -> GatewaySettings:
        defaults = {
            "default_max_tokens": self.default_max_tokens,
            "chat_default_max_tokens": self.chat_default_max_tokens,
        }
        for name, value in defaults.items():
            if value > self.max_tokens_limit:
                raise ValueError(f"{name} must not exceed max_tokens_limit")
        return self

    @model_validator(mode="after")
    def _cells_are_namespaces(self) -> GatewaySettings:
        bad = [ns for ns in self.cells if not valid_token(ns)]
        if bad:
            raise ValueError(f"cells {bad} are not namespaces ([A-Za-z0-9_-]{{1,128}})")
        if len(set(self.cells)) != len(self.cells):
            raise ValueError(f"a cell is named twice in {list(self.cells)}")
        return self

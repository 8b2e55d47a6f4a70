"""Gateway settings: a frozen dataclass read from ``GREENSERVE_GATEWAY__*`` variables.

Until ``shared.config.Settings`` grows a ``gateway`` section, the gateway reads its own
knobs from the environment with the same naming rule as every other setting
(``GREENSERVE_<SECTION>__<FIELD>``). The models it serves are the classifier's
(``Settings.classifier.models``), so the two never disagree.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proto.messages import MAX_TOKENS_LIMIT

__all__ = ["ENV_PREFIX", "GatewayConfig"]

ENV_PREFIX = "GREENSERVE_GATEWAY__"


@dataclass(frozen=True, slots=True, kw_only=True)
class GatewayConfig:
    """Everything the HTTP ingress needs besides the shared settings."""

    host: str = "127.0.0.1"
    port: int = 8080
    """TCP port of the OpenAI-compatible API; 0 picks a free one (tests)."""
    request_timeout_s: float = 300.0
    """Longest silence (no chunk, completion or error) before the gateway answers 504."""
    publish_timeout_s: float = 5.0
    """Longest wait for JetStream to store a request before the gateway answers 503."""
    max_body_bytes: int = 1 << 20
    """Larger bodies are refused with 413 before they are read (NATS max payload is 1 MiB)."""
    default_max_tokens: int = 16
    """Output cap when a request names none (OpenAI's default for completions)."""
    max_tokens_limit: int = MAX_TOKENS_LIMIT
    """``max_tokens`` above this is absurd and refused with 400."""
    placeholder_token: str = " tok"
    """Text sent for each generated token when the worker streams no text (simulated GPUs)."""
    chars_per_token: float = 4.0
    """Prompt-length estimate (characters per token) when no tokenizer is configured."""

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"gateway port {self.port} is not a TCP port")
        if self.request_timeout_s <= 0 or self.publish_timeout_s <= 0:
            raise ValueError("gateway timeouts must be positive")
        if self.max_body_bytes < 1024:
            raise ValueError("gateway max_body_bytes must be at least 1024")
        if not 1 <= self.default_max_tokens <= self.max_tokens_limit <= MAX_TOKENS_LIMIT:
            raise ValueError("need 1 <= default_max_tokens <= max_tokens_limit <= protocol limit")
        if self.chars_per_token <= 0:
            raise ValueError("gateway chars_per_token must be positive")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> GatewayConfig:
        """Read ``GREENSERVE_GATEWAY__<FIELD>`` variables (case-insensitive field names).

        Raises:
            ValueError: an unknown field or a value of the wrong type.
        """
        env = os.environ if environ is None else environ
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for key, raw in env.items():
            if not key.upper().startswith(ENV_PREFIX):
                continue
            name = key[len(ENV_PREFIX) :].lower()
            if name not in fields:
                raise ValueError(f"{key}: the gateway has no setting {name!r}")
            kind = type(getattr(cls(), name))
            try:
                values[name] = kind(raw)
            except ValueError as exc:
                raise ValueError(f"{key}={raw!r} is not a valid {kind.__name__}") from exc
        return cls(**values)

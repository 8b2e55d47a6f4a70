"""The OpenAI-compatible completions API as vLLM speaks it: request bodies, SSE, token counts.

Pure helpers shared by the ``vllm`` backend (client side) and ``greenserve sim-engine``
(server side). Token counting is exact when the server reports usage on every chunk
(``stream_options.continuous_usage_stats``, a vLLM extension: cumulative
``completion_tokens``); otherwise each choice chunk counts as its ``token_ids`` (when
returned) or one token (a chat stream's opening role chunk none), and the final usage
chunk tops the count up. The shapes are those of the recorded vLLM responses under
``tests/fixtures/vllm/``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from proto.messages import ClassifiedRequest

__all__ = [
    "DONE",
    "FILL_TOKEN_ID",
    "GREEDY_TEMPERATURE",
    "SseEvent",
    "TokenCounter",
    "completion_body",
    "error_message",
    "parse_sse_line",
]

FILL_TOKEN_ID: Final = 1000
"""Token id repeated to build a prompt of known length when only its count is known (trace
replay). Any id below every supported vocabulary size and outside the special tokens of
Llama-2/3 and Qwen works; the content does not matter for timing."""

DONE: Final = "[DONE]"


GREEDY_TEMPERATURE: Final = 0.0
"""Temperature of a request that sets none. Greedy, not vLLM's (or OpenAI's) 1.0: trace
replay sends no sampling fields and relies on a repeatable output for a given prompt."""


def completion_body(request: ClassifiedRequest, served_model: str) -> dict[str, Any]:
    """``POST /v1/completions`` body for one request, streamed with per-chunk usage.

    The client's sampling fields (``Request.sampling``) are passed as vLLM names them, only
    those it set, so vLLM's own defaults hold for the rest; ``temperature`` defaults to
    :data:`GREEDY_TEMPERATURE`.
    """
    req = request.request
    prompt: str | list[int] = (
        req.prompt if req.prompt is not None else [FILL_TOKEN_ID] * request.input_tokens
    )
    body: dict[str, Any] = {
        "model": served_model,
        "prompt": prompt,
        "max_tokens": req.max_tokens,
        "ignore_eos": req.ignore_eos,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "temperature": GREEDY_TEMPERATURE,
    }
    if req.sampling is not None:
        # Sampling's field names are OpenAI's, which vLLM's completions API shares; an unset
        # field is left out rather than sent as null, so vLLM's default applies to it.
        fields = msgspec.structs.asdict(req.sampling)
        body.update({name: value for name, value in fields.items() if value is not None})
    return body


SseEvent = dict[str, Any]


def parse_sse_line(line: bytes) -> SseEvent | str | None:
    """One line of a server-sent-event stream: a JSON event, :data:`DONE`, or ``None``.

    Raises:
        ValueError: for a ``data:`` line that is not JSON.
    """
    text = line.decode("utf-8", errors="replace").strip()
    if not text.startswith("data:"):
        return None  # blank separators, comments, event/id fields
    data = text[len("data:") :].strip()
    if data == DONE:
        return DONE
    event = json.loads(data)
    if not isinstance(event, dict):
        return {"error": f"SSE event is not a JSON object: {data[:200]}"}
    return event


def error_message(event: SseEvent) -> str | None:
    """The error an event reports (vLLM's old ``object: error`` or new ``error: {}`` form)."""
    if event.get("object") == "error":
        return str(event.get("message", "engine error"))
    error = event.get("error")
    if isinstance(error, dict):
        return str(error.get("message", "engine error"))
    if error:
        return str(error)
    return None


@dataclass(slots=True)
class TokenCounter:
    """Counts output tokens of one streamed completion."""

    counted: int = 0
    finish_reason: str | None = None

    def update(self, event: SseEvent) -> int:
        """Tokens this event adds."""
        choices = event.get("choices") or []
        usage = event.get("usage")
        for choice in choices:
            reason = choice.get("finish_reason")
            if reason:
                self.finish_reason = str(reason)
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            return self._advance_to(usage["completion_tokens"])
        new = sum(_choice_tokens(choice) for choice in choices)
        self.counted += new
        return new

    def _advance_to(self, total: int) -> int:
        new = max(0, total - self.counted)
        self.counted += new
        return new


def _choice_tokens(choice: dict[str, Any]) -> int:
    """Tokens one choice chunk carries when the server reports no usage on it: its
    ``token_ids`` when returned, none for a chat stream's opening role chunk (vLLM sends
    ``delta: {role, content: ""}`` before the first token), else one."""
    token_ids = choice.get("token_ids")
    if isinstance(token_ids, list):
        return len(token_ids)
    delta = choice.get("delta")
    if isinstance(delta, dict) and "role" in delta and not delta.get("content"):
        return 0
    return 1

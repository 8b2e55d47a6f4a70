"""OpenAI request validation and response rendering: pure functions, no I/O.

The body is validated once, here; what passes becomes a :class:`ParsedRequest` and then a
``proto.messages.Request``. Field names and response shapes follow OpenAI's
``/v1/completions`` and ``/v1/chat/completions``, with two extension fields for simulated
runs: ``prompt_tokens`` (the prompt's length when the client knows it) and ``ignore_eos``
(generate exactly ``max_tokens``; false unless the request sets it). The sampling fields
travel in ``Request.sampling`` (:mod:`services.gateway.sampling`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final, Literal

import msgspec

from proto.messages import Request, Sampling
from services.gateway.errors import ApiError
from services.gateway.request_options import CHAT_ROLES, check_options
from services.gateway.sampling import parse_sampling

__all__ = [
    "CLAMP_CHARS_PER_TOKEN",
    "CO2_HEADER",
    "ENERGY_HEADER",
    "Endpoint",
    "ParsedRequest",
    "chat_prompt",
    "completion_body",
    "footprint_headers",
    "parse_body",
    "stream_chunk",
    "to_request",
    "usage",
]

Endpoint = Literal["completion", "chat"]
CLAMP_CHARS_PER_TOKEN: Final = 3.0
"""Characters per token assumed when only the text is known and a default limit must fit
the context: fewer than the usual 4 of English text, so the cut errs towards leaving
room."""
ENERGY_HEADER: Final = "X-GreenServe-Energy-Joules"
"""Response header: the request's GPU energy (J), as ``usage.gpu_energy_joules``."""
CO2_HEADER: Final = "X-GreenServe-CO2-Grams"
"""Response header: the request's CO2 (g), as ``usage.co2_grams`` (absent when unknown)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ParsedRequest:
    """A validated OpenAI request, reduced to what GreenServe serves."""

    endpoint: Endpoint
    model: str
    prompt: str | None
    prompt_tokens: int | None
    """Known prompt length: the ``prompt_tokens`` extension or a token-id prompt."""
    max_tokens: int
    stream: bool
    include_usage: bool
    ignore_eos: bool
    sampling: Sampling | None = None
    limit_given: bool = True
    """Whether the client set ``max_tokens`` (or ``max_completion_tokens``); a default limit
    is shortened to fit the context (:func:`to_request`)."""
    """The client's sampling fields; ``None`` when it set none (the engine's defaults)."""


def _int(body: dict[str, Any], name: str, low: int, high: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError("invalid_type", f"{name} must be an integer", param=name)
    if not low <= value <= high:
        raise ApiError(
            "invalid_value", f"{name} must be in [{low}, {high}], got {value}", param=name
        )
    return value


def _bool(body: dict[str, Any], name: str, param: str | None = None) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ApiError("invalid_type", f"{param or name} must be a boolean", param=param or name)
    return value


def _token_ids(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value)
    )


def _prompt(body: dict[str, Any]) -> tuple[str | None, int | None]:
    """Text prompt, or the length of a token-id prompt (OpenAI accepts both)."""
    value = body.get("prompt")
    if value is None or isinstance(value, str):
        return value, None
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
        return value[0], None
    if _token_ids(value):
        return None, len(value)
    # The openai client types a batch of token-id prompts as a list of lists: one is one prompt.
    if isinstance(value, list) and len(value) == 1 and _token_ids(value[0]):
        return None, len(value[0])
    if isinstance(value, list) and len(value) > 1:
        raise ApiError("unsupported", "one prompt per request (batched prompts)", param="prompt")
    raise ApiError("invalid_type", "prompt must be a string or a list of token ids", param="prompt")


def _content(message: Any, index: int) -> tuple[str, str]:
    param = f"messages[{index}]"
    if not isinstance(message, dict):
        raise ApiError("invalid_type", f"{param} must be an object", param=param)
    role = message.get("role")
    if not isinstance(role, str) or not role:
        raise ApiError("invalid_type", f"{param}.role must be a string", param=f"{param}.role")
    if role not in CHAT_ROLES:
        raise ApiError(
            "invalid_value",
            f"{param}.role must be one of {', '.join(sorted(CHAT_ROLES))}, got {role!r}",
            param=f"{param}.role",
        )
    content = message.get("content")
    if content is None or isinstance(content, str):
        return role, content or ""
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise ApiError("unsupported", "only text content parts", param=f"{param}.content")
            text = part.get("text")
            if not isinstance(text, str):
                raise ApiError("invalid_type", "text part without text", param=f"{param}.content")
            texts.append(text)
        return role, "".join(texts)
    raise ApiError("invalid_type", f"{param}.content must be a string", param=f"{param}.content")


def chat_prompt(messages: list[tuple[str, str]]) -> str:
    """Render chat messages as one prompt (``role: content`` lines, then ``assistant:``).

    A stand-in for the model's chat template: the simulated engine only needs the length.
    """
    lines = [f"{role}: {content}" for role, content in messages]
    return "\n".join([*lines, "assistant:"])


def parse_body(
    raw: bytes,
    endpoint: Endpoint,
    *,
    models: frozenset[str],
    default_max_tokens: int,
    chat_default_max_tokens: int,
    max_tokens_limit: int,
) -> ParsedRequest:
    """Validate an HTTP body for ``endpoint``.

    ``default_max_tokens`` caps a completion that names no limit, ``chat_default_max_tokens``
    a chat completion (``GatewaySettings`` says why they differ).

    Raises:
        ApiError: bad JSON, wrong types, values out of range, unknown model, missing prompt.
    """
    try:
        body = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise ApiError("invalid_json", f"body is not valid JSON: {exc}") from None
    except UnicodeDecodeError as exc:
        # msgspec checks a string's UTF-8 only when it builds the str, and raises this, not
        # DecodeError: bad bytes inside a JSON string would otherwise escape as a 500.
        raise ApiError(
            "invalid_json", f"body is not valid UTF-8 JSON (byte {exc.start}: {exc.reason})"
        ) from None
    except RecursionError:
        # msgspec gives up on deep nesting (~1,000 levels) with RecursionError, not DecodeError:
        # a small body of brackets would otherwise escape as a plain-text 500.
        raise ApiError("invalid_json", "body is nested too deeply") from None
    if not isinstance(body, dict):
        raise ApiError("invalid_type", "body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError("missing_field", "model is required (a string)", param="model")
    if model not in models:
        raise ApiError("model_not_found", f"the model {model!r} does not exist", param="model")
    for name in ("n", "best_of"):
        _int(body, name, 1, 1)  # one choice per request
    if _bool(body, "echo"):
        raise ApiError("unsupported", "echo is not supported", param="echo")
    check_options(body, endpoint)
    sampling = parse_sampling(body)
    prompt_tokens = _int(body, "prompt_tokens", 1, max_tokens_limit)
    max_tokens = _int(body, "max_tokens", 1, max_tokens_limit)
    if endpoint == "chat":
        completion_tokens = _int(body, "max_completion_tokens", 1, max_tokens_limit)
        if completion_tokens is not None and max_tokens is not None:
            # OpenAI's own answer: with two limits, which one the client meant is a guess.
            raise ApiError(
                "invalid_parameter_combination",
                "Setting 'max_tokens' and 'max_completion_tokens' at the same time is not "
                "supported.",
                param="max_tokens",
            )
        max_tokens = completion_tokens or max_tokens
        limit_given = max_tokens is not None
        max_tokens = max_tokens or chat_default_max_tokens
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError("missing_field", "messages must be a non-empty list", param="messages")
        prompt: str | None = chat_prompt([_content(m, i) for i, m in enumerate(messages)])
    else:
        limit_given = max_tokens is not None
        prompt, id_count = _prompt(body)
        prompt_tokens = prompt_tokens or id_count
        if prompt is None and prompt_tokens is None:
            raise ApiError("missing_field", "prompt is required", param="prompt")
    stream = _bool(body, "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise ApiError("invalid_type", "stream_options must be an object", param="stream_options")
    if options is not None and not stream:
        # As OpenAI does: include_usage on a plain response would be silently meaningless.
        raise ApiError(
            "invalid_value",
            "stream_options is only allowed when stream is true",
            param="stream_options",
        )
    return ParsedRequest(
        endpoint=endpoint,
        model=model,
        prompt=prompt,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens or default_max_tokens,
        stream=stream,
        include_usage=_bool(options or {}, "include_usage", "stream_options.include_usage"),
        ignore_eos=_bool(body, "ignore_eos"),
        sampling=sampling,
        limit_given=limit_given,
    )


def to_request(
    parsed: ParsedRequest,
    *,
    request_id: str,
    reply_subject: str,
    client_id: str,
    sent_at: float,
    chars_per_token: float | None,
    context_tokens: int | None = None,
) -> Request:
    """The bus message for ``parsed``.

    Args:
        parsed: the validated body.
        request_id: unique id (``<client id>.<request id>`` is the ``Nats-Msg-Id``).
        reply_subject: where replies for this request go.
        client_id: the gateway instance's client id.
        sent_at: wall time of arrival.
        chars_per_token: estimate the prompt's length from its characters when the
            classifier has no tokenizer; ``None`` sends the text for it to count.
        context_tokens: the classifier's context (``classifier.max_context_tokens``): a
            default limit (the client set none) is cut to what the prompt leaves of it, as
            vLLM does, rather than have the classifier refuse a long prompt as ``too_long``
            for a limit the client never asked for. The prompt's length is estimated at
            :data:`CLAMP_CHARS_PER_TOKEN` when the classifier counts it.
    """
    prompt_tokens = parsed.prompt_tokens
    if prompt_tokens is None and chars_per_token is not None and parsed.prompt is not None:
        prompt_tokens = max(1, math.ceil(len(parsed.prompt) / chars_per_token))
    max_tokens = parsed.max_tokens
    if context_tokens is not None and not parsed.limit_given:
        known = prompt_tokens
        if known is None and parsed.prompt is not None:
            known = math.ceil(len(parsed.prompt) / CLAMP_CHARS_PER_TOKEN)
        if known is not None and known < context_tokens:
            max_tokens = min(max_tokens, context_tokens - known)
    return Request(
        request_id=request_id,
        model=parsed.model,
        reply_subject=reply_subject,
        sent_at=sent_at,
        max_tokens=max_tokens,
        prompt_tokens=prompt_tokens,
        prompt=parsed.prompt,
        ignore_eos=parsed.ignore_eos,
        stream=parsed.stream,
        client_id=client_id,
        sampling=parsed.sampling,
    )


def usage(
    prompt_tokens: int,
    completion_tokens: int,
    energy_j: float | None = None,
    co2_g: float | None = None,
) -> dict[str, Any]:
    """OpenAI's ``usage`` object, with the request's GPU energy and CO2 as extension fields.

    ``gpu_energy_joules`` is the request's share of its instance's energy (each iteration's
    energy split equally over the tokens it produced); ``co2_grams`` that energy at the
    worker region's carbon intensity when the request finished, ``null`` while the worker
    has no forecast. OpenAI clients keep unknown ``usage`` fields (``usage.model_extra`` in
    the Python SDK), so the extension breaks none of them.
    """
    body: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if energy_j is not None:
        body["gpu_energy_joules"] = round(energy_j, 6)
        body["co2_grams"] = None if co2_g is None else round(co2_g, 9)
    return body


def footprint_headers(energy_j: float, co2_g: float | None) -> dict[str, str]:
    """The same figures as response headers (non-streaming answers: a stream's headers go
    out before the request has run, so a stream carries them in its usage chunk only)."""
    headers = {ENERGY_HEADER: f"{energy_j:.6f}"}
    if co2_g is not None:
        headers[CO2_HEADER] = f"{co2_g:.9f}"
    return headers


def _object_id(parsed: ParsedRequest, request_id: str) -> str:
    return f"{'chatcmpl' if parsed.endpoint == 'chat' else 'cmpl'}-{request_id}"


def completion_body(
    parsed: ParsedRequest,
    request_id: str,
    created: int,
    text: str,
    finish_reason: str,
    token_usage: dict[str, Any],
) -> dict[str, Any]:
    """A non-streaming response."""
    if parsed.endpoint == "chat":
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": None,
            "finish_reason": finish_reason,
        }
        kind = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        kind = "text_completion"
    return {
        "id": _object_id(parsed, request_id),
        "object": kind,
        "created": created,
        "model": parsed.model,
        "choices": [choice],
        "usage": token_usage,
    }


def stream_chunk(
    parsed: ParsedRequest,
    request_id: str,
    created: int,
    *,
    text: str | None,
    finish_reason: str | None = None,
    role: bool = False,
    token_usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One SSE event's JSON; ``token_usage`` alone makes the final usage-only chunk."""
    chat = parsed.endpoint == "chat"
    choices: list[dict[str, Any]] = []
    if token_usage is None:
        if chat:
            delta: dict[str, Any] = {"role": "assistant"} if role else {}
            if text is not None:
                delta["content"] = text
            choices = [{"index": 0, "delta": delta, "logprobs": None}]
        else:
            choices = [{"index": 0, "text": text or "", "logprobs": None}]
        choices[0]["finish_reason"] = finish_reason
    chunk: dict[str, Any] = {
        "id": _object_id(parsed, request_id),
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": created,
        "model": parsed.model,
        "choices": choices,
    }
    if token_usage is not None or parsed.include_usage:
        # OpenAI: with include_usage every chunk has the field, null until the last.
        chunk["usage"] = token_usage
    return chunk

"""OpenAI fields the gateway does not serve, checked so that no client is silently misled.

The bus request carries a prompt, a length, ``ignore_eos`` and the sampling fields of
:mod:`services.gateway.sampling`; nothing else reaches an engine. A field that does not
change the answer's shape (``user``, ``tools`` with ``tool_choice`` auto) is accepted and
ignored, its type checked as OpenAI checks it. A field whose answer would have a *shape*
the client relies on and the gateway cannot give (log-probabilities, a forced tool call,
JSON-constrained output) is refused with 400 ``unsupported`` naming it: a client reading
``choice.logprobs.content`` or ``json.loads(message.content)`` would otherwise fail later,
far from the cause.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from services.gateway.errors import ApiError

__all__ = ["CHAT_ROLES", "check_options"]

CHAT_ROLES: Final = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
"""The message roles OpenAI's chat API accepts."""


def _user(body: dict[str, Any]) -> None:
    if body.get("user") is not None and not isinstance(body["user"], str):
        raise ApiError("invalid_type", "user must be a string", param="user")


def _logprobs(body: dict[str, Any], endpoint: Literal["completion", "chat"]) -> None:
    value = body.get("logprobs")
    if endpoint == "completion":
        # An integer (0 included) asks for the sampled tokens' log-probabilities.
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, int):
            raise ApiError("invalid_type", "logprobs must be an integer", param="logprobs")
    else:
        if value is not None and not isinstance(value, bool):
            raise ApiError("invalid_type", "logprobs must be a boolean", param="logprobs")
        if not value:
            return
    raise ApiError("unsupported", "log-probabilities are not available", param="logprobs")


def _response_format(body: dict[str, Any]) -> None:
    value = body.get("response_format")
    if value is None:
        return
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise ApiError(
            "invalid_type", "response_format must be an object with a type", param="response_format"
        )
    if value["type"] != "text":
        raise ApiError(
            "unsupported",
            f"response_format {value['type']!r} cannot be guaranteed; only 'text'",
            param="response_format",
        )


def _tool_choice(body: dict[str, Any]) -> None:
    # "auto" (or "none") lets the model answer in text, which is what it does here; a forced
    # call ("required" or a named function) promises tool_calls this gateway never returns.
    choice = body.get("tool_choice")
    if choice is None or choice in ("auto", "none"):
        return
    raise ApiError("unsupported", "only tool_choice 'auto' or 'none'", param="tool_choice")


def check_options(body: dict[str, Any], endpoint: Literal["completion", "chat"]) -> None:
    """Refuse optional fields that are mistyped or that ask for what cannot be given.

    Raises:
        ApiError: ``invalid_type`` / ``invalid_value`` for a malformed field,
            ``unsupported`` for one the gateway cannot honour (``param`` names it).
    """
    _user(body)
    _logprobs(body, endpoint)
    if endpoint == "chat":
        _response_format(body)
        _tool_choice(body)

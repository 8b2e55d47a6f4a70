"""Gateway errors in OpenAI's error format, and how upstream error codes map to HTTP.

Every refusal has one code, used three times: in the JSON body (``error.code``), in the
HTTP status (the tables below) and in ``greenserve_errors_total{service="gateway"}``.
"""

from __future__ import annotations

import math
from typing import Any, Final

__all__ = ["GATEWAY_STATUS", "UPSTREAM_STATUS", "ApiError", "status_of_upstream"]

GATEWAY_STATUS: Final = {
    "invalid_json": 400,
    "invalid_type": 400,
    "invalid_value": 400,
    "invalid_parameter_combination": 400,
    "missing_field": 400,
    "unsupported": 400,
    # Bad bytes: a Content-Encoding the gateway does not decode, or bytes that do not
    # decode under the one named (a "gzip" body that is not gzip).
    "unsupported_encoding": 400,
    "invalid_encoding": 400,
    "invalid_api_key": 401,
    "model_not_found": 404,
    "location_not_found": 404,
    "body_timeout": 408,
    "body_too_large": 413,
    "rate_limit_exceeded": 429,
    "overloaded": 429,
    "unavailable": 503,
    "timeout": 504,
}
"""Codes the gateway itself decides, with their HTTP status."""

UPSTREAM_STATUS: Final = {
    "malformed": 400,
    "missing_prompt": 400,
    "no_tokenizer": 400,
    "bad_prompt": 400,
    "too_long": 400,
    "kv_capacity": 400,
    # The classifier could not classify this request as sent (e.g. the oracle predictor
    # needs ignore_eos): resending it unchanged fails again, so it is the client's to fix.
    "unclassifiable": 400,
    "unknown_model": 404,
    # No pool of the plan serves the model (the classifier's answer): OpenAI's code and status.
    "model_not_found": 404,
    "internal": 500,
    "no_plan": 503,
    "no_route": 503,
}
"""``ErrorReply.code`` from the services behind the bus → HTTP status (others: 502)."""

_TYPES: Final = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    408: "invalid_request_error",
    # OpenAI's type for a requests-per-minute 429 (its ``code`` says which limit).
    429: "requests",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
}


def status_of_upstream(code: str) -> int:
    """HTTP status for an ``ErrorReply`` code; 502 for a code this gateway does not know."""
    return UPSTREAM_STATUS.get(code, 502)


class ApiError(Exception):
    """A request the gateway answers with an OpenAI-style error body."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        param: str | None = None,
        status: int = 0,
        retry_after_s: float | None = None,
    ):
        self.code = code
        self.message = message
        self.param = param
        self.status = status or GATEWAY_STATUS.get(code) or status_of_upstream(code)
        self.retry_after_s = retry_after_s
        """When the client may try again (a 429); sent as ``Retry-After``."""
        super().__init__(f"{code}: {message}")

    def headers(self) -> dict[str, str]:
        """``Retry-After`` in whole seconds (rounded up, at least 1: HTTP has no smaller
        unit) and ``retry-after-ms``, which the ``openai`` client reads first."""
        if self.retry_after_s is None:
            return {}
        return {
            "Retry-After": str(max(1, math.ceil(self.retry_after_s))),
            "retry-after-ms": str(max(1, math.ceil(self.retry_after_s * 1000))),
        }

    @property
    def error_type(self) -> str:
        """OpenAI's error ``type``: client mistakes vs. server trouble."""
        return _TYPES.get(self.status, "server_error" if self.status >= 500 else "api_error")

    def body(self) -> dict[str, Any]:
        """The JSON body OpenAI clients parse (``{"error": {...}}``)."""
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }

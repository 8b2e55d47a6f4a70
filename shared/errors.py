"""Errors shared by services; each carries the code used in error replies and counters."""

from __future__ import annotations

__all__ = ["GreenServeError", "RequestRejectedError"]


class GreenServeError(Exception):
    """Base of every GreenServe error."""


class RequestRejectedError(GreenServeError):
    """A request is invalid or cannot be served; it gets an ErrorReply with ``code``."""

    def __init__(self, code: str, reason: str) -> None:
        self.code = code
        self.reason = reason
        super().__init__(f"{code}: {reason}")

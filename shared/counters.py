"""Counters every service shares (Prometheus client registry; exported in issue 7's /metrics)."""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter

__all__ = ["ERRORS", "MESSAGES"]

ERRORS: Final = Counter(
    "greenserve_errors_total",
    "Messages rejected or failed, by service and reason",
    ["service", "code"],
)
"""Every error reply or dropped message increments this, labelled by its reason code."""

MESSAGES: Final = Counter(
    "greenserve_messages_total", "Messages handled, by service and kind", ["service", "kind"]
)

"""Structured logging: one line per event, key=value or JSON."""

from __future__ import annotations

import json
import logging
import sys
import time

__all__ = ["setup_logging"]


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload = {
            "ts": round(record.created, 6),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        service = getattr(record, "service", None)
        if service:
            payload["service"] = service
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return json.dumps(payload)


def setup_logging(service: str, level: str = "INFO", as_json: bool = False) -> None:
    """Configure the root logger once for a service process."""
    handler = logging.StreamHandler(sys.stderr)
    if as_json:
        handler.setFormatter(_JsonFormatter())
    else:
        fmt = f"%(asctime)s %(levelname)s {service} %(name)s: %(message)s"
        formatter = logging.Formatter(fmt)
        formatter.converter = time.gmtime
        handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("nats").setLevel(logging.WARNING)

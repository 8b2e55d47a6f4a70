"""OpenTelemetry: a tracer per service, context carried in NATS headers.

Off by default (no exporter, near-zero cost); ``telemetry.otlp_endpoint`` turns on OTLP/HTTP
export. W3C trace context travels in NATS message headers from ingress to the worker, so
one request is one trace across services.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

from opentelemetry import context, propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

__all__ = [
    "extract_context",
    "inject_headers",
    "request_attributes",
    "setup_tracing",
    "span_from_headers",
]


def request_attributes(request_id: str) -> dict[str, str]:
    """Span attributes of a request: the id its client knows, and the client when scoped.

    Inside the stack a bound request's id is ``<client id>.<request id>``; a trace shows
    ``request.id`` as the client (and the gateway's span) knows it, plus ``client.id``.
    """
    client, _, own = request_id.rpartition(".")
    return {"request.id": own, "client.id": client} if client else {"request.id": own}


def setup_tracing(service: str, otlp_endpoint: str | None) -> TracerProvider | None:
    """Install a tracer provider exporting to ``otlp_endpoint``; ``None`` leaves tracing off.

    Returns the provider so the caller can ``shutdown()`` it (flushes spans) on exit.
    """
    if not otlp_endpoint:
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    provider = TracerProvider(resource=Resource.create({"service.name": f"greenserve-{service}"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp_endpoint)))
    trace.set_tracer_provider(provider)
    return provider


def inject_headers(headers: dict[str, str] | None = None) -> dict[str, str]:
    """Return NATS headers carrying the current trace context (adds to ``headers``)."""
    carrier: dict[str, str] = dict(headers or {})
    propagate.inject(carrier)
    return carrier


def extract_context(headers: Mapping[str, str] | None) -> context.Context:
    """Trace context carried by a NATS message's headers (empty when none)."""
    return propagate.extract(dict(headers or {}))


@contextlib.contextmanager
def span_from_headers(
    tracer: trace.Tracer, name: str, headers: Mapping[str, str] | None, **attributes: str
) -> Iterator[trace.Span]:
    """Start a consumer span that continues the trace in ``headers``."""
    ctx = extract_context(headers)
    attrs = {"messaging.system": "nats", **attributes}
    with tracer.start_as_current_span(
        name, context=ctx, kind=trace.SpanKind.CONSUMER, attributes=attrs
    ) as span:
        yield span

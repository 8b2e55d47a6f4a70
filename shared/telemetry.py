"""OpenTelemetry: a tracer per service, context carried in NATS headers.

Off by default (no exporter, near-zero cost); ``telemetry.otlp_endpoint``, or else the
standard ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT`` variables,
turn on OTLP/HTTP export; ``OTEL_SERVICE_NAME`` names the service (default
``greenserve-<service>``). W3C trace context travels in NATS message headers from ingress
to the worker, so one request is one trace across services.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Mapping
from urllib.parse import urlsplit

from opentelemetry import context, propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

__all__ = [
    "extract_context",
    "inject_headers",
    "otlp_traces_endpoint",
    "record_batch_span",
    "request_attributes",
    "setup_tracing",
    "span_context_of",
    "span_from_headers",
]


def request_attributes(request_id: str) -> dict[str, str]:
    """Span attributes of a request: the id its client knows, and the client when scoped.

    Inside the stack a bound request's id is ``<client id>.<request id>``; a trace shows
    ``request.id`` as the client (and the gateway's span) knows it, plus ``client.id``.
    """
    client, _, own = request_id.rpartition(".")
    return {"request.id": own, "client.id": client} if client else {"request.id": own}


TRACES_PATH = "/v1/traces"
"""Path of OTLP/HTTP trace export, appended to a collector's base URL."""


def otlp_traces_endpoint(
    configured: str | None, environ: Mapping[str, str] = os.environ
) -> str | None:
    """The OTLP/HTTP traces URL to export to, or ``None`` (tracing off).

    ``configured`` (``telemetry.otlp_endpoint``, ``greenserve up --otlp-endpoint``) wins,
    then ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (used as is, as the OpenTelemetry spec
    says), then ``OTEL_EXPORTER_OTLP_ENDPOINT`` (a base URL). A base URL, one with no
    path, gets ``/v1/traces``, so ``http://collector:4318`` and the full URL both work.

    Raises:
        ValueError: the URL is not http(s) with a host.
    """
    traces = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    url = (configured or "").strip() or traces or base
    if not url:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"OTLP endpoint {url!r} is not an http(s) URL with a host")
    if url == traces:
        return url
    return url if parts.path.rstrip("/") else url.rstrip("/") + TRACES_PATH


def setup_tracing(service: str, otlp_endpoint: str | None) -> TracerProvider | None:
    """Install a tracer provider exporting to ``otlp_endpoint`` or the ``OTEL_*`` endpoint
    (:func:`otlp_traces_endpoint`); neither leaves tracing off.

    The resource's ``service.name`` is ``OTEL_SERVICE_NAME`` when set, else
    ``greenserve-<service>``; ``greenserve.process`` always names the process, so spans of
    a stack that shares one service name still say where they came from.

    Returns the provider so the caller can ``shutdown()`` it (flushes spans) on exit.

    Raises:
        ValueError: the endpoint is not an http(s) URL.
    """
    endpoint = otlp_traces_endpoint(otlp_endpoint)
    if endpoint is None:
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    name = os.environ.get("OTEL_SERVICE_NAME", "").strip() or f"greenserve-{service}"
    resource = Resource.create({"service.name": name, "greenserve.process": service})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
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


def span_context_of(carrier: Mapping[str, str] | None) -> trace.SpanContext:
    """The span context a carrier (NATS headers, ``ClassifiedRequest.trace``) names; an
    invalid one when it names none."""
    return trace.get_current_span(extract_context(carrier)).get_span_context()


def record_batch_span(
    tracer: trace.Tracer,
    name: str,
    headers: Mapping[str, str] | None,
    carried: Iterable[Mapping[str, str]],
    *,
    start_ns: int,
    attributes: Mapping[str, str | int] | None = None,
    error: BaseException | None = None,
) -> trace.Span | None:
    """Record the span of an internal message that carries many requests (a batch); return
    it, or ``None`` when nothing it carries is traced.

    A batch is no request of its own, so its span starts no trace: it joins the trace of
    the sender's span when the message's headers name one, else the first traced request
    it carries, and links to every other traced request it carries (OpenTelemetry span
    links), so each request's trace shows the batch that moved it. The span covers
    ``start_ns`` to now; ``error`` marks it failed, with the reason.
    """
    contexts = [span_context_of(carrier) for carrier in carried]
    traced = [c for c in contexts if c.is_valid]
    own = span_context_of(headers)
    parent = own if own.is_valid else (traced[0] if traced else None)
    if parent is None:
        return None
    linked: dict[int, trace.SpanContext] = {}
    for c in traced:
        if c.span_id != parent.span_id:
            linked.setdefault(c.span_id, c)
    span = tracer.start_span(
        name,
        context=trace.set_span_in_context(trace.NonRecordingSpan(parent)),
        kind=trace.SpanKind.CONSUMER,
        links=[trace.Link(c) for c in linked.values()],
        start_time=start_ns,
        attributes={
            "messaging.system": "nats",
            "messaging.batch.message_count": len(contexts),
            **(attributes or {}),
        },
    )
    if error is not None:
        span.record_exception(error)
        span.set_status(trace.StatusCode.ERROR, f"{type(error).__name__}: {error}")
    span.end()
    return span

"""Where traces go (settings, ``--otlp-endpoint``, the standard ``OTEL_*`` variables) and
how a batch message's span joins the traces of the requests it carries."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from shared.telemetry import inject_headers, otlp_traces_endpoint, record_batch_span

BASE = "OTEL_EXPORTER_OTLP_ENDPOINT"
TRACES = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"


@pytest.mark.parametrize(
    ("configured", "environ", "expected"),
    [
        (None, {}, None),
        ("http://c:4318", {}, "http://c:4318/v1/traces"),
        ("http://c:4318/", {}, "http://c:4318/v1/traces"),
        ("http://c:4318/v1/traces", {BASE: "http://other:4318"}, "http://c:4318/v1/traces"),
        (None, {BASE: "http://c:4318"}, "http://c:4318/v1/traces"),
        (None, {BASE: "http://b:4318", TRACES: "http://t:4318/x"}, "http://t:4318/x"),
        (None, {TRACES: "http://t:4318"}, "http://t:4318"),  # the spec: used as is
        ("", {BASE: " "}, None),
    ],
)
def test_the_endpoint_comes_from_settings_then_the_standard_variables(
    configured: str | None, environ: dict[str, str], expected: str | None
) -> None:
    """Test the order (settings or flag, then the traces variable, then the base one) and
    that a base URL gets the OTLP/HTTP traces path."""
    assert otlp_traces_endpoint(configured, environ) == expected


@pytest.mark.parametrize("url", ["c:4318", "grpc://c:4317", "http://"])
def test_an_endpoint_that_is_not_http_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="not an http"):
        otlp_traces_endpoint(url, {})


def _tracing() -> tuple[trace.Tracer, InMemorySpanExporter]:
    provider = TracerProvider()  # this test's own, not the process-global one
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test"), exporter


def _request_carrier(tracer: trace.Tracer, name: str) -> tuple[dict[str, str], trace.SpanContext]:
    with tracer.start_as_current_span(name) as span:
        return inject_headers(), span.get_span_context()


def _ids(contexts: Iterable[trace.SpanContext]) -> list[tuple[int, int]]:
    return [(c.trace_id, c.span_id) for c in contexts]


def test_a_batch_joins_its_first_request_and_links_the_others() -> None:
    """Test that a batch of three traced requests and one untraced is recorded in the first
    traced request's trace, as a child of its span, linking the two others, and that a
    handler's error marks it failed with the reason."""
    tracer, exporter = _tracing()
    made = [_request_carrier(tracer, f"classify {i}") for i in range(3)]
    carriers, contexts = [c for c, _ in made], [x for _, x in made]
    failure = RuntimeError("store down")
    span = record_batch_span(
        tracer,
        "scheduler SubmitBatch",
        None,
        [{}, *carriers],
        start_ns=1,
        error=failure,
    )
    assert span is not None
    (batch,) = [s for s in exporter.get_finished_spans() if s.name == "scheduler SubmitBatch"]
    assert batch.context.trace_id == contexts[0].trace_id
    assert batch.parent is not None
    assert batch.parent.span_id == contexts[0].span_id
    assert _ids(link.context for link in batch.links) == _ids(contexts[1:])
    assert batch.attributes is not None
    assert batch.attributes["messaging.batch.message_count"] == 4
    assert batch.status.status_code == trace.StatusCode.ERROR
    assert batch.status.description == "RuntimeError: store down"


def test_a_batch_sent_inside_a_span_joins_that_span() -> None:
    """Test that the sender's context in the headers wins: the batch is its child and
    links every request it carries."""
    tracer, exporter = _tracing()
    made = [_request_carrier(tracer, f"r{i}") for i in range(2)]
    carriers, contexts = [c for c, _ in made], [x for _, x in made]
    headers, sender = _request_carrier(tracer, "sender")
    assert record_batch_span(tracer, "b", headers, carriers, start_ns=1) is not None
    (batch,) = [s for s in exporter.get_finished_spans() if s.name == "b"]
    assert batch.parent is not None
    assert batch.parent.span_id == sender.span_id
    assert _ids(link.context for link in batch.links) == _ids(contexts)


def test_a_batch_of_untraced_requests_records_no_span() -> None:
    """Test that an empty pull or a batch of untraced requests starts no trace at all."""
    tracer, exporter = _tracing()
    assert record_batch_span(tracer, "pull", {}, [], start_ns=1) is None
    assert record_batch_span(tracer, "pull", None, [{}, {"other": "x"}], start_ns=1) is None
    assert not exporter.get_finished_spans()

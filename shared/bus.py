"""NATS and JetStream helpers: connection, the durable ingress stream, typed request/reply.

Handlers registered with :func:`serve` receive decoded, validated messages; a payload that
fails validation gets an ``ErrorReply`` (when the sender asked for a reply) and a counter,
never a crash and never a retry.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import msgspec
import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import BadRequestError, NotFoundError
from opentelemetry import trace

from proto.codec import DecodeError, decode, encode
from proto.messages import ErrorReply
from proto.subjects import Subjects, valid_token
from shared.config import NatsSettings
from shared.counters import ERRORS, MESSAGES
from shared.loops import retry
from shared.security.secrets import read_secret
from shared.telemetry import inject_headers, record_batch_span, span_from_headers

__all__ = [
    "HOPS_HEADER",
    "HOPS_KEY",
    "add_hops",
    "connect_nats",
    "ensure_ingress_stream",
    "ingress_stream_config",
    "parse_hops",
    "publish",
    "request",
    "retry_on_timeout",
    "serve",
    "tracing_active",
]

logger = logging.getLogger(__name__)

SETUP_RETRY_S = 60.0
"""How long a service's start-up keeps asking JetStream (streams, consumers) while its API
times out: a server busy syncing its file store answers late, not never."""

JS_SUBJECTS_OVERLAP = 10065
"""JetStream API error code: a stream with overlapping subjects already exists."""

TRACEPARENT = "traceparent"
"""W3C trace-context header: a message that carries it continues a trace."""

HOPS_HEADER = "Gs-Hops"
"""Opt-in per-hop timing (``greenserve bench control-plane --hops``): a request published
with this header collects ``name=wall seconds`` stamps at each hop. It rides the ingress
message's headers, then :data:`HOPS_KEY` in ``ClassifiedRequest.trace`` through the queue,
and the completion's headers back to the client. Absent, no hop looks at the clock."""
HOPS_KEY = "gs-hops"
"""The stamps' key in ``ClassifiedRequest.trace`` (not ``traceparent``: no span starts)."""

In = TypeVar("In", bound=msgspec.Struct)

Carries = Callable[[In, "msgspec.Struct | None"], Iterable[Mapping[str, str]]]
"""The trace carriers of the requests a batch message brought (or, a pull, its reply took)."""


def add_hops(carrier: Mapping[str, str], **stamps: float) -> dict[str, str]:
    """``carrier`` (a ``ClassifiedRequest.trace``) with ``stamps`` appended to its hops."""
    added = ",".join(f"{name}={at:.6f}" for name, at in stamps.items())
    before = carrier.get(HOPS_KEY, "")
    return {**carrier, HOPS_KEY: f"{before},{added}" if before else added}


def parse_hops(value: str) -> dict[str, float]:
    """Stamps by hop name; a hop passed twice (a requeued request) keeps its last stamp."""
    stamps: dict[str, float] = {}
    for item in value.split(","):
        name, _, at = item.partition("=")
        with contextlib.suppress(ValueError):
            stamps[name] = float(at)
    return stamps


Out = TypeVar("Out", bound=msgspec.Struct)


async def connect_nats(settings: NatsSettings, name: str) -> Client:
    """Connect to NATS with reconnects that never give up (a restarted server is normal).

    Every server of ``settings.url`` (a cluster's comma list) is a place to connect and to
    reconnect to; nats-py also learns the cluster's other nodes from the one it reaches.
    """

    async def on_error(exc: Exception) -> None:
        logger.warning("nats error: %s", exc)

    connected: list[Client] = []

    async def on_disconnect() -> None:
        # nats-py calls this on our own close() too; only a lost connection is news.
        if connected and connected[0].is_closed:
            logger.debug("nats connection closed")
            return
        logger.warning("nats disconnected")

    async def on_reconnect() -> None:
        logger.info("nats reconnected")

    options: dict[str, Any] = {
        "servers": settings.servers,
        "dont_randomize": settings.prefer_first,
        "name": name,
        "connect_timeout": settings.connect_timeout_s,
        "reconnect_time_wait": settings.reconnect_wait_s,
        "max_reconnect_attempts": settings.max_reconnect_attempts,
        "ping_interval": settings.ping_interval_s,
        "max_outstanding_pings": settings.max_outstanding_pings,
        "error_cb": on_error,
        "disconnected_cb": on_disconnect,
        "reconnected_cb": on_reconnect,
    }
    if settings.user:
        options["user"] = settings.user
        options["password"] = read_secret(settings.password, settings.password_file, "nats")
    # A user's replies come to its own inbox, which a secured server lets only it read.
    user = settings.user or urlsplit(settings.servers[0]).username
    if settings.inbox_prefix:
        options["inbox_prefix"] = settings.inbox_prefix
    elif user and valid_token(user):
        options["inbox_prefix"] = f"_INBOX.{user}"
    if settings.tls_ca_file is not None:
        options["tls"] = ssl.create_default_context(cafile=str(settings.tls_ca_file))
    client = await nats.connect(**options)
    connected.append(client)
    return client


_T = TypeVar("_T")


async def retry_on_timeout(
    call: Callable[[], Awaitable[_T]], what: str, *, within_s: float = SETUP_RETRY_S
) -> _T:
    """``call()`` again while it times out, backing off from 0.2 to 5 s, for ``within_s``.

    For idempotent set-up (creating a stream or consumer that may exist): a JetStream API
    request that timed out under load ended the service at start (seen in CI: the in-process
    stack's classifier, its stream_info unanswered in 5 s while the suite loaded the host).

    Raises:
        nats.errors.TimeoutError: still unanswered after ``within_s``.
    """

    def said(_error: BaseException, wait_s: float) -> None:
        logger.warning("%s timed out; asking again in %.1f s", what, wait_s)

    return await retry(
        call,
        nats.errors.TimeoutError,
        within_s=within_s,
        first_backoff_s=0.2,
        max_backoff_s=5.0,
        on_retry=said,
    )


async def ensure_ingress_stream(
    js: JetStreamContext,
    subjects: Subjects,
    max_age_s: float = 3600.0,
    *,
    within_s: float = SETUP_RETRY_S,
    replicas: int = 1,
) -> bool:
    """Create the ingress stream if missing: file-backed, work-queue retention; return
    whether this call created it.

    Work-queue retention deletes a message once acked, so an acked request is owned by the
    scheduler and an unacked one is redelivered to another classifier. ``duplicate_window``
    lets clients publish with ``Nats-Msg-Id`` and retry without creating duplicates. Asked
    again while JetStream's API times out (:func:`retry_on_timeout`), as every caller, a
    service starting beside a busy server, needs. The same call re-creates the stream when
    a NATS server comes back without its store (:mod:`shared.stream_keeper`). ``replicas``
    (``nats.replicas``) copies it onto as many nodes of a cluster; an existing stream with
    another count is left as it is, with a warning (changing it is an operator's move).
    """
    return await retry_on_timeout(
        lambda: _create_ingress_stream(js, subjects, max_age_s, replicas),
        "creating the ingress stream",
        within_s=within_s,
    )


async def _create_ingress_stream(
    js: JetStreamContext, subjects: Subjects, max_age_s: float, replicas: int
) -> bool:
    config = ingress_stream_config(subjects, max_age_s, replicas)
    with contextlib.suppress(NotFoundError):
        info = await js.stream_info(subjects.ingress_stream)
        found = info.config.num_replicas or 1
        if found != replicas and subjects.ingress_stream not in _WARNED_REPLICAS:
            _WARNED_REPLICAS.add(subjects.ingress_stream)
            logger.warning(
                "stream %s has %d replicas, not nats.replicas %d; left as it is",
                subjects.ingress_stream,
                found,
                replicas,
            )
        return False
    try:
        await js.add_stream(config)
    except BadRequestError as exc:
        if exc.err_code != JS_SUBJECTS_OVERLAP:
            raise
        # Two services creating the stream at once is fine; another stream owning the
        # subjects (an older version's name) is a deployment error worth saying plainly.
        try:
            await js.stream_info(subjects.ingress_stream)
        except NotFoundError:
            owner = await js.find_stream_name_by_subject(subjects.ingress_request)
            raise RuntimeError(
                f"the ingress subjects {subjects.ingress_wildcard} belong to JetStream stream "
                f"{owner!r}, not {subjects.ingress_stream!r} (left by an older GreenServe?); "
                "delete that stream or use another namespace"
            ) from exc
        return False
    return True


_WARNED_REPLICAS: set[str] = set()
"""Streams whose replica count was found to differ (the check runs each second: say it once)."""


def ingress_stream_config(
    subjects: Subjects, max_age_s: float = 3600.0, replicas: int = 1
) -> StreamConfig:
    """The ingress stream's one configuration (its owners create and re-create it so)."""
    return StreamConfig(
        name=subjects.ingress_stream,
        subjects=[subjects.ingress_wildcard],
        retention=RetentionPolicy.WORK_QUEUE,
        storage=StorageType.FILE,
        max_age=max_age_s,
        duplicate_window=min(120.0, max_age_s),
        num_replicas=replicas,
    )


async def publish(
    nc: Client, subject: str, message: msgspec.Struct, headers: dict[str, str] | None = None
) -> None:
    """Publish one message, carrying the current trace context."""
    await nc.publish(subject, encode(message), headers=inject_headers(headers))


async def request(
    nc: Client,
    subject: str,
    message: msgspec.Struct,
    reply_type: type[Out],
    timeout_s: float,
    headers: dict[str, str] | None = None,
) -> Out:
    """Send a request and decode the reply as ``reply_type``.

    Raises:
        DecodeError: the reply is malformed, or is an ErrorReply (its reason in the message).
        nats.errors.TimeoutError / NoRespondersError: nobody answered in time.
    """
    msg = await nc.request(
        subject, encode(message), timeout=timeout_s, headers=inject_headers(headers)
    )
    try:
        return decode(msg.data, reply_type)
    except DecodeError:
        error = decode(msg.data, ErrorReply)
        raise DecodeError(f"{error.service} answered {error.code}: {error.reason}") from None


async def serve(
    nc: Client,
    subject: str,
    kind: type[In],
    handler: Callable[[In, Msg], Awaitable[msgspec.Struct | None]],
    *,
    service: str,
    queue: str = "",
    carries: Carries[In] | None = None,
) -> Subscription:
    """Subscribe ``handler`` to ``subject`` with decoding, error replies and counters.

    A message that carries requests (a batch: submit, pull, requeue, dispatch batch) names
    them with ``carries(message, reply)``, the trace carriers of the requests it brought or
    took away. Its span then starts no trace of its own (a batch is no request): it is
    recorded after the handler, in the requests' traces with links to each of them
    (:func:`~shared.telemetry.record_batch_span`), and none at all when no request in it
    is traced (an empty pull).
    """

    received = MESSAGES.labels(service, kind.__name__)  # resolved once, not per message

    async def callback(msg: Msg) -> None:
        try:
            message = decode(msg.data, kind)
        except DecodeError as exc:
            ERRORS.labels(service, "malformed").inc()
            logger.warning("rejected malformed %s on %s: %s", kind.__name__, msg.subject, exc)
            if msg.reply:
                await _reply_error(msg, service, "malformed", str(exc))
            return
        received.inc()
        if carries is not None:
            result = await _handle_batch(handler, message, msg, service, carries)
        elif not tracing_active(msg.headers):
            result = await _handle_untraced(handler, message, msg, service)
        else:
            tracer = trace.get_tracer(f"greenserve.{service}")
            with span_from_headers(
                tracer,
                f"{service} {kind.__name__}",
                msg.headers,
                **{"messaging.destination.name": msg.subject},
            ) as span:
                try:
                    result = await handler(message, msg)
                except Exception as exc:  # handler boundary: log, count, answer, keep serving
                    span.record_exception(exc)
                    span.set_status(trace.StatusCode.ERROR)
                    await _handler_failed(msg, service, exc)
                    return
        if result is not None and msg.reply:
            await msg.respond(encode(result))

    return await nc.subscribe(subject, queue=queue, cb=callback)


def tracing_active(headers: Mapping[str, str] | None) -> bool:
    """Whether a span here could be recorded or carry a trace on.

    False when no tracer provider is installed (the no-op default) and the message brings
    no trace context: a span would then be a no-op that still costs a context attach, a
    generator context manager and a header extraction per message (``docs/performance.md``).
    """
    if headers and TRACEPARENT in headers:
        return True
    return _provider_installed()


PROVIDER_RECHECK_S = 1.0
"""How long "no tracer provider" is believed before asking OpenTelemetry again."""


@dataclass(slots=True)
class _ProviderCheck:
    installed: bool = False
    checked_at: float = float("-inf")
    """Monotonic time of the last check."""


_PROVIDER = _ProviderCheck()
"""Whether a tracer provider is installed. ``get_tracer_provider`` looks the provider up in
``os.environ`` on every call while none is installed (≈ 3 % of the request path's CPU,
py-spy). OpenTelemetry installs a provider at most once, so "installed" is final; "not
installed" is re-checked every :data:`PROVIDER_RECHECK_S`, which can only delay root spans
of messages without trace context right after a provider is installed."""


def _provider_installed() -> bool:
    if _PROVIDER.installed:
        return True
    now = time.monotonic()
    if now - _PROVIDER.checked_at >= PROVIDER_RECHECK_S:
        _PROVIDER.checked_at = now
        _PROVIDER.installed = not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    return _PROVIDER.installed


async def _handle_untraced(
    handler: Callable[[In, Msg], Awaitable[msgspec.Struct | None]],
    message: In,
    msg: Msg,
    service: str,
) -> msgspec.Struct | None:
    try:
        return await handler(message, msg)
    except Exception as exc:  # handler boundary: log, count, answer, keep serving
        await _handler_failed(msg, service, exc)
        return None


async def _handle_batch(
    handler: Callable[[In, Msg], Awaitable[msgspec.Struct | None]],
    message: In,
    msg: Msg,
    service: str,
    carries: Carries[In],
) -> msgspec.Struct | None:
    if not _provider_installed():  # no span could be recorded
        return await _handle_untraced(handler, message, msg, service)
    started = time.time_ns()
    result: msgspec.Struct | None = None
    failure: Exception | None = None
    try:
        result = await handler(message, msg)
    except Exception as exc:  # handler boundary: log, count, answer, keep serving
        failure = exc
    record_batch_span(
        trace.get_tracer(f"greenserve.{service}"),
        f"{service} {type(message).__name__}",
        msg.headers,
        carries(message, result),
        start_ns=started,
        attributes={"messaging.destination.name": msg.subject},
        error=failure,
    )
    if failure is not None:
        await _handler_failed(msg, service, failure)
    return result


async def _handler_failed(msg: Msg, service: str, exc: Exception) -> None:
    ERRORS.labels(service, "internal").inc()
    logger.exception("handler for %s failed", msg.subject, exc_info=exc)
    if msg.reply:
        await _reply_error(msg, service, "internal", f"{type(exc).__name__}: {exc}")


async def _reply_error(msg: Msg, service: str, code: str, reason: str) -> None:
    error = ErrorReply(code=code, reason=reason[:2048], service=service, at=time.time())
    await msg.respond(encode(error))

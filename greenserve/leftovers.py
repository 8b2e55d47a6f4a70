"""What a stopped stack still held, answered: no request ends in silence at ``down``.

``greenserve down`` stops the services first (SIGTERM: workers finish what runs within
their shutdown timeout, the classifier hands back what it had not classified) and then the
servers. Requests still waiting then are in three places only: the ingress stream
(published, never handed off), Redis ``queued`` (handed off, never placed) and Redis
``dispatched`` (placed or pulled, never ended). Before the servers stop, each of them that
no worker's ``ended`` record names gets ``ErrorReply(code="unavailable")`` on its client's
reply subject and on ``request.done.control``, and its message or record is deleted: the
client knows to send it again. Before this, ``down`` under load left such requests
unanswered (70 of 300 in one run).

A secured stack (``--secure``) is swept as its ``admin`` identity, whose password files the
state file names: the URLs it records carry loadgen (NATS) and monitor (Redis), which may
neither read the ingress stream and the queues nor delete from them.

A request is answered once, by its reply subject: one can be in the stream (its ack lost)
and in Redis at once. A request published after the stream was read is not seen; nothing
consumes the stream then, and ``up`` starts from an empty one.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path

import nats.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError
from redis.asyncio import Redis
from redis.exceptions import RedisError

from greenserve.local.state import StackState
from proto.codec import DecodeError, decode
from proto.keys import Keys
from proto.messages import Assignment, ClassifiedRequest, Request
from proto.subjects import Subjects
from services.classifier.ingress_identity import IngressRefusal, bind_request
from shared.bus import connect_nats
from shared.config import NatsSettings
from shared.replies import reply_error
from shared.security.secrets import read_secret, url_with_user
from shared.store import as_bytes

__all__ = ["LEFTOVER_CODE", "SERVICE", "Leftovers", "answer_leftovers", "as_admin"]

logger = logging.getLogger(__name__)

SERVICE = "down"
"""``ErrorReply.service`` of the answers: the operator's ``greenserve down``."""
LEFTOVER_CODE = "unavailable"
"""Their code: the stack went away; the same request may be sent again."""
REASON = "the stack was stopped before this request was served; send it again"
CONNECT_TIMEOUT_S = 3.0
"""How long ``down`` tries to reach a server before it gives up answering."""
FLUSH_EVERY = 256
"""Answers between two flushes: thousands at once overflow the client's send buffer."""
DELETES_IN_FLIGHT = 64
"""Stream message deletes sent at once."""
FLUSH_TIMEOUT_S = 5
"""How long the answers may take to leave (whole seconds: what ``Client.flush`` takes)."""


@dataclass(slots=True)
class Leftovers:
    """What :func:`answer_leftovers` found and did."""

    answered: list[str] = field(default_factory=list)
    """Request ids (scoped) answered ``unavailable``."""
    already_ended: int = 0
    """Records or messages of requests a worker had ended (deleted, not answered)."""
    unanswered: int = 0
    """Requests found but not answered (no reply subject allowed, or a send failed)."""
    error: str = ""
    """Why the sweep stopped early ("" when it ran through)."""


async def answer_leftovers(state: StackState) -> Leftovers:
    """Answer every request the stack at ``state`` still holds; return what was done.

    Never raises for an unreachable server: ``down`` goes on stopping, and says why.
    """
    out = Leftovers()
    try:
        state = as_admin(state)
    except (OSError, ValueError) as exc:
        out.error = f"{type(exc).__name__}: {exc}"
        logger.warning("could not read the admin credentials: %s", out.error)
        return out
    subjects, keys = Subjects(state.namespace), Keys(state.namespace)
    # One line per answered request is noise at shutdown: the caller reports the count.
    replies_log = logging.getLogger("shared.replies")
    level = replies_log.level
    replies_log.setLevel(max(level, logging.WARNING))
    nc: Client | None = None
    redis = state.redis_client(connect_timeout_s=CONNECT_TIMEOUT_S, read_timeout_s=10.0)
    try:
        nc = await connect_nats(_nats_settings(state), "greenserve-down")
        records = await _records(redis, keys)
        stream = await _stream_requests(nc.jetstream(), subjects)
        candidates = [req for req, _ in records] + [req for req, _ in stream]
        ended = await _ended_anywhere(redis, keys, [r.request_id for r in candidates])
        tried: set[str] = set()
        settled: set[str] = set()
        """Reply subjects answered: their records and messages can go."""
        for req, _ in [*records, *stream]:
            if req.request_id in ended:
                out.already_ended += 1
                settled.add(req.reply_subject)
            elif req.reply_subject not in tried:
                tried.add(req.reply_subject)
                if await _answer(nc, subjects, req):
                    out.answered.append(req.request_id)
                    settled.add(req.reply_subject)
                    if len(out.answered) % FLUSH_EVERY == 0:  # stay within the send buffer
                        await nc.flush(timeout=FLUSH_TIMEOUT_S)
                else:
                    out.unanswered += 1
        await nc.flush(timeout=FLUSH_TIMEOUT_S)
        # Only now forget them: an answer that did not go out leaves its record in place.
        await _forget(
            redis,
            nc.jetstream(),
            subjects,
            [(req, key) for req, key in records if req.reply_subject in settled],
            [(req, seq) for req, seq in stream if req.reply_subject in settled],
        )
    except (RedisError, OSError, nats.errors.Error, TimeoutError) as exc:
        out.error = f"{type(exc).__name__}: {exc}"
        logger.warning("could not answer what the stack still held: %s", out.error)
    finally:
        if nc is not None:
            with contextlib.suppress(nats.errors.Error, TimeoutError):
                await nc.close()
        await redis.aclose()
        replies_log.setLevel(level)
    return out


def as_admin(state: StackState) -> StackState:
    """``state`` connecting as its ``admin`` identity where it names admin's password files
    (a ``--secure`` stack), else ``state`` itself.

    Raises:
        OSError: a password file cannot be read.
        ValueError: a password file is empty.
    """
    nats_file, redis_file = state.admin_nats_password_file, state.admin_redis_password_file
    if nats_file is None or redis_file is None:
        return state
    nats_password = read_secret(None, Path(nats_file), "admin NATS password") or ""
    redis_password = read_secret(None, Path(redis_file), "admin Redis password") or ""
    return dataclasses.replace(
        state,
        nats_url=url_with_user(state.nats_url, "admin", nats_password),
        redis_url=url_with_user(state.redis_url, "admin", redis_password),
    )


def _nats_settings(state: StackState) -> NatsSettings:
    return NatsSettings(
        url=state.nats_url,
        connect_timeout_s=CONNECT_TIMEOUT_S,
        max_reconnect_attempts=0,
        tls_ca_file=state.tls_ca_file,
    )


async def _records(redis: Redis, keys: Keys) -> list[tuple[Request, str]]:
    """Requests in ``queued`` and ``dispatched``, each with the hash that holds it."""
    out: list[tuple[Request, str]] = []
    for raw in (await redis.hgetall(keys.queued)).values():
        with contextlib.suppress(DecodeError):
            out.append((decode(as_bytes(raw), ClassifiedRequest).request, keys.queued))
    for raw in (await redis.hgetall(keys.dispatched)).values():
        with contextlib.suppress(DecodeError):
            out.append((decode(as_bytes(raw), Assignment).request.request, keys.dispatched))
    return out


async def _stream_requests(js: JetStreamContext, subjects: Subjects) -> list[tuple[Request, int]]:
    """Requests still in the ingress stream (bound to their client), with their sequence.

    A message that is no valid request, or that the classifier would refuse, is not
    listed: the classifier answered nothing for it either, and has no safe reply subject.
    """
    try:
        info = await js.stream_info(subjects.ingress_stream)
    except NotFoundError:
        return []
    out: list[tuple[Request, int]] = []
    if info.state.messages == 0:
        return out
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        try:
            msg = await js.get_msg(subjects.ingress_stream, seq)
        except NotFoundError:
            continue  # acked (deleted) already: the stream has a gap there
        if msg.data is None or msg.subject is None:
            continue
        try:
            out.append((bind_request(subjects, msg.subject, decode(msg.data, Request)), seq))
        except (DecodeError, IngressRefusal):
            continue
    return out


async def _ended_anywhere(redis: Redis, keys: Keys, request_ids: list[str]) -> set[str]:
    """The ids among ``request_ids`` that some worker's ``ended`` record names."""
    if not request_ids:
        return set()
    ended_keys = [k async for k in redis.scan_iter(match=keys.ended_pattern)]
    if not ended_keys:
        return set()
    pipe = redis.pipeline(transaction=False)
    for key in ended_keys:
        pipe.zmscore(key, request_ids)
    found: set[str] = set()
    for scores in await pipe.execute():
        found.update(rid for rid, score in zip(request_ids, scores, strict=True) if score)
    return found


async def _answer(nc: Client, subjects: Subjects, request: Request) -> bool:
    if not request.reply_subject.startswith(subjects.client_prefix):
        return False  # never publish where a client should not have pointed us
    try:
        await reply_error(
            nc, subjects, service=SERVICE, code=LEFTOVER_CODE, reason=REASON, request=request
        )
    except nats.errors.Error as exc:
        logger.warning("could not answer %s: %s", request.request_id, exc)
        return False
    return True


async def _forget(
    redis: Redis,
    js: JetStreamContext,
    subjects: Subjects,
    records: list[tuple[Request, str]],
    stream: list[tuple[Request, int]],
) -> None:
    """Delete the answered (or ended) records and messages, so a restart acts on none."""
    if records:
        pipe = redis.pipeline(transaction=False)
        for req, key in records:
            pipe.hdel(key, req.request_id)
        await pipe.execute()
    # In bounded rounds: thousands of JetStream API requests at once time out.
    seqs = [seq for _, seq in stream]
    for start in range(0, len(seqs), DELETES_IN_FLIGHT):
        deletes = [
            js.delete_msg(subjects.ingress_stream, seq)
            for seq in seqs[start : start + DELETES_IN_FLIGHT]
        ]
        for result in await asyncio.gather(*deletes, return_exceptions=True):
            if isinstance(result, Exception) and not isinstance(result, NotFoundError):
                raise result

"""What enters the scheduler's queues, durably: new requests (store-new) and requeues.

A submitted request is in Redis before the classifier hears "accepted", so the ingress
message is acked only after that; and a request id is stored once however often it
arrives. :func:`store_new` does both for a whole batch in one atomic script call
(:data:`STORE_NEW_LUA`): it marks each id seen (:func:`seen_mark`) and stores the request,
and tells a redelivery from a client reusing an id and from a request its client cancelled
first. :func:`queue_again` takes requests back (unplaced, refused, orphaned, drained): the
in-memory queue first, then Redis as the recovery log.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable

from redis.exceptions import RedisError

from proto.codec import encode
from proto.messages import ClassifiedRequest
from services.scheduler.pool_queues import SchedulerState
from shared.lifecycle import ServiceContext

__all__ = [
    "CANCELLED_FIRST",
    "REUSED",
    "SEEN_CANCELLED",
    "SEEN_QUEUED",
    "SEEN_TTL_S",
    "STORED",
    "STORE_NEW_LUA",
    "UnconfirmedStores",
    "queue_again",
    "seen_mark",
    "store_new",
]

logger = logging.getLogger(__name__)

SEEN_TTL_S = 6 * 3600
STORED = 1
"""Store-new result of a request stored now."""
REUSED = 2
"""Store-new result of a request whose id its client already used for another message."""
CANCELLED_FIRST = 3
"""Store-new result of a new request whose client had cancelled it: seen, not stored."""
SEEN_QUEUED = 4
"""Store-new result of a request seen before with the same message and still queued."""
SEEN_CANCELLED = 5
"""Store-new result of a request seen before with the same message, not queued, and
cancelled by its client."""
UNCONFIRMED_TTL_S = 3600.0
"""How long a failed store is remembered: the ingress stream's ``max_age``, beyond which
no redelivery of its message can come."""
UNCONFIRMED_MAX = 200_000
"""At most this many remembered failed stores (an outage's worth at 3,000 req/s is more,
but those ids are settled again as their redeliveries come back)."""
STORE_NEW_LUA = """
local out = {}
local n = (#KEYS - 1) / 2
for i = 2, n + 1 do
  local id, payload, mark = ARGV[3 * i - 4], ARGV[3 * i - 3], ARGV[3 * i - 2]
  if redis.call('SET', KEYS[i], mark, 'NX', 'EX', ARGV[1]) then
    if redis.call('EXISTS', KEYS[n + i]) == 1 then
      out[i - 1] = 3
    else
      redis.call('HSET', KEYS[1], id, payload)
      out[i - 1] = 1
    end
  else
    local prev = redis.call('GET', KEYS[i])
    local queued = redis.call('HEXISTS', KEYS[1], id) == 1
    if prev == mark then
      if queued then out[i - 1] = 1 else out[i - 1] = 3 end
    else
      out[i - 1] = 0
      local seq, digest = string.match(mark, '^s(%d+):(%x+)')
      local pseq, pdigest = string.match(prev or '', '^s(%d+):(%x+)')
      if seq and pseq and seq ~= pseq and digest ~= pdigest then
        out[i - 1] = 2
      elseif queued then
        out[i - 1] = 4
      elseif redis.call('EXISTS', KEYS[n + i]) == 1 then
        out[i - 1] = 5
      end
    end
  end
end
return out
"""
"""Mark each request id of a batch seen and store the request, in one atomic step.

``KEYS`` = the ``queued`` hash, then one ``seen`` key per request, then one ``cancelled``
key per request; ``ARGV`` = the seen TTL, then id, payload and seen-mark per request. The
mark is ``s<ingress stream sequence>:<digest of the client's request>`` (``1`` when the
sequence is unknown), then ``|<token of this call and item>``: redis-py sends a command
again after a read timeout, and a script that had run finds its own mark and answers
what it answered the first time (1 or 3), not "seen" (a duplicate never queued in
memory). Returns per request 1 (stored now), 3 (new, but its client
cancelled it first: marked seen, not stored), 0 (already seen: a redelivery of the same
message, the same request published again, e.g. a retried publish the stream stored
twice, or nothing to tell them apart by), 4 or 5 (the same, and the request is still in
``queued``, or not queued and cancelled: what a redelivery after a store whose reply was
lost needs, :class:`UnconfirmedStores`) or 2 (already seen with another message *and*
another request: the client reused its id; not stored). A scheduler killed between mark
and store would otherwise leave a 'seen' mark without the request, and the redelivered
copy would be dropped as a duplicate. One script call per batch instead of one per
request: each call costs redis-py a command to pack and parse."""


def seen_mark(req: ClassifiedRequest) -> str:
    """The seen-mark of a request: its ingress sequence and a digest of the client's request.

    The digest covers the request as the client sent it (with its send time), so the same
    request published twice is told from a new one reusing the id.
    """
    if not req.ingress_seq:
        return "1"
    digest = hashlib.blake2b(encode(req.request), digest_size=12).hexdigest()
    return f"s{req.ingress_seq}:{digest}"


async def store_new(ctx: ServiceContext, requests: list[ClassifiedRequest]) -> list[int]:
    """Run :data:`STORE_NEW_LUA` over a batch; its result per request, in order.

    Raises:
        RedisError: nothing was confirmed; the caller must not ack (redelivery follows).
    """
    keys = ctx.keys
    token = secrets.token_hex(6)  # tells this call's own mark, should redis-py resend it
    seen_keys: list[str] = []
    cancel_keys: list[str] = []
    args: list[str | bytes | int] = [SEEN_TTL_S]
    for req in requests:
        rid = req.request.request_id
        seen_keys.append(keys.seen(rid))
        cancel_keys.append(keys.cancelled(rid))
        args += [rid, encode(req), f"{seen_mark(req)}|{token}-{len(seen_keys)}"]
    # EVAL, not a registered Script: a Script costs a SCRIPT EXISTS round trip first;
    # the body is short and Redis caches it by its digest.
    flags: list[int] = await ctx.redis.eval(
        STORE_NEW_LUA,
        1 + 2 * len(seen_keys),
        keys.queued,
        *seen_keys,
        *cancel_keys,
        *args,
    )
    return flags


class UnconfirmedStores:
    """Request ids whose store-new call failed in this process, until they come again.

    A store-new call that raised (a Redis timeout) may still have run: the request is
    marked seen and in ``queued``, but not in this scheduler's memory, and the classifier,
    told it failed, redelivers it. The redelivery then reads as a duplicate, was acked and
    the request never served until a restart reloaded ``queued``. A redelivery of an id
    noted here that is still in ``queued`` (:data:`SEEN_QUEUED`) is queued in memory
    instead. Only ids of this process's failed calls qualify: another ``queued`` request
    missing from memory is one being placed by the co-located router, and queueing it
    again would run it twice; a restarted scheduler has reloaded all of ``queued``.
    """

    def __init__(self, ttl_s: float = UNCONFIRMED_TTL_S, max_ids: int = UNCONFIRMED_MAX) -> None:
        """Remember each failed id ``ttl_s`` (monotonic seconds), ``max_ids`` at most."""
        self._ttl_s = ttl_s
        self._max_ids = max_ids
        self._failed: OrderedDict[str, float] = OrderedDict()

    def __len__(self) -> int:
        """Ids remembered."""
        return len(self._failed)

    def failed(self, request_ids: Iterable[str]) -> None:
        """Note the ids of a store-new call that raised."""
        now = time.monotonic()
        for rid in request_ids:
            self._failed[rid] = now
            self._failed.move_to_end(rid)
        while self._failed:
            oldest, at = next(iter(self._failed.items()))
            if now - at <= self._ttl_s and len(self._failed) <= self._max_ids:
                break
            del self._failed[oldest]

    def settle(self, request_ids: Iterable[str]) -> set[str]:
        """Forget these ids (a store-new call over them returned); those that were noted.

        Synchronous, so of two redeliveries of one id only the first is told it failed.
        """
        if not self._failed:
            return set()
        return {rid for rid in request_ids if self._failed.pop(rid, None) is not None}


async def queue_again(
    ctx: ServiceContext,
    state: SchedulerState,
    requests: list[ClassifiedRequest],
    on_ready: Callable[[str], Awaitable[None]],
) -> None:
    """Queue requests again, tell their pools, and move their records back to ``queued``."""
    # The in-memory queue is primary; Redis is the recovery log. Queue first, so a Redis
    # outage at this moment cannot drop a request that is being handed back.
    for req in requests:
        state.push(req)
    for pool_id in {req.pool_id for req in requests}:
        await on_ready(pool_id)
    if not requests:
        return
    queued = {req.request.request_id: encode(req) for req in requests}
    pipe = ctx.redis.pipeline(transaction=True)
    pipe.hset(ctx.keys.queued, mapping=queued)  # type: ignore[arg-type]
    pipe.hdel(ctx.keys.dispatched, *queued)
    try:
        await pipe.execute()
    except RedisError as exc:
        logger.warning("could not record %d re-queued requests in redis: %s", len(requests), exc)

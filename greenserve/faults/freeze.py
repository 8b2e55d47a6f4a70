"""Freeze scenarios (``freeze:<process>``): how long the process stays stopped, and the
answers it sends once woken.

The replay stops listening once every request has ended (on another worker, during the
freeze); a woken worker that answers one of them a second time does so after that, so the
scenario listens to its client's replies for the whole run (:class:`LateEndings`).
"""

from __future__ import annotations

import contextlib

from nats.aio.msg import Msg

from proto.codec import DecodeError, decode_any
from proto.messages import Completion, ErrorReply

__all__ = ["FREEZE_S", "FROZEN_CLIENT_ID", "LISTEN_AFTER_THAW_S", "LateEndings"]

FREEZE_S = 20.0
"""Wall seconds a ``freeze:<process>`` scenario keeps the process stopped (SIGSTOP, then
SIGCONT): far past ``router.worker_timeout_s``, so the router runs a frozen worker's
requests elsewhere and the worker, woken, must not answer them too. The stack recovers
without the frozen worker, as from ``drop:``, so recovery counts from the freeze."""
FROZEN_CLIENT_ID = "faults-freeze"
"""Client id of a freeze scenario's replay, so :class:`LateEndings` hears its replies."""
LISTEN_AFTER_THAW_S = 5.0
"""How long (wall) a freeze scenario keeps listening to its client's replies after the
SIGCONT: what the woken worker would answer a second time comes then, and the replay itself
stops listening once every request has ended (on the other worker, during the freeze)."""


class LateEndings:
    """Every ending sent to one client for the whole scenario, the thaw included."""

    def __init__(self) -> None:
        """Start with no endings heard."""
        self._endings: dict[str, list[object]] = {}

    async def on_reply(self, msg: Msg) -> None:
        """Note a completion or error (a chunk or anything undecodable is no ending)."""
        with contextlib.suppress(DecodeError):
            message = decode_any(msg.data)
            if isinstance(message, Completion | ErrorReply) and message.request_id:
                self._endings.setdefault(message.request_id, []).append(message)

    def duplicated(self) -> int:
        """Endings beyond each request's first, counted as the replay counts them: an exact
        repeat (a re-send after a NATS outage) is none."""
        return sum(
            sum(1 for e in endings[1:] if e != endings[0]) for endings in self._endings.values()
        )

"""When an ingress message whose hand-off failed comes back, and when it stops coming back.

A failed hand-off (Redis or the scheduler away) stored nothing for sure, so the message
is nak'ed for JetStream to deliver it again. The wait doubles from
``classifier.handoff_retry_first_s`` up to ``classifier.handoff_retry_max_s``: an outage of
any length is retried at least that often, and a long one does not turn into a storm of
redeliveries. The consumer has no delivery limit by default; a message is given up only by
the classifier itself, which then answers its client (``unavailable``) rather than leaving
it in the stream unanswered: once it is ``classifier.handoff_give_up_s`` old (before the
stream's ``max_age`` drops it), or on its last delivery when ``nats.max_deliver`` is set.
Before this, every nak waited 0.5 s and JetStream stopped after 20 deliveries, so a Redis
outage of about 10 s left requests in the stream, never delivered and never answered.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.config import Settings

__all__ = ["RedeliveryPolicy"]


@dataclass(frozen=True, slots=True)
class RedeliveryPolicy:
    """Backoff and give-up of one failed ingress message (pure)."""

    first_s: float
    """Wait before the second delivery."""
    max_s: float
    """Ceiling of the wait."""
    give_up_s: float
    """Age (since the stream stored it) at which a failing message is answered instead."""
    max_deliver: int = -1
    """The consumer's delivery limit; -1: none."""

    def __post_init__(self) -> None:
        """Refuse a policy that could never retry or wait."""
        if not 0.0 < self.first_s <= self.max_s:
            raise ValueError(f"need 0 < first_s <= max_s, got {self.first_s}, {self.max_s}")
        if self.give_up_s <= 0.0:
            raise ValueError(f"give_up_s must be positive, got {self.give_up_s}")
        if self.max_deliver == 0 or self.max_deliver < -1:
            raise ValueError(f"max_deliver must be -1 or >= 1, got {self.max_deliver}")

    @classmethod
    def from_settings(cls, settings: Settings) -> RedeliveryPolicy:
        """The policy the deployment's settings name."""
        cfg = settings.classifier
        return cls(
            first_s=cfg.handoff_retry_first_s,
            max_s=cfg.handoff_retry_max_s,
            give_up_s=cfg.handoff_give_up_s,
            max_deliver=settings.nats.max_deliver,
        )

    def delay_s(self, delivered: int) -> float:
        """Wait before the next delivery of a message delivered ``delivered`` times."""
        doublings = max(0, delivered - 1)
        if doublings >= 64:  # 2**64 × any first_s is past every ceiling; no float overflow
            return self.max_s
        return min(self.max_s, self.first_s * 2.0**doublings)

    def gives_up(self, delivered: int, age_s: float) -> bool:
        """Whether a message that failed again, delivered ``delivered`` times and ``age_s``
        old, is answered now: too old, or JetStream would not deliver it again."""
        if age_s >= self.give_up_s:
            return True
        return self.max_deliver != -1 and delivered >= self.max_deliver

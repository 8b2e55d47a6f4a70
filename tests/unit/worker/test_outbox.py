"""Client replies an outage or a partition may have swallowed are sent again once contact
is back, except those of requests the router revoked meanwhile."""

from __future__ import annotations

from services.worker.outbox import PENDING_MAX, OutboxEntry, ReplyOutbox


def _subjects(entries: list[OutboxEntry]) -> list[str]:
    return [e.subject for e in entries]


def _due(box: ReplyOutbox, now: float, confirmed_at: float = 0.0) -> list[OutboxEntry]:
    """What a shell that found no revocations would send at ``now`` (nothing if not due)."""
    if not box.observe(True, now, confirmed_at):
        return []
    return box.take_due({})[0]


def test_nothing_is_resent_while_in_contact() -> None:
    """Test that replies are only remembered while the worker is in contact."""
    box = ReplyOutbox(window_s=1.0, grace_s=1.5)
    for i in range(5):
        box.record(f"c.{i}", b"x", None, float(i))
        assert not box.observe(True, float(i), float(i))
    assert box.pending == 0
    assert not box.in_doubt


def test_an_outage_resends_from_before_the_last_confirmed_contact() -> None:
    """Test the re-send: what went out from ``window_s`` before the last heartbeat that
    reached the stack (not before the moment the loss was noticed, which can be seconds
    later), what was published while out of contact, and until the grace ends."""
    box = ReplyOutbox(window_s=1.0, grace_s=1.5)
    box.record("old", b"1", None, 0.0)  # more than window_s before the last contact
    box.record("recent", b"2", None, 1.5)
    box.record("unconfirmed", b"3", None, 2.5)  # after the last confirmed contact (1.2)
    # Noticed at 4.0, 2.8 s after the last heartbeat that got through: the old outbox,
    # which kept one window before the moment it noticed, lost "recent" and "unconfirmed".
    assert not box.observe(False, 4.0, confirmed_at=1.2)
    doubted = box.in_doubt
    box.record("during", b"4", {"h": "v"}, 4.5)
    assert not box.observe(False, 5.0, 1.2)
    assert not box.observe(True, 5.2, 5.1)  # back: wait for clients to resubscribe
    box.record("after", b"5", None, 5.5)  # before the grace ends: resent as well
    assert _due(box, 6.6) == []
    due = _due(box, 6.7)
    assert _subjects(due) == ["recent", "unconfirmed", "during", "after"]
    assert due[2].headers == {"h": "v"}
    assert box.pending == 0
    assert (doubted, box.in_doubt) == (True, False)
    assert _due(box, 7.0) == []  # once only
    box.record("later", b"6", None, 7.0)
    assert box.pending == 0


def test_replies_of_requests_revoked_after_their_acceptance_are_not_resent() -> None:
    """Test that the re-send drops every reply (chunks and ending) of a request the router
    revoked at or after this worker accepted it, keeps one revoked before (an earlier
    placement, taken back, then placed here again) and one whose subject is unknown, and
    counts the requests dropped once each."""
    box = ReplyOutbox(window_s=1.0, grace_s=0.5)
    box.owner("c.a", "s.a", accepted_at=1.0)
    box.owner("c.b", "s.b", accepted_at=1.0)
    box.owner("c.c", "s.c", accepted_at=5.0)
    box.observe(False, 2.0, confirmed_at=1.5)
    for subject in ("c.a", "c.b", "c.a", "c.c", "c.unknown"):
        box.record(subject, b"x", None, 2.5)
    box.observe(True, 3.0, 3.0)
    assert box.observe(True, 3.6, 3.0)
    revoked = {"s.a": 2.2, "s.c": 4.0}  # s.c was revoked before its acceptance here
    assert box.revoked_ids(revoked) == {"s.a"}
    due, dropped = box.take_due(revoked)
    assert _subjects(due) == ["c.b", "c.c", "c.unknown"]
    assert dropped == 1


def test_a_resend_that_could_not_read_the_revocations_stays_due() -> None:
    """Test that the re-send stays due (nothing sent, nothing dropped) until the shell
    has read the revocations and taken the replies."""
    box = ReplyOutbox(window_s=1.0, grace_s=0.5)
    box.observe(False, 1.0, 0.5)
    box.record("a", b"1", None, 1.2)
    assert not box.observe(True, 1.4, 1.4)
    assert box.observe(True, 2.0, 1.4)
    assert box.observe(True, 2.5, 1.4)  # the shell found Redis unreadable: still due
    assert box.pending == 1
    assert _subjects(box.take_due({})[0]) == ["a"]


def test_a_second_outage_before_the_resend_keeps_everything() -> None:
    """Test that losing contact again during the grace keeps the pending replies."""
    box = ReplyOutbox(window_s=1.0, grace_s=1.5)
    box.record("a", b"1", None, 0.0)
    box.observe(False, 0.1, 0.0)
    box.observe(True, 0.5, 0.5)
    box.record("b", b"2", None, 0.6)
    box.observe(False, 0.8, 0.5)
    box.record("c", b"3", None, 0.9)
    box.observe(True, 1.0, 1.0)
    assert _subjects(_due(box, 2.5)) == ["a", "b", "c"]


def test_the_outbox_holds_a_bounded_number_of_replies_during_an_outage() -> None:
    """Test that a long outage cannot grow the re-send list without bound."""
    outbox = ReplyOutbox()
    outbox.observe(False, 0.0, 0.0)
    for i in range(PENDING_MAX + 10):
        outbox.record("s", str(i).encode(), None, float(i))
    assert outbox.pending == PENDING_MAX
    due = _due(outbox, 1e9) + _due(outbox, 1e9 + 10.0)
    assert [e.payload for e in due[:1]] == [b"10"]  # the oldest went first

"""Client replies a NATS outage may have swallowed are sent again after the reconnect."""

from __future__ import annotations

from services.worker.outbox import PENDING_MAX, ReplyOutbox


def _subjects(entries: list) -> list[str]:  # type: ignore[type-arg]
    return [e.subject for e in entries]


def test_nothing_is_resent_while_the_connection_stays_up() -> None:
    """Test that replies are only remembered (for window_s) while connected."""
    box = ReplyOutbox(window_s=1.0, grace_s=1.5)
    for i in range(5):
        box.record(f"c.{i}", b"x", None, float(i))
        assert box.observe(True, float(i)) == []
    assert box.pending == 0


def test_an_outage_resends_the_last_window_and_what_was_published_during_it() -> None:
    """Test the re-send: the window before the outage, during it, and until the grace ends."""
    box = ReplyOutbox(window_s=1.0, grace_s=1.5)
    box.record("old", b"1", None, 0.0)  # more than window_s before the outage: not resent
    box.record("recent", b"2", None, 1.5)
    assert box.observe(False, 2.2) == []  # noticed down at 2.2
    box.record("during", b"3", {"h": "v"}, 2.5)
    assert box.observe(False, 3.0) == []
    assert box.observe(True, 3.2) == []  # back up: wait for clients to resubscribe
    box.record("after", b"4", None, 3.5)  # before the grace ends: resent as well
    assert box.observe(True, 4.6) == []
    due = box.observe(True, 4.7)
    assert _subjects(due) == ["recent", "during", "after"]
    assert due[1].headers == {"h": "v"}
    assert box.pending == 0
    assert box.observe(True, 5.0) == []  # once only
    box.record("later", b"5", None, 5.0)
    assert box.pending == 0


def test_a_second_outage_before_the_resend_keeps_everything() -> None:
    """Test that going down again during the grace keeps the pending replies."""
    box = ReplyOutbox(window_s=1.0, grace_s=1.5)
    box.record("a", b"1", None, 0.0)
    box.observe(False, 0.1)
    box.observe(True, 0.5)
    box.record("b", b"2", None, 0.6)
    box.observe(False, 0.8)
    box.record("c", b"3", None, 0.9)
    box.observe(True, 1.0)
    assert _subjects(box.observe(True, 2.5)) == ["a", "b", "c"]


def test_the_outbox_holds_a_bounded_number_of_replies_during_an_outage() -> None:
    """Test that a long outage cannot grow the re-send list without bound."""
    outbox = ReplyOutbox()
    outbox.observe(False, 0.0)
    for i in range(PENDING_MAX + 10):
        outbox.record("s", str(i).encode(), None, float(i))
    assert outbox.pending == PENDING_MAX
    due = outbox.observe(True, 1e9)
    due += outbox.observe(True, 1e9 + 10.0)
    assert [e.payload for e in due[:1]] == [b"10"]  # the oldest went first

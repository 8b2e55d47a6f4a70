"""The ingress sequence read from a JetStream ack subject, as nats-py reads it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from nats.aio.msg import Msg

from services.classifier.classify_message import stream_seq

seq = st.integers(min_value=1, max_value=2**63 - 1)
name = st.from_regex(r"[A-Za-z0-9_-]{1,12}", fullmatch=True)


def _msg(reply: str) -> Msg:
    return Msg(_client=None, subject="gs.v1.ingress.request", reply=reply)  # type: ignore[arg-type]


@given(name, name, seq, seq, seq)
def test_the_v1_ack_subject_gives_the_stream_sequence_nats_py_gives(
    stream: str, consumer: str, delivered: int, sseq: int, cseq: int
) -> None:
    """Test that the 9-token layout agrees with ``msg.metadata``."""
    msg = _msg(f"$JS.ACK.{stream}.{consumer}.{delivered}.{sseq}.{cseq}.1700000000000000000.3")
    assert stream_seq(msg) == msg.metadata.sequence.stream == sseq


@given(name, name, seq, seq, seq, st.booleans())
def test_the_v2_ack_subject_with_domain_gives_the_stream_sequence_nats_py_gives(
    stream: str, consumer: str, delivered: int, sseq: int, cseq: int, with_token: bool
) -> None:
    """Test that the domain + account-hash layout (11 or 12 tokens) agrees too."""
    reply = f"$JS.ACK._.ACCHASH.{stream}.{consumer}.{delivered}.{sseq}.{cseq}.1700000000000000000.0"
    msg = _msg(reply + (".rnd" if with_token else ""))
    assert stream_seq(msg) == msg.metadata.sequence.stream == sseq


@pytest.mark.parametrize(
    "reply", ["", "_INBOX.abc", "$JS.ACK.s.c.1.x.1.1.1", "$JS.ACK.s.c.1.2", "$JS.API.x.y.1.2.3.4.5"]
)
def test_a_reply_that_is_no_ack_subject_gives_zero(reply: str) -> None:
    """Test that a core NATS message (or a malformed ack subject) has no sequence."""
    assert stream_seq(_msg(reply)) == 0

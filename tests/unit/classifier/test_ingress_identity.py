"""The classifier binds a request's client id to its ingress subject (docs/security.md)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import msgspec
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from proto.codec import decode
from proto.messages import ErrorReply, Request, client_request_id, scoped_request_id
from proto.subjects import Subjects
from services.classifier.ingress_identity import (
    BAD_INGRESS_SUBJECT,
    BAD_REQUEST_ID,
    CLIENT_ID_MISMATCH,
    DUPLICATE_REQUEST_ID,
    IngressRefusal,
    admit_bound_request,
    bind_request,
    bound_client_id,
    error_reply_target,
    refuse_reused_id,
)
from shared.counters import ERRORS

S = Subjects("gs")


def _request(client_id: str | None, reply_to: str, request_id: str = "r1") -> Request:
    return Request(
        request_id=request_id,
        model="m",
        reply_subject=S.client_reply(reply_to, request_id),
        sent_at=1.0,
        max_tokens=8,
        prompt_tokens=8,
        client_id=client_id,
    )


def test_the_subject_names_the_client() -> None:
    """Test that ingress.client.<c> binds c, ingress.request binds none, others are refused."""
    assert bound_client_id(S, S.ingress_client("c-1")) == "c-1"
    assert bound_client_id(S, S.ingress_request) is None
    for bad in ("gs.v1.ingress.other", "gs.v1.ingress.client.a.b", "gs.v1.ingress.client."):
        with pytest.raises(IngressRefusal) as info:
            bound_client_id(S, bad)
        assert info.value.code == BAD_INGRESS_SUBJECT
        assert info.value.reply_subject is None  # nobody to answer: dead letters


def test_a_request_naming_its_own_client_is_bound_and_filled_in() -> None:
    """Test that a matching or absent client_id passes, the absent one filled from the subject.

    Either way the id is scoped by the client for the rest of the stack; nothing else changes.
    """
    same = _request("a", "a")
    bound = bind_request(S, S.ingress_client("a"), same)
    assert (bound.client_id, bound.request_id) == ("a", "a.r1")
    assert msgspec.structs.replace(bound, request_id="r1") == same
    filled = bind_request(S, S.ingress_client("a"), _request(None, "a"))
    assert (filled.client_id, filled.request_id) == ("a", "a.r1")


def test_two_clients_equal_ids_become_two_stack_wide_ids() -> None:
    """Test that a's and b's "r1" differ after binding, and each maps back to "r1"."""
    a = bind_request(S, S.ingress_client("a"), _request("a", "a"))
    b = bind_request(S, S.ingress_client("b"), _request("b", "b"))
    assert a.request_id != b.request_id
    assert client_request_id(a.request_id) == client_request_id(b.request_id) == "r1"
    # Client ids may hold '-' and '_', but not '.', so the scoped form is unambiguous.
    assert scoped_request_id("a-b", "c") != scoped_request_id("a", "b-c")
    assert client_request_id("r1") == "r1"  # the unbound ingress keeps ids as they are


@pytest.mark.parametrize("subject", [S.ingress_client("a"), S.ingress_request])
def test_a_client_id_with_a_dot_is_refused_as_a_bad_request_id(subject: str) -> None:
    """Test that a client cannot send an id in the scoped form (it could name another client)."""
    forged = msgspec.structs.replace(_request("a", "a"), request_id="b.r1")
    with pytest.raises(IngressRefusal) as info:
        bind_request(S, subject, forged)
    assert info.value.code == BAD_REQUEST_ID
    assert info.value.reply_subject == forged.reply_subject  # its own space: answered there
    outside = msgspec.structs.replace(forged, reply_subject=S.client_reply("b", "r1"))
    with pytest.raises(IngressRefusal) as info:
        bind_request(S, S.ingress_client("a"), outside)
    assert info.value.reply_subject is None  # never into another client's space


@pytest.mark.parametrize(
    ("client_id", "reply_to"), [("b", "b"), ("b", "a"), ("a", "b"), (None, "b")]
)
def test_a_request_naming_another_client_is_refused_to_its_sender(
    client_id: str | None, reply_to: str
) -> None:
    """Test that another client's id or reply space is client_id_mismatch, answered to a."""
    with pytest.raises(IngressRefusal) as info:
        bind_request(S, S.ingress_client("a"), _request(client_id, reply_to))
    assert info.value.code == CLIENT_ID_MISMATCH
    assert info.value.reply_subject == S.client_reply("a", "r1")


def test_a_reply_subject_must_be_inside_the_clients_space_not_just_share_its_prefix() -> None:
    """Test that client 'a' cannot use client 'ab''s replies (prefix without the dot)."""
    with pytest.raises(IngressRefusal):
        bind_request(S, S.ingress_client("a"), _request("a", "ab"))


def test_the_unbound_ingress_checks_nothing_about_the_client() -> None:
    """Test that ingress.request (admin-only on a secured stack) passes requests unchanged."""
    req = _request("b", "c")
    assert bind_request(S, S.ingress_request, req) is req


def test_a_malformed_payloads_error_goes_to_its_header_only_inside_the_senders_space() -> None:
    """Test that Gs-Reply is honoured only in the bound client's (or any client's) space."""
    own, other = S.client_reply("a", "r1"), S.client_reply("b", "r1")
    assert error_reply_target(S, S.ingress_client("a"), own) == own
    assert error_reply_target(S, S.ingress_client("a"), other) is None
    assert error_reply_target(S, S.ingress_request, other) == other
    assert error_reply_target(S, S.ingress_request, S.plan) is None
    assert error_reply_target(S, "gs.v1.ingress.x", own) is None
    assert error_reply_target(S, S.ingress_client("a"), None) is None


class _FakeNc:
    def __init__(self) -> None:
        self.published: list[tuple[str, bytes]] = []

    async def publish(self, subject: str, payload: bytes) -> None:
        self.published.append((subject, payload))


class _FakeMsg:
    def __init__(self, subject: str) -> None:
        self.subject = subject
        self.termed = False

    async def term(self) -> None:
        self.termed = True


def _admit(subject: str, req: Request) -> tuple[Request | None, _FakeNc, _FakeMsg]:
    nc, msg = _FakeNc(), _FakeMsg(subject)
    out = asyncio.run(admit_bound_request(cast(Client, nc), S, cast(Msg, msg), req))
    return out, nc, msg


def _count(code: str) -> float:
    value: Any = ERRORS.labels("classifier", code)._value.get()
    return float(value)


def test_a_refusal_is_answered_to_the_sender_counted_and_settled() -> None:
    """Test the shell helper: one ErrorReply on a's subject, nothing on b's, counter, term."""
    before = _count(CLIENT_ID_MISMATCH)
    out, nc, msg = _admit(S.ingress_client("a"), _request("b", "b"))
    assert out is None
    assert msg.termed
    assert _count(CLIENT_ID_MISMATCH) == before + 1
    assert [subject for subject, _ in nc.published] == [S.client_reply("a", "r1")]
    error = decode(nc.published[0][1], ErrorReply)
    assert (error.code, error.request_id, error.service) == (CLIENT_ID_MISMATCH, "r1", "classifier")


def test_an_admitted_request_is_neither_answered_nor_settled() -> None:
    """Test that a bound request passes through untouched for the classifier to handle."""
    out, nc, msg = _admit(S.ingress_client("a"), _request(None, "a"))
    assert out is not None
    assert (out.client_id, out.request_id) == ("a", "a.r1")
    assert not nc.published
    assert not msg.termed


def test_a_bad_ingress_subject_goes_to_the_dead_letters() -> None:
    """Test that a message on an unknown ingress subject is answered on errors and counted."""
    before = _count(BAD_INGRESS_SUBJECT)
    out, nc, msg = _admit("gs.v1.ingress.other", _request("a", "a"))
    assert out is None
    assert msg.termed
    assert [subject for subject, _ in nc.published] == [S.errors]
    assert _count(BAD_INGRESS_SUBJECT) == before + 1


class _FakeJsMsg(_FakeMsg):
    def __init__(self, subject: str) -> None:
        super().__init__(subject)
        self.acked = False

    async def ack(self) -> None:
        self.acked = True


def test_a_reused_id_is_answered_to_its_sender_with_its_own_id_and_counted() -> None:
    """Test refuse_reused_id: duplicate_request_id on the reply subject (not request.done)."""
    before = _count(DUPLICATE_REQUEST_ID)
    bound = bind_request(S, S.ingress_client("a"), _request("a", "a"))
    nc, msg = _FakeNc(), _FakeJsMsg(S.ingress_client("a"))
    asyncio.run(refuse_reused_id(cast(Client, nc), S, cast(Msg, msg), bound))
    assert msg.acked
    assert _count(DUPLICATE_REQUEST_ID) == before + 1
    assert [subject for subject, _ in nc.published] == [S.client_reply("a", "r1")]
    error = decode(nc.published[0][1], ErrorReply)
    assert (error.code, error.request_id) == (DUPLICATE_REQUEST_ID, "r1")
    assert "already used" in error.reason

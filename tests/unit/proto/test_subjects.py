"""Subject builders: tokens are validated, families never overlap, stacks never collide."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proto.keys import Keys
from proto.subjects import PROTOCOL_VERSION, Subjects, valid_token

FAST = settings(max_examples=100, deadline=None, database=None)
TOKEN_RE = re.compile(r"[A-Za-z0-9_-]{1,128}")

tokens = st.from_regex(TOKEN_RE, fullmatch=True)
bad_tokens = st.text(max_size=140).filter(lambda t: TOKEN_RE.fullmatch(t) is None)


def _builders() -> dict[str, Callable[..., str]]:
    """Every Subjects member that builds a subject from tokens, by name."""
    return {
        name: attr
        for name, attr in vars(Subjects).items()
        if inspect.isfunction(attr) and not name.startswith("_")
    }


def _properties() -> list[str]:
    return [
        name
        for name, attr in vars(Subjects).items()
        if isinstance(attr, property) and not name.startswith("_")
    ]


BUILDERS = _builders()
WILDCARDS = [name for name in _properties() if name.endswith("_wildcard")]
FIXED = [n for n in _properties() if n not in WILDCARDS and n != "ingress_stream"]


def _arity(builder: Callable[..., str]) -> int:
    return len(inspect.signature(builder).parameters) - 1


def _concrete(subjects: Subjects, draw: Callable[[Any], Any]) -> dict[str, str]:
    """One concrete subject per fixed subject and per builder (with drawn tokens)."""
    out = {name: getattr(subjects, name) for name in FIXED}
    for name, builder in BUILDERS.items():
        if name.endswith("_wildcard"):
            continue
        out[name] = builder(subjects, *(draw(tokens) for _ in range(_arity(builder))))
    return out


def matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: ``*`` is one token, ``>`` is one or more trailing tokens."""
    pat, sub = pattern.split("."), subject.split(".")
    for i, token in enumerate(pat):
        if token == ">":
            return len(sub) > i
        if i >= len(sub) or (token != "*" and token != sub[i]):
            return False
    return len(pat) == len(sub)


def test_the_matcher_follows_nats_wildcard_rules() -> None:
    """Test that the helper matcher treats * as one token and > as the tail."""
    assert matches("a.*.c", "a.b.c")
    assert not matches("a.*", "a.b.c")
    assert matches("a.>", "a.b.c")
    assert not matches("a.>", "a")


@FAST
@given(token=tokens)
def test_valid_tokens_are_accepted_and_appear_as_one_token(token: str) -> None:
    """Test that every builder accepts a valid token and places it verbatim as one token."""
    subjects = Subjects()
    for builder in BUILDERS.values():
        subject = builder(subjects, *([token] * _arity(builder)))
        assert token in subject.split(".")
        assert subject.startswith(f"gs.{PROTOCOL_VERSION}.")


@FAST
@given(bad=bad_tokens, position=st.integers(min_value=0, max_value=1))
def test_every_builder_rejects_an_invalid_token(bad: str, position: int) -> None:
    """Test that dots, wildcards, spaces, empty and over-long tokens raise ValueError."""
    assert not valid_token(bad)
    for builder in BUILDERS.values():
        args = ["ok"] * _arity(builder)
        args[min(position, len(args) - 1)] = bad
        with pytest.raises(ValueError, match="not a valid subject token"):
            builder(Subjects(), *args)


@FAST
@given(bad=bad_tokens)
def test_an_invalid_prefix_is_rejected(bad: str) -> None:
    """Test that Subjects refuses a prefix that is not one subject token."""
    with pytest.raises(ValueError, match="prefix"):
        Subjects(bad)


@pytest.mark.parametrize("token", ["a.b", "a b", "*", ">", "", "x" * 129, "a\r\nPUB"])
def test_typical_injection_tokens_are_rejected(token: str) -> None:
    """Test that the tokens an attacker would try (dots, wildcards, CRLF) are refused."""
    with pytest.raises(ValueError, match="not a valid subject token"):
        Subjects().worker_dispatch(token)


def test_a_token_with_a_trailing_newline_is_rejected() -> None:
    """Test that 'w\\n' is not a valid token (it would end the NATS protocol line)."""
    with pytest.raises(ValueError, match="not a valid subject token"):
        Subjects().worker_dispatch("w\n")


@FAST
@given(data=st.data())
def test_subjects_of_one_stack_are_distinct_and_wildcards_stay_in_their_family(
    data: st.DataObject,
) -> None:
    """Test that no two builders yield the same subject and each wildcard hits only its own."""
    subjects = Subjects(data.draw(tokens))
    concrete = _concrete(subjects, data.draw)
    assert len(set(concrete.values())) == len(concrete)
    families = {
        "ingress_wildcard": {"ingress_request", "ingress_client"},
        "scheduler_ready_wildcard": {"scheduler_ready"},
        "worker_stats_wildcard": {"worker_stats"},
        "forecast_wildcard": {"forecast"},
        "dvfs_report_wildcard": {"dvfs_report"},
        "dvfs_override_wildcard": {"dvfs_override"},
        "instance_state_wildcard": {"instance_state"},
        "client_wildcard": {"client_reply"},
        "cancel_wildcard": {"cancel"},
        "resend_wildcard": {"resend"},
        "request_done_wildcard": {"request_done_worker", "request_done_control"},
    }
    assert set(families) == set(WILDCARDS) | {"client_wildcard"}
    client_id = concrete["client_reply"].split(".")[3]
    for wildcard, members in families.items():
        pattern = (
            subjects.client_wildcard(client_id)
            if wildcard == "client_wildcard"
            else getattr(subjects, wildcard)
        )
        hits = {name for name, subject in concrete.items() if matches(pattern, subject)}
        assert hits == members, wildcard
    node = concrete["worker_clock_v2"].split(".")[4]
    pattern = subjects.worker_clock_v2_node_wildcard(node)
    hits = {name for name, subject in concrete.items() if matches(pattern, subject)}
    assert hits == {"worker_clock_v2"}
    node = concrete["request_done_worker"].split(".")[5]
    pattern = subjects.request_done_node_wildcard(node)
    hits = {name for name, subject in concrete.items() if matches(pattern, subject)}
    assert hits == {"request_done_worker"}
    node = concrete["instance_state"].split(".")[4]
    pattern = subjects.instance_state_node_wildcard(node)
    hits = {name for name, subject in concrete.items() if matches(pattern, subject)}
    assert hits == {"instance_state"}
    pool, node = concrete["worker_stats"].split(".")[4:6]
    for pattern in (
        subjects.worker_stats_pool_wildcard(pool),
        subjects.worker_stats_node_wildcard(node),
    ):
        hits = {name for name, subject in concrete.items() if matches(pattern, subject)}
        assert hits == {"worker_stats"}, pattern


@FAST
@given(data=st.data())
def test_two_prefixes_never_share_a_subject(data: st.DataObject) -> None:
    """Test that stacks with different prefixes never hear each other, wildcards included."""
    first, second = data.draw(st.lists(tokens, min_size=2, max_size=2, unique=True))
    a, b = Subjects(first), Subjects(second)
    subjects_a = set(_concrete(a, data.draw).values())
    subjects_b = set(_concrete(b, data.draw).values())
    assert not subjects_a & subjects_b
    patterns_a = [getattr(a, name) for name in WILDCARDS] + [a.client_wildcard("c")]
    for pattern in patterns_a:
        assert not any(matches(pattern, subject) for subject in subjects_b)


@FAST
@given(data=st.data())
def test_two_prefixes_never_share_a_redis_key(data: st.DataObject) -> None:
    """Test that Redis keys of two stacks differ, since ids cannot contain ':'."""
    first, second = data.draw(st.lists(tokens, min_size=2, max_size=2, unique=True))
    ident = data.draw(tokens)
    a, b = Keys(first), Keys(second)
    keys_a = {a.worker(ident), a.plan, a.forecast(ident), a.queued, a.dispatched, a.seen(ident)}
    keys_b = {b.worker(ident), b.plan, b.forecast(ident), b.queued, b.dispatched, b.seen(ident)}
    assert not keys_a & keys_b


@pytest.mark.parametrize(("first", "second"), [("a-b", "a_b"), ("gs", "GS")])
def test_two_prefixes_never_share_an_ingress_stream(first: str, second: str) -> None:
    """Test that distinct prefixes get distinct ingress stream names."""
    assert Subjects(first).ingress_stream != Subjects(second).ingress_stream

"""Redis ACL rules: each role's keys and commands, and the files that carry them."""

from __future__ import annotations

import hashlib
import re

import pytest

from proto.keys import Keys
from shared.security.identities import ROLES, Identity
from shared.security.redis_acl import acl_rules, redis_acl_file

K = Keys("gs")
SCOPES = {"worker": "w1", "dvfs": "n1", "client": "c1"}


def _rules(role: str) -> list[str]:
    return acl_rules(K, Identity(f"{role}-x", role, SCOPES.get(role))).split()


def _keys(role: str) -> set[str]:
    return {r for r in _rules(role) if "~" in r}


def _commands(role: str) -> set[str]:
    return {r[1:] for r in _rules(role) if r.startswith("+")}


def test_only_the_planner_writes_the_plan_and_the_classifier_reads_it() -> None:
    """Test that gs:plan is writable by the planner alone and read-only for the classifier."""
    writers = {role for role in ROLES if role != "admin" and f"~{K.plan}" in _keys(role)}
    assert writers == {"planner"}
    for reader in ("classifier", "dvfs"):
        assert _keys(reader) == {f"%R~{K.plan}"}
        assert _commands(reader) == {"ping", "hello", "get"}
    assert f"%R~{K.worker_pattern}" in _keys("planner")


def test_a_worker_writes_only_its_own_heartbeat_and_ended_record() -> None:
    """Test that worker w1 may write gs:worker:w1 and gs:ended:w1 and only read the plan,
    forecasts and its own revoked placements (never another worker's)."""
    assert _keys("worker") == {
        f"~{K.worker('w1')}",
        f"~{K.ended('w1')}",
        f"%R~{K.plan}",
        f"%R~{K.forecast('*')}",
        f"%R~{K.revoked('w1')}",
    }
    assert _commands("worker") == {
        "ping", "hello", "set", "del", "get", "zadd", "expire", "zremrangebyscore", "hgetall",
    }  # fmt: skip


def test_a_router_reads_placements_and_the_workers_ended_records_only() -> None:
    """Test the router's grant: its placement hash, its store marker, the revoked
    placements it writes for silent workers, and the ended sets read only."""
    assert _keys("router") == {
        f"~{K.dispatched}",
        f"~{K.store_marker('router')}",
        f"~{K.revoked('*')}",
        f"%R~{K.ended_pattern}",
    }
    assert _commands("router") == {
        "ping", "hello", "hset", "hgetall", "hdel", "zmscore", "get", "set", "expire",
    }  # fmt: skip


def test_the_scheduler_gets_its_hashes_dedup_keys_and_script_commands() -> None:
    """Test the scheduler's keys and that its Lua script's inner commands are granted."""
    assert _keys("scheduler") == {
        f"~{K.queued}",
        f"~{K.dispatched}",
        f"~{K.seen('*')}",
        f"~{K.cancelled('*')}",  # cancel marks, checked inside the store-new script
        f"~{K.store_marker('scheduler')}",  # the write-back after an empty Redis
        f"%R~{K.plan}",
        f"%R~{K.ended_pattern}",  # its audit of placements whose ending it missed
    }
    assert {
        "hgetall", "hset", "hdel", "set", "exists", "zmscore", "evalsha", "script|load", "exec",
    } <= _commands("scheduler")  # fmt: skip


def test_roles_without_shared_state_get_no_keys() -> None:
    """Test that loadgen and client users have no key pattern at all."""
    for role in ("loadgen", "client"):
        assert _keys(role) == set(), role
        assert _commands(role) == {"ping", "hello"}, role


def test_the_gateway_only_reads_forecasts_and_the_worker_registry() -> None:
    """Test that the gateway reads forecast keys (the carbon-aware query) and the worker
    registry (readiness), and writes nothing."""
    assert _keys("gateway") == {f"%R~{K.forecast('*')}", f"%R~{K.worker_pattern}"}
    assert _commands("gateway") == {"ping", "hello", "mget", "exists", "scan"}


def test_every_rule_starts_from_nothing() -> None:
    """Test that rules reset keys, channels and commands before granting (no inheritance)."""
    for role in ROLES:
        rules = _rules(role)
        assert rules[0] == "resetkeys", role
        assert "resetchannels" in rules, role
        if role != "admin":
            assert "-@all" in rules, role
            assert "&*" not in rules, role


def test_the_acl_file_holds_hashes_and_switches_the_default_user_off() -> None:
    """Test that passwords appear only as SHA-256 hashes and anonymous access is off."""
    scheduler = Identity("scheduler", "scheduler")
    text = redis_acl_file(K, [(scheduler, "s3cret-pw")])
    assert text.splitlines()[0].startswith("user default off")
    assert "s3cret-pw" not in text
    digest = hashlib.sha256(b"s3cret-pw").hexdigest()
    assert re.search(rf"^user scheduler on #{digest} resetkeys ", text, re.MULTILINE)


def test_the_acl_file_refuses_bad_users_and_passwords() -> None:
    """Test duplicates, 'default' and passwords with spaces are refused."""
    a = Identity("a", "router")
    with pytest.raises(ValueError, match="unique"):
        redis_acl_file(K, [(a, "x"), (a, "y")])
    with pytest.raises(ValueError, match="unique"):
        redis_acl_file(K, [(Identity("default", "router"), "x")])
    with pytest.raises(ValueError, match="spaces"):
        redis_acl_file(K, [(a, "has space")])


def test_the_request_path_user_is_the_union_of_its_three_parts() -> None:
    """Test that requestpath gets exactly the keys and commands of classifier+scheduler+router.

    The co-located router also removes placed requests from ``queued`` (one MULTI), which
    only the union (via the scheduler's grants) allows; nothing beyond the three is added.
    """
    parts = ("classifier", "scheduler", "router")
    assert _keys("requestpath") == set().union(*(_keys(r) for r in parts))
    assert _commands("requestpath") == set().union(*(_commands(r) for r in parts))
    assert f"~{K.plan}" not in _keys("requestpath")  # reads the plan, never writes it
    assert not any("worker" in k or "forecast" in k for k in _keys("requestpath"))

"""NATS permissions follow the protocol's subject table; the server config carries them."""

from __future__ import annotations

import re

import pytest

from proto.subjects import Subjects
from shared.security.identities import ROLES, Identity, env_var_name
from shared.security.nats_acl import nats_server_config, permissions_for

S = Subjects("gs")
SCOPES = {"worker": "w1", "dvfs": "n1", "client": "c1"}


def _identity(role: str) -> Identity:
    return Identity(f"{role}-x", role, SCOPES.get(role))


def _matches(pattern: str, subject: str) -> bool:
    """NATS wildcard matching: ``*`` one token, ``>`` one or more trailing tokens."""
    pat, sub = pattern.split("."), subject.split(".")
    for i, token in enumerate(pat):
        if token == ">":
            return len(sub) > i
        if i >= len(sub) or (token != "*" and token != sub[i]):
            return False
    return len(pat) == len(sub)


def _can_publish(role: str, subject: str) -> bool:
    return any(_matches(p, subject) for p in permissions_for(S, _identity(role)).publish)


def _can_subscribe(role: str, subject: str) -> bool:
    return any(_matches(p, subject) for p in permissions_for(S, _identity(role)).subscribe)


def _roles_that(check: object, subject: str) -> set[str]:
    assert callable(check)
    return {role for role in ROLES if role != "admin" and check(role, subject)}


def test_the_wildcard_matcher_follows_nats_rules() -> None:
    """Test that the helper matches like NATS (so the checks below mean what they say)."""
    assert _matches("a.*.c", "a.b.c")
    assert not _matches("a.*.c", "a.b.d")
    assert _matches("a.>", "a.b.c")
    assert not _matches("a.>", "a")
    assert not _matches("a.b", "a.b.c")


def test_clock_commands_are_bound_to_the_node_of_the_dvfs_agent() -> None:
    """Test that clock.v2.<node>.<id> is published by its node's dvfs agent and the planner."""
    assert _roles_that(_can_publish, S.worker_clock_v2("n1", "w1")) == {"dvfs", "planner"}
    assert not _can_publish("dvfs", S.worker_clock_v2("n2", "w1"))  # another node's worker
    assert _roles_that(_can_subscribe, S.worker_clock_v2("n1", "w1")) == {"worker"}
    assert not _can_subscribe("worker", S.worker_clock_v2("n1", "w2"))
    # The deprecated v1 subject is still read by its worker, but nobody may publish it.
    assert _roles_that(_can_publish, S.worker_clock("w1")) == set()
    assert _roles_that(_can_subscribe, S.worker_clock("w1")) == {"worker"}
    assert not _can_subscribe("worker", S.worker_clock("w2"))


def test_a_worker_identity_with_a_node_reads_only_that_node_s_clock_subject() -> None:
    """Test that naming the node binds the worker's clock subscription to it."""
    bound = permissions_for(S, Identity("w", "worker", "w1", node="n1"))
    assert any(_matches(p, S.worker_clock_v2("n1", "w1")) for p in bound.subscribe)
    assert not any(_matches(p, S.worker_clock_v2("n2", "w1")) for p in bound.subscribe)
    assert not any(_matches(p, S.worker_clock_v2_node_wildcard("n1")) for p in bound.publish)
    with pytest.raises(ValueError, match="node"):
        Identity("d", "dvfs", "n1", node="n1")


def test_only_the_classifier_drives_the_ingress_consumer_and_submits() -> None:
    """Test that MSG.NEXT/ACK of the classifier durable and scheduler.submit are its alone."""
    stream = S.ingress_stream
    assert _roles_that(_can_publish, f"$JS.API.CONSUMER.MSG.NEXT.{stream}.classifier") == {
        "classifier"
    }
    assert _roles_that(_can_publish, f"$JS.ACK.{stream}.classifier.1.2.3.4.5") == {"classifier"}
    assert _roles_that(_can_publish, S.scheduler_submit) == {"classifier"}
    assert _roles_that(_can_subscribe, S.scheduler_submit) == {"scheduler"}
    assert _roles_that(_can_subscribe, S.ingress_request) == set()


def test_clients_publish_ingress_and_read_only_their_own_replies() -> None:
    """Test that a client may publish the ingress and read client.c1.> but not c2's."""
    assert _can_publish("client", S.ingress_client("c1"))
    assert _can_subscribe("client", S.client_reply("c1", "r1"))
    assert not _can_subscribe("client", S.client_reply("c2", "r1"))
    for subject in (S.plan, S.worker_clock("w1"), S.scheduler_submit, S.request_done):
        assert not _can_publish("client", subject), subject


@pytest.mark.parametrize("role", ["gateway", "loadgen", "client"])
def test_each_client_identity_is_bound_to_its_one_client_id(role: str) -> None:
    """Test that a client identity publishes and reads only as its own client id.

    The gateway and the replayer are bound to their user name, a client to its scope; none
    may publish the unbound ingress or another id's ingress, nor read another id's replies.
    """
    identity = _identity(role)
    own = identity.client_id
    assert own == ("c1" if role == "client" else f"{role}-x")
    perms = permissions_for(S, identity)
    can_pub = [
        s
        for s in (S.ingress_client(own), S.ingress_client("other"), S.ingress_request)
        if any(_matches(p, s) for p in perms.publish)
    ]
    assert can_pub == [S.ingress_client(own)]
    assert any(_matches(p, S.client_reply(own, "r1")) for p in perms.subscribe)
    for subject in (S.client_reply("other", "r1"), S.ingress_client(own), S.ingress_wildcard):
        assert not any(_matches(p, subject) for p in perms.subscribe), subject


def test_only_client_roles_have_a_client_id_and_only_admin_publishes_unbound() -> None:
    """Test Identity.client_id per role, and that nobody but admin reaches ingress.request."""
    for role in ROLES:
        expected = role in {"gateway", "loadgen", "client"}
        assert (_identity(role).client_id is not None) == expected, role
    assert _roles_that(_can_publish, S.ingress_request) == set()
    assert _roles_that(_can_publish, S.ingress_client("c1")) == {"client"}


def test_the_publishers_of_each_event_are_those_of_the_protocol_table() -> None:
    """Test the publisher set of the plan, stats, ready, done, forecast and dispatch subjects."""
    assert _roles_that(_can_publish, S.plan) == {"planner"}
    assert _roles_that(_can_publish, S.worker_stats("w1")) == {"worker"}
    assert not _can_publish("worker", S.worker_stats("w2"))
    assert _roles_that(_can_publish, S.scheduler_ready("p")) == {"scheduler"}
    # Errors end requests from the classifier, workers and the scheduler's emergency ladder.
    assert _roles_that(_can_publish, S.request_done) == {"worker", "classifier", "scheduler"}
    assert _roles_that(_can_publish, S.forecast("PJM")) == {"forecaster"}
    assert _roles_that(_can_publish, S.worker_dispatch("w1")) == {"router"}
    assert _roles_that(_can_publish, S.dvfs_report("n1")) == {"dvfs"}
    assert not _can_publish("dvfs", S.dvfs_report("n2"))


def test_every_identity_reads_only_its_own_inbox_and_only_responders_answer() -> None:
    """Test private inboxes (no _INBOX.> for anyone but admin) and allow_responses."""
    for role in ROLES:
        perms = permissions_for(S, _identity(role))
        inboxes = [p for p in perms.subscribe if p.startswith("_INBOX")]
        if role == "admin":
            continue
        assert inboxes == [f"_INBOX.{role}-x.>"], role
        assert perms.allow_responses == (role in {"scheduler", "worker"}), role


def test_scoped_roles_need_their_id_and_others_refuse_one() -> None:
    """Test that Identity validates roles, scopes and user names."""
    with pytest.raises(ValueError, match="worker id"):
        Identity("w", "worker")
    with pytest.raises(ValueError, match="takes no scope"):
        Identity("s", "scheduler", "x")
    with pytest.raises(ValueError, match="unknown role"):
        Identity("s", "root")
    with pytest.raises(ValueError, match="subject token"):
        Identity("a.b", "scheduler")


def test_the_server_config_names_every_user_and_no_password() -> None:
    """Test that the config has one user block per identity with an env-variable password."""
    identities = [_identity(role) for role in ROLES]
    text = nats_server_config(S, identities, port=4222, store_dir="/data/js", monitor_port=8222)
    assert 'listen: "0.0.0.0:4222"' in text
    assert 'http: "0.0.0.0:8222"' in text
    assert "jetstream: enabled" in text
    users = re.findall(r'user: "([^"]+)", password: \$(\w+)', text)
    assert [u for u, _ in users] == [i.user for i in identities]
    assert [v for _, v in users] == [env_var_name("GS_NATS_PASSWORD_", i.user) for i in identities]
    assert text.count("allow_responses") == 3  # scheduler, worker, admin
    assert 'publish: { deny: [">"] }' in text  # the monitor publishes nothing


def test_user_names_that_collide_as_variables_are_refused() -> None:
    """Test that worker-1 and worker_1 (same variable) cannot share one config."""
    pair = [Identity("worker-1", "worker", "a"), Identity("worker_1", "worker", "b")]
    with pytest.raises(ValueError, match="differ"):
        nats_server_config(S, pair)


def test_the_namespace_prefixes_every_subject() -> None:
    """Test that another namespace's subjects are out of reach of a gs identity."""
    other = Subjects("other")
    assert not _can_publish("dvfs", other.worker_clock("w1"))
    assert not _can_subscribe("worker", other.worker_dispatch("w1"))
    assert all(
        p.startswith(("gs.", "_INBOX.", "$JS."))
        for role in ROLES
        if role != "admin"
        for p in (*permissions_for(S, _identity(role)).publish,)
    )

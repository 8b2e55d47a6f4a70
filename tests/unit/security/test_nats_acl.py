"""NATS permissions follow the protocol's subject table; the server config carries them."""

from __future__ import annotations

import re

import bcrypt
import pytest

from proto.subjects import Subjects
from shared.security.credentials import bcrypt_hash
from shared.security.identities import COMPOSITE_ROLES, ROLES, Identity, env_var_name
from shared.security.nats_acl import (
    SubjectPermissions,
    internal_subjects,
    nats_server_config,
    permissions_for,
    reply_inboxes,
    subjects_overlap,
)

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


def test_request_done_events_are_bound_to_their_worker_and_heard_by_its_node_only() -> None:
    """Test that a worker ends only its own requests and a dvfs agent hears only its node.

    Before the subjects were scoped every node's dvfs agent decoded the whole fleet's
    completions, and any worker could publish another's (freeing its router slots).
    """
    assert not _can_publish("worker", S.request_done_worker("n1", "w2"))
    assert not _can_publish("worker", S.request_done_control)
    assert _can_subscribe("dvfs", S.request_done_worker("n1", "w7"))
    assert not _can_subscribe("dvfs", S.request_done_worker("n2", "w1"))
    assert not _can_subscribe("dvfs", S.request_done_control)
    everything = (S.request_done_worker("n2", "w9"), S.request_done_control)
    for role in ("requestpath", "classifier", "scheduler", "router", "planner"):
        assert all(_can_subscribe(role, subject) for subject in everything), role
    bound = permissions_for(S, Identity("w", "worker", "w1", node="n1"))
    assert any(_matches(p, S.request_done_worker("n1", "w1")) for p in bound.publish)
    assert not any(_matches(p, S.request_done_worker("n2", "w1")) for p in bound.publish)


def test_instance_states_flow_from_a_worker_to_its_node_s_dvfs_agent_only() -> None:
    """Test the predictive controller's input under the ACL (before, no role had it: a
    secured stack in ``dvfs.mode = "predictive"`` had its states refused by the server)."""
    assert _roles_that(_can_publish, S.instance_state("n1", "w1")) == {"worker"}
    assert not _can_publish("worker", S.instance_state("n1", "w2"))
    assert _roles_that(_can_subscribe, S.instance_state("n1", "w1")) == {"dvfs"}
    assert not _can_subscribe("dvfs", S.instance_state("n2", "w1"))
    bound = permissions_for(S, Identity("w", "worker", "w1", node="n1"))
    assert any(_matches(p, S.instance_state("n1", "w1")) for p in bound.publish)
    assert not any(_matches(p, S.instance_state("n2", "w1")) for p in bound.publish)


def test_a_worker_identity_with_a_node_reads_only_that_node_s_clock_subject() -> None:
    """Test that naming the node binds the worker's clock subscription to it."""
    bound = permissions_for(S, Identity("w", "worker", "w1", node="n1"))
    assert any(_matches(p, S.worker_clock_v2("n1", "w1")) for p in bound.subscribe)
    assert not any(_matches(p, S.worker_clock_v2("n2", "w1")) for p in bound.subscribe)
    assert not any(_matches(p, S.worker_clock_v2_node_wildcard("n1")) for p in bound.publish)
    with pytest.raises(ValueError, match="node"):
        Identity("d", "dvfs", "n1", node="n1")


def test_only_the_classifier_reads_the_ingress_consumer_and_submits() -> None:
    """Test that the push consumer's deliver subject, its acks and deletion (replacing an
    older classifier's pull consumer), and scheduler.submit are the classifier's alone.

    The co-located request path (which contains the classifier) reads the consumer too,
    but submits by method call, so scheduler.submit stays the separate classifier's.
    """
    stream = S.ingress_stream
    reader = {"classifier", "requestpath"}
    assert _roles_that(_can_subscribe, S.classifier_deliver) == reader
    assert _roles_that(_can_publish, f"$JS.ACK.{stream}.classifier.1.2.3.4.5") == reader
    assert _roles_that(_can_publish, f"$JS.API.CONSUMER.DELETE.{stream}.classifier") == reader
    # Nobody pulls any more, and no client may read or remove the consumer.
    assert _roles_that(_can_publish, f"$JS.API.CONSUMER.MSG.NEXT.{stream}.classifier") == set()
    assert not _can_subscribe("client", S.classifier_deliver)
    assert _roles_that(_can_publish, S.scheduler_submit) == {"classifier"}
    assert _roles_that(_can_subscribe, S.scheduler_submit) == {"scheduler"}
    assert _roles_that(_can_subscribe, S.ingress_request) == set()


def test_clients_publish_ingress_and_read_only_their_own_replies() -> None:
    """Test that a client may publish the ingress and read client.c1.> but not c2's."""
    assert _can_publish("client", S.ingress_client("c1"))
    assert _can_subscribe("client", S.client_reply("c1", "r1"))
    assert not _can_subscribe("client", S.client_reply("c2", "r1"))
    for subject in (
        S.plan,
        S.worker_clock("w1"),
        S.scheduler_submit,
        S.request_done_control,
        S.request_done_worker("n1", "w1"),
    ):
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
    assert _roles_that(_can_publish, S.worker_stats("p", "n1", "w1")) == {"worker"}
    assert not _can_publish("worker", S.worker_stats("p", "n1", "w2"))
    assert _roles_that(_can_publish, S.scheduler_ready("p")) == {"scheduler", "requestpath"}
    # Errors end requests from the classifier and the scheduler's emergency ladder; workers
    # end theirs on their own subject.
    assert _roles_that(_can_publish, S.request_done_control) == {
        "classifier",
        "scheduler",
        "requestpath",
    }
    assert _roles_that(_can_publish, S.request_done_worker("n1", "w1")) == {"worker"}
    assert _roles_that(_can_publish, S.forecast("PJM")) == {"forecaster"}
    assert _roles_that(_can_publish, S.worker_dispatch("w1")) == {"router", "requestpath"}
    assert _roles_that(_can_publish, S.dvfs_report("n1")) == {"dvfs"}
    assert not _can_publish("dvfs", S.dvfs_report("n2"))


def test_a_client_cancels_only_as_itself_and_those_who_hold_requests_hear_it() -> None:
    """Test the cancel grants: each client role publishes its own cancel subject only, and
    the scheduler, the co-located request path and the workers hear every client's."""
    for role in ("gateway", "loadgen", "client"):
        own = _identity(role).client_id or ""
        assert _can_publish(role, S.cancel(own)), role
        assert not _can_publish(role, S.cancel("other")), role
    assert _roles_that(_can_publish, S.cancel("c1")) == {"client"}
    assert _roles_that(_can_subscribe, S.cancel("c1")) == {"scheduler", "requestpath", "worker"}


def test_every_identity_reads_only_its_own_inbox_and_only_responders_answer() -> None:
    """Test private inboxes (no _INBOX.> for anyone but admin) and who serves requests."""
    for role in ROLES:
        perms = permissions_for(S, _identity(role))
        inboxes = [p for p in perms.subscribe if p.startswith("_INBOX")]
        if role == "admin":
            continue
        assert inboxes == [f"_INBOX.{role}-x.>"], role
        assert bool(perms.serves) == (role in {"scheduler", "worker", "requestpath"}), role
        # Nothing may publish into inboxes by its own rules; replies are granted per requester.
        assert not [p for p in perms.publish if p.startswith("_INBOX")], role


def test_responders_reply_only_into_their_requesters_inboxes() -> None:
    """Test that reply grants name exactly the identities that may send each responder a
    request: a worker answers the router, its node's dvfs agent, the planner and admin."""
    identities = [
        Identity("router", "router"),
        Identity("classifier", "classifier"),
        Identity("scheduler", "scheduler"),
        Identity("worker-0", "worker", "worker-0", "node-a"),
        Identity("worker-1", "worker", "worker-1", "node-b"),
        Identity("dvfs-a", "dvfs", "node-a"),
        Identity("dvfs-b", "dvfs", "node-b"),
        Identity("planner", "planner"),
        Identity("client-a", "client", "client-a"),
        Identity("admin", "admin"),
    ]
    grants = reply_inboxes(S, identities)
    assert set(grants["worker-0"]) == {
        "_INBOX.router.>",
        "_INBOX.dvfs-a.>",
        "_INBOX.planner.>",
        "_INBOX.admin.>",
    }
    assert set(grants["scheduler"]) == {
        "_INBOX.router.>",
        "_INBOX.classifier.>",
        "_INBOX.worker-0.>",
        "_INBOX.worker-1.>",
        "_INBOX.admin.>",
    }
    for user in ("router", "classifier", "dvfs-a", "planner", "client-a", "admin"):
        assert grants[user] == (), user
    text = nats_server_config(S, identities)
    assert "allow_responses" not in text


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
    assert "allow_responses" not in text  # replies go to named inboxes only
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


# --- the co-located request path (role requestpath) ----------------------------------------
PARTS = COMPOSITE_ROLES["requestpath"]


def _perms(role: str) -> SubjectPermissions:
    return permissions_for(S, Identity("rp", role))


def test_subject_patterns_overlap_like_nats_wildcards() -> None:
    """Test the overlap of two patterns (both may hold wildcards)."""
    assert subjects_overlap("a.*.c", "a.b.*")
    assert subjects_overlap("a.>", "a.b.c")
    assert subjects_overlap("a.b.c", "a.>")
    assert not subjects_overlap("a.>", "a")
    assert not subjects_overlap("a.*", "a.b.c")
    assert not subjects_overlap("a.b", "a.c")


def test_the_request_path_role_is_its_parts_minus_what_they_said_only_to_each_other() -> None:
    """Test requestpath = union(classifier, scheduler, router) - internal subjects.

    Internal (computed from every role's rules): submit and pull both ways, the router's
    requeue publish (workers still requeue, so the subscription stays) and the ready
    subscription (the planner still hears ready events, so the publish stays).
    """
    own = permissions_for(S, Identity("rp", "requestpath"))
    parts = [_perms(role) for role in PARTS]
    internal_pub, internal_sub = internal_subjects(S, PARTS)
    assert internal_pub == {S.scheduler_submit, S.scheduler_pull, S.scheduler_requeue}
    assert internal_sub == {S.scheduler_submit, S.scheduler_pull, S.scheduler_ready_wildcard}
    assert set(own.publish) == {p for r in parts for p in r.publish} - internal_pub
    assert set(own.subscribe) == {p for r in parts for p in r.subscribe} - internal_sub
    assert len(own.publish) == len(set(own.publish))
    assert own.serves == (S.scheduler_requeue,)  # it answers workers' scheduler.requeue
    assert own.subscribe[0] == "_INBOX.rp.>"


def test_the_request_path_keeps_what_other_roles_exchange_with_its_parts() -> None:
    """Test that requeue (from workers), ready (to the planner), dispatch and done remain."""
    assert _can_subscribe("requestpath", S.scheduler_requeue)
    assert _can_publish("requestpath", S.scheduler_ready("p"))
    assert _can_publish("requestpath", S.worker_dispatch("w1"))
    assert _can_publish("requestpath", S.worker_dispatch_batch("w1"))
    assert _can_publish("requestpath", S.client_reply("c1", "r1"))
    assert _can_subscribe("requestpath", S.request_done_worker("n1", "w1"))
    assert _can_publish("requestpath", S.request_done_control)
    assert _can_subscribe("requestpath", S.worker_stats("p", "n1", "w1"))
    assert _can_subscribe("requestpath", S.plan)


def test_the_request_path_cannot_touch_clocks_plans_ingress_or_worker_replies() -> None:
    """Test the subjects the co-located process must not reach (none of its parts could)."""
    for subject in (
        S.worker_clock_v2("n1", "w1"),
        S.worker_clock("w1"),
        S.plan,
        S.ingress_client("c1"),
        S.ingress_request,
        S.worker_stats("p", "n1", "w1"),
        S.forecast("PJM"),
        S.scheduler_submit,
        S.scheduler_pull,
        S.scheduler_requeue,
    ):
        assert not _can_publish("requestpath", subject), subject
    for subject in (
        S.ingress_client("c1"),
        S.client_reply("c1", "r1"),
        S.worker_dispatch("w1"),
        S.worker_clock_v2("n1", "w1"),
        S.scheduler_submit,
        S.scheduler_ready("p"),
        "_INBOX.other.>",
    ):
        assert not _can_subscribe("requestpath", subject), subject


def test_a_new_subject_between_two_parts_would_be_dropped_from_the_union() -> None:
    """Test that internal_subjects follows the rules: an extra part changes the result."""
    # With the planner as a fourth part, ready events are heard only inside the group.
    internal_pub, internal_sub = internal_subjects(S, (*PARTS, "planner"))
    assert S.scheduler_ready_wildcard in internal_pub
    assert S.scheduler_ready_wildcard in internal_sub
    assert S.plan not in internal_pub  # workers, dvfs agents and the monitor read the plan


def test_composite_roles_take_no_scope() -> None:
    """Test that a requestpath identity is unscoped and no client."""
    with pytest.raises(ValueError, match="takes no scope"):
        Identity("rp", "requestpath", "x")
    assert Identity("rp", "requestpath").client_id is None


def test_stats_are_bound_to_their_worker_and_a_dvfs_agent_hears_its_node_only() -> None:
    """Test the pool- and node-bound stats subject: a worker publishes its own stats in any
    pool, on its own node when its identity names one; a dvfs agent reads its node's."""
    bound = Identity("worker-x", "worker", "w1", node="n1")
    pub = permissions_for(S, bound).publish
    assert any(_matches(p, S.worker_stats("any-pool", "n1", "w1")) for p in pub)
    assert not any(_matches(p, S.worker_stats("any-pool", "n2", "w1")) for p in pub)
    assert not any(_matches(p, S.worker_stats("any-pool", "n1", "w2")) for p in pub)
    assert _can_subscribe("dvfs", S.worker_stats("p", "n1", "w1"))
    assert not _can_subscribe("dvfs", S.worker_stats("p", "n2", "w1"))
    for role in ("router", "scheduler", "requestpath", "loadgen", "monitor", "worker"):
        assert _can_subscribe(role, S.worker_stats("p", "n2", "w9")), role


def test_hashed_passwords_are_written_into_the_config_and_must_cover_every_user() -> None:
    """Test that with bcrypt hashes the file names each user's hash and no variable."""
    identities = [Identity("scheduler", "scheduler"), Identity("admin", "admin")]
    hashes = {i.user: bcrypt_hash(f"secret-{i.user}", rounds=4) for i in identities}
    text = nats_server_config(S, identities, password_hashes=hashes)
    assert re.findall(r'user: "([^"]+)", password: "(\$2b\$04\$[^"]+)"', text) == list(
        hashes.items()
    )
    assert "GS_NATS_PASSWORD_" not in text
    assert "secret-" not in text
    assert bcrypt.checkpw(b"secret-admin", hashes["admin"].encode())
    with pytest.raises(ValueError, match="no password hash"):
        nats_server_config(S, identities, password_hashes={"admin": hashes["admin"]})

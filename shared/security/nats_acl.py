"""NATS subject permissions per identity, and the nats-server configuration that holds them.

Derived from the subject table of ``docs/protocol.md`` (who publishes, who subscribes), with
everything not listed denied by the server:

* only the classifier reads the ingress stream (its push consumer's deliver subject
  ``classifier.ingress``, ``$JS.ACK`` of the ``classifier`` durable) and publishes
  ``scheduler.submit``;
* clock commands are node-bound (``clock.v2.<node>.<worker>``): a dvfs agent publishes only
  to its own node's workers, the planner (the cluster's clock authority) to any; nobody but
  ``admin`` publishes the deprecated v1 ``worker.<id>.clock``; a worker subscribes only to
  its own dispatch and clock subjects (on its own node when its identity names the node)
  and publishes only its own stats;
* client identities (gateway, loadgen, client) publish only their own
  ``ingress.client.<client id>``, ``cancel.client.<client id>`` and
  ``resend.client.<client id>`` subjects and read only
  their own ``client.<id>.>`` replies, so the server binds a request's client id (and
  whose requests a cancel may name) to the identity that sent it;
* every identity has a private reply inbox ``_INBOX.<user>.>`` (request/reply and
  JetStream acks land there); a responder may publish only into the inboxes of the
  identities that may send it requests (:func:`reply_inboxes`), never to "whatever reply
  subject a message carries": that route (``allow_responses``) let an identity publish a
  message to a subject it reads, with any reply subject, and answer it, and so publish
  anywhere (a clock command, ``$JS.API.STREAM.PURGE``, a plan);
* no identity but ``admin`` may purge or delete a stream: the ingress stream's users get
  only the ``$JS.API`` calls they make (create-if-missing and info; the classifier its
  consumer's create, info and delete).

Pure functions: the caller writes the text to a file and starts nats-server with it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from proto.subjects import Subjects
from shared.security.identities import (
    COMPOSITE_ROLES,
    ROLES,
    SCOPED_ROLES,
    Identity,
    env_var_name,
)
from shared.security.tls import TlsFiles

__all__ = [
    "CLASSIFIER_CONSUMER",
    "NATS_PASSWORD_ENV_PREFIX",
    "SubjectPermissions",
    "internal_subjects",
    "nats_server_config",
    "permissions_for",
    "reply_inboxes",
    "subjects_overlap",
]

CLASSIFIER_CONSUMER = "classifier"
"""Durable name of the classifier's push consumer on the ingress stream, and its deliver
(queue) group: nats-py binds a queue subscription to the durable of the same name."""

NATS_PASSWORD_ENV_PREFIX = "GS_NATS_PASSWORD_"
"""nats-server reads each user's password from ``<prefix><USER>`` in its environment."""

JS_API = "$JS.API"
_ANY = "__any__"


@dataclass(frozen=True, slots=True)
class SubjectPermissions:
    """What one user may publish and subscribe to (everything else is denied)."""

    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    serves: tuple[str, ...] = ()
    """Subjects it answers requests on; it may reply into the inboxes of the identities
    that may publish there (:func:`reply_inboxes`), and nowhere else."""


def _stream_admin(stream: str) -> tuple[str, ...]:
    # Create-if-missing of the ingress stream (shared.bus.ensure_ingress_stream).
    return (f"{JS_API}.STREAM.INFO.{stream}", f"{JS_API}.STREAM.CREATE.{stream}")


def _consumer(stream: str, durable: str) -> tuple[str, ...]:
    return (
        f"{JS_API}.CONSUMER.INFO.{stream}.{durable}",
        f"{JS_API}.CONSUMER.CREATE.{stream}.{durable}",
        f"{JS_API}.CONSUMER.CREATE.{stream}.{durable}.>",
        f"{JS_API}.CONSUMER.DURABLE.CREATE.{stream}.{durable}",
        # An older classifier's pull consumer of this name is replaced (ingress_consumer).
        f"{JS_API}.CONSUMER.DELETE.{stream}.{durable}",
        f"$JS.ACK.{stream}.{durable}.>",
    )


def _any(subject_of: Callable[[str], str]) -> str:
    """The subject with its id token as the ``*`` wildcard (Subjects refuses ``*`` as an id)."""
    return subject_of(_ANY).replace(_ANY, "*")


def permissions_for(subjects: Subjects, identity: Identity) -> SubjectPermissions:
    """The least privileges of ``identity`` on the stack named by ``subjects``.

    A composite role (:data:`~shared.security.identities.COMPOSITE_ROLES`) gets the union
    of its parts' permissions minus the subjects only its parts used among themselves
    (:func:`internal_subjects`), computed here from the parts' rules so the two can never
    drift apart.

    Raises:
        ValueError: for an identity whose role has no rule (cannot happen for valid roles).
    """
    parts = COMPOSITE_ROLES.get(identity.role)
    if parts is None:
        return _role_permissions(subjects, identity)
    own = [_role_permissions(subjects, Identity(identity.user, part)) for part in parts]
    internal_pub, internal_sub = internal_subjects(subjects, parts)
    return SubjectPermissions(
        publish=_union((p.publish for p in own), internal_pub),
        subscribe=_union((p.subscribe for p in own), internal_sub),
        # A subject it no longer subscribes to (internal) is not served on the bus either.
        serves=_union((p.serves for p in own), internal_sub),
    )


def _union(groups: Iterable[tuple[str, ...]], minus: frozenset[str]) -> tuple[str, ...]:
    """The patterns of all groups in first-seen order, without duplicates or ``minus``."""
    return tuple(p for p in dict.fromkeys(p for g in groups for p in g) if p not in minus)


def subjects_overlap(a: str, b: str) -> bool:
    """Whether two subject patterns (``*`` one token, ``>`` the rest) share a subject."""
    ta, tb = a.split("."), b.split(".")
    for x, y in zip(ta, tb, strict=False):
        if x == ">" or y == ">":
            return True
        if x != y and "*" not in (x, y):
            return False
    return len(ta) == len(tb)


def _outside_rules(subjects: Subjects, parts: tuple[str, ...]) -> list[SubjectPermissions]:
    """The rules of every role that is not one of ``parts`` (nor admin nor composite), with
    each scope (worker, node, client id, the bound roles' user) as the ``*`` wildcard."""
    rules = []
    for role in ROLES:
        if role in parts or role == "admin" or role in COMPOSITE_ROLES:
            continue
        placeholder = Identity(_ANY, role, _ANY if role in SCOPED_ROLES else None)
        perms = _role_permissions(subjects, placeholder)
        rules.append(
            SubjectPermissions(
                publish=tuple(p.replace(_ANY, "*") for p in perms.publish),
                subscribe=tuple(p.replace(_ANY, "*") for p in perms.subscribe),
            )
        )
    return rules


def internal_subjects(
    subjects: Subjects, parts: tuple[str, ...]
) -> tuple[frozenset[str], frozenset[str]]:
    """The publish and subscribe patterns ``parts`` needed only to talk to each other.

    A part's publish pattern is internal when another part (or itself) subscribes to an
    overlapping subject and no other role does; a part's subscribe pattern is internal when
    a part publishes an overlapping subject and no other role does. Run together in one
    process, the parts hand those messages over by method call instead.
    """
    own = [_role_permissions(subjects, Identity(_ANY, part)) for part in parts]
    outside = _outside_rules(subjects, parts)

    def heard(pattern: str, rules: Iterable[SubjectPermissions]) -> bool:
        return any(subjects_overlap(pattern, s) for r in rules for s in r.subscribe)

    def said(pattern: str, rules: Iterable[SubjectPermissions]) -> bool:
        return any(subjects_overlap(pattern, p) for r in rules for p in r.publish)

    pub = {p for r in own for p in r.publish if heard(p, own) and not heard(p, outside)}
    sub = {s for r in own for s in r.subscribe if said(s, own) and not said(s, outside)}
    return frozenset(pub), frozenset(sub)


def _role_permissions(subjects: Subjects, identity: Identity) -> SubjectPermissions:
    """The rules of one (non-composite) role."""
    s = subjects
    clients = f"{s.client_prefix}>"
    stream = s.ingress_stream
    inbox = f"{identity.inbox_prefix}.>"
    role, scope = identity.role, identity.scope or ""
    overrides = (s.dvfs_override_wildcard,)  # the scheduler's emergency max clock → dvfs
    pub: tuple[str, ...]
    sub: tuple[str, ...]
    serves: tuple[str, ...] = ()
    if role == "classifier":
        pub = (
            s.scheduler_submit,
            clients,  # rejection errors go to the client's reply subject
            s.request_done_control,
            s.errors,
            *_stream_admin(stream),
            *_consumer(stream, CLASSIFIER_CONSUMER),
        )
        sub = (s.classifier_deliver, s.request_done_wildcard, s.plan)
    elif role == "scheduler":
        # Ready events, emergency clock overrides, and shed errors (client + request.done).
        pub = (s.scheduler_ready_wildcard, *overrides, clients, s.request_done_control, s.errors)
        sub = (
            s.scheduler_submit,
            s.scheduler_pull,
            s.scheduler_requeue,
            s.request_done_wildcard,
            s.worker_stats_wildcard,  # the emergency ladder watches pools' load
            s.plan,  # ... and re-steers only to pools the plan gives the request's class
            s.cancel_wildcard,  # ends cancelled requests it holds, marks the rest
        )
        serves = (s.scheduler_submit, s.scheduler_pull, s.scheduler_requeue)
    elif role == "router":
        pub = (
            s.scheduler_pull,
            s.scheduler_requeue,
            _any(s.worker_dispatch),
            _any(s.worker_dispatch_batch),
        )
        sub = (s.worker_stats_wildcard, s.scheduler_ready_wildcard, s.request_done_wildcard)
    elif role == "worker":
        node = identity.node

        def own(subject_of: Callable[[str, str], str]) -> str:
            """This worker's subject on its node (on any node when the identity names none)."""
            if node is not None:
                return subject_of(node, scope)
            return _any(lambda any_node: subject_of(any_node, scope))

        # Its own request.done subject only (no worker can end, and so free the slots of,
        # another's requests) and its own instance state (predictive clock control).
        done, state = own(s.request_done_worker), own(s.instance_state)
        # Its own stats subject on its node, in any pool: the identity names no pool.
        stats = own(lambda node, worker: _any(lambda pool: s.worker_stats(pool, node, worker)))
        pub = (stats, clients, done, state, s.errors, s.scheduler_requeue)
        # Its own clock subject (v2), and the deprecated v1 subject, which only admin may
        # still publish.
        clock = own(s.worker_clock_v2)
        # Peers' stats and the plan: a worker parks when its pool is planned smaller. (It
        # subscribes to its pool's stats only; which pool is its settings', not its identity.)
        sub = (
            s.worker_dispatch(scope),
            s.worker_dispatch_batch(scope),
            clock,
            s.worker_clock(scope),
            s.worker_stats_wildcard,
            s.plan,
            # Every client's cancels: nothing tells which worker runs a cancelled request.
            s.cancel_wildcard,
            # Every client's asks for endings again: nothing tells which worker ended one.
            s.resend_wildcard,
        )
        serves = (
            s.worker_dispatch(scope),
            s.worker_dispatch_batch(scope),
            clock,
            s.worker_clock(scope),
        )
    elif role == "dvfs":
        pub = (s.worker_clock_v2_node_wildcard(scope), s.dvfs_report(scope))
        sub = (
            s.worker_stats_node_wildcard(scope),
            s.request_done_node_wildcard(scope),
            s.instance_state_node_wildcard(scope),  # predictive mode
            s.plan,
            *overrides,
        )
    elif role == "planner":
        pub = (s.plan, _any(s.worker_clock_v2_node_wildcard))
        sub = (s.request_done_wildcard, s.scheduler_ready_wildcard)  # observed demand
    elif role == "forecaster":
        pub = (s.forecast_wildcard,)
        sub = ()
    elif role in ("gateway", "loadgen", "client"):
        # Bound client ids: the ingress subject names the sender (the classifier checks the
        # payload against it), and only the sender's own reply space is readable.
        client_id = identity.client_id or ""
        # Its own cancel and resend subjects too: receivers scope the ids by them, so no
        # client can cancel, or be sent again, another's requests.
        pub = (s.ingress_client(client_id), s.cancel(client_id), s.resend(client_id))
        sub = (f"{s.client_prefix}{client_id}.>",)
        if role == "gateway":
            pub += _stream_admin(stream)
            sub += (s.worker_stats_wildcard,)  # the models served (``GET /v1/models``)
        elif role == "loadgen":
            sub += (s.worker_stats_wildcard,)  # the replayer measures energy from stats
    elif role == "monitor":
        pub = ()
        sub = (
            s.worker_stats_wildcard,
            s.dvfs_report_wildcard,
            s.plan,
            s.forecast_wildcard,
            s.errors,
        )
    elif role == "admin":
        return SubjectPermissions(publish=(">",), subscribe=(">",))
    else:  # pragma: no cover - Identity validates the role
        raise ValueError(f"no permissions for role {role!r}")
    return SubjectPermissions(publish=pub, subscribe=(inbox, *sub), serves=serves)


def reply_inboxes(subjects: Subjects, identities: Sequence[Identity]) -> dict[str, tuple[str, ...]]:
    """Per user, the reply inboxes it may publish into: those of its possible requesters.

    A requester is an identity whose publish permission overlaps a subject the user serves
    (``SubjectPermissions.serves``): a worker answers the router (dispatch), its node's
    dvfs agent and the planner (clock) and admin; the scheduler answers the classifier, the
    router and the workers (requeue). Derived from the same rules, so a new requester gets
    its replies without a hand-written grant, and nobody else's inbox is reachable.
    """
    perms = {i.user: permissions_for(subjects, i) for i in identities}
    grants: dict[str, tuple[str, ...]] = {}
    for identity in identities:
        served = perms[identity.user].serves
        grants[identity.user] = tuple(
            f"{other.inbox_prefix}.>"
            for other in identities
            if other.user != identity.user
            and any(subjects_overlap(p, s) for p in perms[other.user].publish for s in served)
        )
    return grants


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _list(items: Iterable[str]) -> str:
    return "[" + ", ".join(_quote(i) for i in items) + "]"


def nats_server_config(
    subjects: Subjects,
    identities: Sequence[Identity],
    *,
    host: str | None = None,
    port: int | None = None,
    store_dir: str | None = None,
    account: str = "GREENSERVE",
    monitor_port: int | None = None,
    tls: TlsFiles | None = None,
    password_hashes: Mapping[str, str] | None = None,
) -> str:
    """A nats-server configuration: JetStream on, one account, one user per identity.

    ``host``/``port``/``store_dir`` left ``None`` are omitted (command-line flags give them).

    With ``password_hashes`` (user → bcrypt hash, :func:`~shared.security.credentials.
    bcrypt_hash`), each user's hash is written into the text: nats-server compares a
    client's password with it, and neither the file nor the server's environment holds a
    password. Without them (the committed compose file) each user's password is the
    environment variable ``GS_NATS_PASSWORD_<USER>``
    (:func:`~shared.security.identities.env_var_name`), resolved when the file loads.

    Raises:
        ValueError: two identities share a user name or a password variable, or a user
            has no hash in ``password_hashes``.
    """
    variables = [env_var_name(NATS_PASSWORD_ENV_PREFIX, i.user) for i in identities]
    if len(set(variables)) != len(variables):
        raise ValueError("user names must differ after upper-casing and '-' → '_'")
    if password_hashes is not None:
        missing = [i.user for i in identities if i.user not in password_hashes]
        if missing:
            raise ValueError(f"no password hash for {missing}")
    lines = [
        "# Generated by shared.security.nats_acl for namespace "
        f"{subjects.prefix!r}; do not edit by hand.",
    ]
    bind = host or "0.0.0.0"
    if port is not None:
        lines.append(f"listen: {_quote(f'{bind}:{port}')}")
    if monitor_port is not None:
        lines.append(f"http: {_quote(f'{bind}:{monitor_port}')}")
    store = f"store_dir: {_quote(store_dir)} " if store_dir is not None else ""
    lines += [f"jetstream {{ {store}}}", "accounts {"]
    lines += [f"  {account} {{", "    jetstream: enabled", "    users: ["]
    replies = reply_inboxes(subjects, identities)
    for identity, variable in zip(identities, variables, strict=True):
        perms = permissions_for(subjects, identity)
        publish = (*perms.publish, *replies[identity.user])
        password = (
            f"${variable}" if password_hashes is None else _quote(password_hashes[identity.user])
        )
        lines += [
            f"      {{ user: {_quote(identity.user)}, password: {password}",
            "        permissions: {",
            f"          publish: {{ allow: {_list(publish)} }}"
            if publish
            else '          publish: { deny: [">"] }',
            f"          subscribe: {{ allow: {_list(perms.subscribe)} }}",
        ]
        lines += ["        }", "      }"]
    lines += ["    ]", "  }", "}"]
    if tls is not None:
        lines += [
            "tls {",
            f"  cert_file: {_quote(str(tls.cert_file))}",
            f"  key_file: {_quote(str(tls.key_file))}",
            f"  ca_file: {_quote(str(tls.ca_file))}",
            "  timeout: 2",
            "}",
        ]
    return "\n".join(lines) + "\n"

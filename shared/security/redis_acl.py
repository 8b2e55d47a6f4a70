"""Redis ACL users per identity: only the keys and commands each service's code uses.

Derived from the key table of ``docs/protocol.md`` and the services' calls:

| role | keys | commands |
|---|---|---|
| scheduler | ``queued``, ``dispatched``, ``seen:*``, ``marker:scheduler``; ``ended:*`` (R)‡ | * |
| router | ``dispatched``, ``marker:router``, ``revoked:*``; ``ended:*`` (R) | HSET HGETALL … |
| worker | own ``worker:``, ``ended:``; ``plan``, ``forecast:*``, own ``revoked:`` (R) | SET …† |
| planner | ``plan``; ``worker:*``, ``forecast:*`` read only | SET, GET, MGET, SCAN |
| forecaster | ``forecast:*`` | SET |
| classifier, dvfs | ``plan`` (read only) | GET |
| requestpath | the union of classifier, scheduler and router | the union |
| monitor | ``worker:*``, ``plan``, ``forecast:*`` (read only) | GET SCAN EXISTS |
| gateway | ``forecast:*``, ``worker:*`` (read only) | MGET EXISTS SCAN |
| others | none | connection only |

(*) MULTI/EXEC and the store-new script: EVALSHA, EVAL, SCRIPT LOAD/EXISTS, with SET,
HSET and EXISTS (the ``cancelled`` mark) inside.
(‡) ``cancelled:*``: SET on each cancel it hears, EXISTS in the script, at restore and on a
requeue.
(†) with EXPIRE and ZREMRANGEBYSCORE: its record of ended requests (R: read only).
The scheduler also GETs ``plan`` (read only): its emergency ladder re-steers by the plan's
classes.
Every user may PING (health checks) and HELLO; the ``default`` user is switched off, so an
unauthenticated connection can do nothing. Redis checks commands run inside a script against
the caller's ACL too, so the scheduler's script gains no rights the scheduler lacks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from proto.keys import Keys
from shared.security.identities import COMPOSITE_ROLES, Identity

__all__ = ["acl_rules", "redis_acl_file"]

_CONNECTION = ("ping", "hello")
_SCRIPT = ("evalsha", "eval", "script|load", "script|exists")
_TRANSACTION = ("multi", "exec", "discard")


def _grant(
    keys: Sequence[str], commands: Sequence[str], *, read_only: bool = False
) -> tuple[list[str], list[str]]:
    key_rules = [f"%R~{k}" if read_only else f"~{k}" for k in keys]
    return key_rules, [f"+{c}" for c in (*_CONNECTION, *commands)]


def acl_rules(keys: Keys, identity: Identity) -> str:
    """ACL rules (no password) for ``identity`` on the stack whose keys are ``keys``.

    A composite role (``requestpath``) gets the union of its parts' keys and commands:
    Redis carries no messages between services, so nothing is internal to take away.
    """
    role = identity.role
    if role == "admin":
        return "resetkeys ~* resetchannels &* +@all"
    parts = COMPOSITE_ROLES.get(role)
    grants = [_role_grants(keys, Identity(identity.user, part)) for part in parts or ()]
    if parts is None:
        grants = [_role_grants(keys, identity)]
    key_rules = list(dict.fromkeys(k for g in grants for k in g[0]))
    commands = list(dict.fromkeys(c for g in grants for c in g[1]))
    return " ".join(["resetkeys", *key_rules, "resetchannels", "-@all", *commands])


def _role_grants(keys: Keys, identity: Identity) -> tuple[list[str], list[str]]:
    """Key patterns and ``+command`` rules of one (non-composite, non-admin) role."""
    role = identity.role
    key_rules: list[str]
    commands: list[str]
    if role == "scheduler":
        # cancelled:*: SET on a cancel; EXISTS in the store-new script, at restore, on a requeue.
        # marker:scheduler: GET/SET, the write-back after a Redis that came back empty.
        key_rules, commands = _grant(
            [
                keys.queued,
                keys.dispatched,
                keys.seen("*"),
                keys.cancelled("*"),
                keys.store_marker("scheduler"),
            ],
            ["hgetall", "hset", "hdel", "set", "get", "exists", "zmscore", *_SCRIPT, *_TRANSACTION],
        )
        key_rules.append(f"%R~{keys.plan}")  # the ladder's re-steer follows the plan's classes
        # ZMSCORE on the workers' ended sets: its audit forgets records of requests whose
        # request.done it never heard (shared/ended_lookup.py).
        key_rules.append(f"%R~{keys.ended_pattern}")
    elif role == "router":
        # HGETALL: a starting router adopts the placements its predecessor recorded; HDEL
        # and ZMSCORE on the workers' ended sets: an adopted or orphaned placement its worker
        # had ended is dropped, not run again, and the audit frees the slots of endings
        # whose request.done was lost (shared/ended_lookup.py).
        # marker:router (GET/SET): its write-back after an empty Redis; revoked:* (HSET, EXPIRE):
        # the placements it took back from a silent worker, which that worker reads on waking.
        key_rules, commands = _grant(
            [keys.dispatched, keys.store_marker("router"), keys.revoked("*")],
            ["hset", "hgetall", "hdel", "zmscore", "get", "set", "expire"],
        )
        key_rules.append(f"%R~{keys.ended_pattern}")
    elif role == "worker":
        scope = identity.scope or ""
        key_rules, commands = _grant(
            [keys.worker(scope), keys.ended(scope)],
            ["set", "del", "get", "zadd", "expire", "zremrangebyscore"],
        )
        key_rules.append(f"%R~{keys.plan}")  # reads the plan to know whether to park
        key_rules.append(f"%R~{keys.revoked(scope)}")  # what the router took back (HGETALL)
        commands.append("+hgetall")
        # Reads its region's carbon forecast for the CO2 metric; the identity names no region,
        # and forecasts are no secret, so every region's is readable.
        key_rules.append(f"%R~{keys.forecast('*')}")
    elif role == "planner":
        key_rules, commands = _grant([keys.plan], ["set", "get", "mget", "scan"])
        key_rules += [f"%R~{keys.worker_pattern}", f"%R~{keys.forecast('*')}"]
    elif role == "forecaster":
        key_rules, commands = _grant(
            [keys.forecast("*"), keys.forecast_log("*")], ["set", "hset", "hgetall", "hdel"]
        )
    elif role in ("classifier", "dvfs"):
        key_rules, commands = _grant([keys.plan], ["get"], read_only=True)
    elif role == "monitor":
        key_rules, commands = _grant(
            [keys.worker_pattern, keys.plan, keys.forecast("*")],
            ["get", "scan", "exists"],
            read_only=True,
        )
    elif role == "gateway":
        # Answers the carbon-aware forecast query from the forecaster's stored forecasts,
        # every location in one MGET.
        # Readiness (/readyz) checks that a worker is registered: EXISTS, SCAN on worker:*.
        key_rules, commands = _grant(
            [keys.forecast("*"), keys.worker_pattern], ["mget", "exists", "scan"], read_only=True
        )
    else:  # loadgen, client: no shared state of their own
        key_rules, commands = _grant([], [])
    return key_rules, commands


def _password_hash(password: str) -> str:
    return hashlib.sha256(password.encode()).hexdigest()


def redis_acl_file(keys: Keys, users: Sequence[tuple[Identity, str]]) -> str:
    """An ACL file (``redis-server --aclfile``) with each user's SHA-256 password hash.

    Raises:
        ValueError: a user name repeats, or a password is empty or holds whitespace.
    """
    names = [identity.user for identity, _ in users]
    if len(set(names)) != len(names) or "default" in names:
        raise ValueError("Redis user names must be unique and not 'default'")
    lines = ["user default off resetkeys resetchannels -@all"]
    for identity, password in users:
        if not password or any(ch.isspace() for ch in password):
            raise ValueError(f"password of {identity.user!r} must be non-empty without spaces")
        rules = acl_rules(keys, identity)
        lines.append(f"user {identity.user} on #{_password_hash(password)} {rules}")
    return "\n".join(lines) + "\n"

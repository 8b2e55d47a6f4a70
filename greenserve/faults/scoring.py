"""Accounting of one scenario: what its client saw, as a :class:`ScenarioResult`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from loadgen.http_replay import HttpRecord
from loadgen.replay import ReplayResult

__all__ = ["ScenarioResult", "score", "score_http"]


@dataclass(frozen=True, slots=True)
class ScenarioResult:
    """Outcome of one scenario."""

    scenario: str
    requests: int
    completed: int
    failed: int
    lost: int
    duplicated: int
    recovery_s: float | None
    errors: dict[str, int]
    token_mismatch: int = 0
    """Completed requests whose delivered tokens differ from what they asked for."""
    held_by_lost_store: int | None = None
    """``wipe:nats``: requests the ingress stream may have held when its store was deleted:
    those it held (stored, not yet acked by a classifier) when read just before the kill,
    plus those sent between that read and the kill (stored by then if acked). The most the
    wipe can lose."""
    exit_codes: dict[str, int | None] = dataclasses.field(default_factory=dict)
    """Exit status of processes stopped gracefully (``term:``); 0 is a clean drain."""
    leftover_records: int = 0
    """Requests still recorded as queued or placed in Redis
    :data:`~greenserve.faults.stack_probes.CONSISTENT_WITHIN_S` after every request ended:
    state a restart would act on (re-queue, re-dispatch) though nothing is left to do. A
    consistent stack holds none."""
    failover_s: float | None = None
    """``failover:redis``: seconds from the primary's kill until the Sentinels named the
    replica primary (Redis refused the stack's writes meanwhile)."""
    killed_node: str | None = None
    """``kill:nats-leader``: the node that led the ingress stream and was killed."""
    stream_replicas: int | None = None
    """On a NATS cluster: the ingress stream's replicas just before the fault."""
    ingress_leaders: dict[str, str] | None = None
    """On a NATS cluster: the node leading the ingress stream (``stream``) and each of its
    consumers (by name) just before the fault. A group whose leader is lost stalls until
    the others elect one: nats-server's raft waits 4 to 9 s for a lost leader
    (``minElectionTimeoutDefault``/``maxElectionTimeoutDefault`` in ``server/raft.go``,
    not configurable), which is what a node kill's or a partition's recovery time shows."""
    client_on_killed_node: bool | None = None
    """``kill:nats-*``: whether the replaying client was connected to the node killed. Its
    subscriptions move to another node on reconnect, and what was published to it
    meanwhile (core NATS, at most once: token chunks, an ending) does not reach it."""
    held_by_cut_host: int | None = None
    """``partition:``: requests placed on the cut-off host's workers just before the cut.
    The router runs them elsewhere once it stops hearing those workers, and a worker that
    finished one meanwhile sends its answer when the host is joined again: the most the
    partition can answer twice (``docs/deploy.md``, Multi-host on one machine)."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return dataclasses.asdict(self)


def score(
    scenario: str,
    result: ReplayResult,
    fault_at: float,
    restored_at: float,
    exit_codes: dict[str, int | None],
    leftover: int,
) -> ScenarioResult:
    """A NATS client's view: a request is completed when its completion came, *failed*
    when only an error came, *lost* when neither did, *duplicated* when it ended twice;
    recovery is the time from ``restored_at`` to the first completion of a request sent
    after ``fault_at``."""
    records = result.records
    after = [
        r.completion.finished_at
        for r in records
        if r.completion is not None
        and r.sent_at >= fault_at
        and r.completion.finished_at >= restored_at
    ]
    errors: dict[str, int] = {}
    for r in records:
        if r.error is not None:
            errors[r.error.code] = errors.get(r.error.code, 0) + 1
    completed = sum(1 for r in records if r.completion is not None)
    failed = sum(1 for r in records if r.completion is None and r.error is not None)
    return ScenarioResult(
        scenario=scenario,
        requests=len(records),
        completed=completed,
        failed=failed,
        lost=len(records) - completed - failed,
        duplicated=sum(r.duplicate_endings for r in records),
        recovery_s=(min(after) - restored_at) if after else None,
        errors=errors,
        token_mismatch=sum(
            1
            for r in records
            if r.completion is not None and len(r.token_times) != r.trace.output_tokens
        ),
        exit_codes=exit_codes,
        leftover_records=leftover,
    )


def score_http(
    scenario: str,
    records: list[HttpRecord],
    fault_at: float,
    restored_at: float,
    leftover: int,
) -> ScenarioResult:
    """An HTTP client's view: a request is completed when answered 200 (``token_mismatch``
    when with fewer tokens than asked), *failed* when it ended with an explicit error (an
    error status, the connection cut with the request on it, or refused for longer than
    the client retries: the client knows) and *lost* when no answer came before the
    client's timeout (the gateway took it and never answered). One response per request:
    nothing can end twice."""
    completed = [r for r in records if r.status == 200]
    lost = [r for r in records if r.error == TimeoutError.__name__]
    errors: dict[str, int] = {}
    for r in records:
        if r.status != 200 and r not in lost:
            code = r.error or f"http_{r.status}"
            errors[code] = errors.get(code, 0) + 1
    after = [r.ended_at for r in completed if r.sent_at >= fault_at and r.ended_at >= restored_at]
    return ScenarioResult(
        scenario=scenario,
        requests=len(records),
        completed=len(completed),
        failed=len(records) - len(completed) - len(lost),
        lost=len(lost),
        duplicated=0,
        recovery_s=(min(after) - restored_at) if after else None,
        errors=errors,
        token_mismatch=sum(1 for r in completed if not r.ok),
        leftover_records=leftover,
    )

"""NATS subject names, versioned. Services never spell a subject as a literal.

Every subject starts with a *prefix* (default ``gs``) and the protocol version, so two
stacks (or two tests) can share one NATS server without hearing each other:
``gs.v1.ingress.request``. Tokens are lowercase and dot-separated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

__all__ = ["PROTOCOL_VERSION", "QUEUE_GROUPS", "Subjects", "valid_token"]

PROTOCOL_VERSION: Final = "v1"
"""Bumped when a message changes incompatibly; old and new stacks then never cross."""

QUEUE_GROUPS: Final = {
    "classifier": "classifier",
    "scheduler": "scheduler",
    "router": "router",
    "planner": "planner",
}
"""One queue group per service, so replicas share the work of a subject."""

_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,128}")


def valid_token(token: str) -> bool:
    """Return whether ``token`` may appear as one subject token (ids, pools, regions)."""
    return _TOKEN.fullmatch(token) is not None  # fullmatch: '$' would let 'w\n' through


def _check(token: str, what: str) -> str:
    if not valid_token(token):
        raise ValueError(f"{what} {token!r} is not a valid subject token ([A-Za-z0-9_-]{{1,128}})")
    return token


@dataclass(frozen=True, slots=True)
class Subjects:
    """All subjects of one stack, derived from its prefix."""

    prefix: str = "gs"

    def __post_init__(self) -> None:
        _check(self.prefix, "prefix")

    @property
    def _base(self) -> str:
        return f"{self.prefix}.{PROTOCOL_VERSION}"

    # --- ingress (JetStream) ---------------------------------------------------------
    @property
    def ingress_request(self) -> str:
        """Unbound ingress of :class:`proto.messages.Request` (JetStream, durable).

        Open stacks and the operator use it; on a secured stack only ``admin`` may publish
        here, every client publishes on its own :meth:`ingress_client` subject.
        """
        return f"{self._base}.ingress.request"

    def ingress_client(self, client_id: str) -> str:
        """Where one client publishes its Requests; a secured server lets only it publish here.

        The classifier takes the client id from this subject, not from the payload, and
        refuses a request whose ``client_id`` or reply subject names another client.
        """
        return f"{self._base}.ingress.client.{_check(client_id, 'client id')}"

    @property
    def ingress_wildcard(self) -> str:
        """Subjects captured by the ingress stream (and read by the classifier's consumer)."""
        return f"{self._base}.ingress.>"

    @property
    def ingress_stream(self) -> str:
        """JetStream stream name of the ingress (work-queue retention)."""
        # The prefix is used verbatim (stream names are case-sensitive), so distinct
        # prefixes always get distinct streams.
        return f"INGRESS-{self.prefix}"

    @property
    def classifier_deliver(self) -> str:
        """Where JetStream pushes the ingress stream's messages to the classifiers.

        The deliver subject of the classifier's durable push consumer; classifiers subscribe
        in its deliver group, so each message reaches one. Only JetStream publishes here.
        """
        return f"{self._base}.classifier.ingress"

    # --- classifier → scheduler → router → worker --------------------------------------
    @property
    def scheduler_submit(self) -> str:
        """Request/reply: classifier hands a ClassifiedRequest to the scheduler."""
        return f"{self._base}.scheduler.submit"

    @property
    def scheduler_pull(self) -> str:
        """Request/reply: the router asks for admitted requests when slots free up."""
        return f"{self._base}.scheduler.pull"

    @property
    def scheduler_requeue(self) -> str:
        """Request/reply: the router returns requests it could not place."""
        return f"{self._base}.scheduler.requeue"

    def scheduler_ready(self, pool_id: str) -> str:
        """Event: the scheduler has queued work for ``pool_id``."""
        return f"{self._base}.scheduler.ready.{_check(pool_id, 'pool id')}"

    @property
    def scheduler_ready_wildcard(self) -> str:
        """All pools' ready events."""
        return f"{self._base}.scheduler.ready.*"

    def worker_dispatch(self, worker_id: str) -> str:
        """Request/reply: the router hands a request to one worker."""
        return f"{self._base}.worker.{_check(worker_id, 'worker id')}.dispatch"

    def worker_dispatch_batch(self, worker_id: str) -> str:
        """Request/reply: the router hands several requests to one worker at once."""
        return f"{self._base}.worker.{_check(worker_id, 'worker id')}.dispatch_batch"

    def worker_clock(self, worker_id: str) -> str:
        """Request/reply (deprecated, v1): a worker's GPU clock, not bound to its node."""
        return f"{self._base}.worker.{_check(worker_id, 'worker id')}.clock"

    def worker_clock_v2(self, node_id: str, worker_id: str) -> str:
        """Request/reply: a node's dvfs agent sets one of its workers' GPU clock (node-bound).

        Replaces :meth:`worker_clock` (still served by workers for one version): the node id
        in the subject lets the NATS ACL limit each dvfs agent to its own node's workers.
        """
        return (
            f"{self._base}.clock.v2.{_check(node_id, 'node id')}.{_check(worker_id, 'worker id')}"
        )

    def worker_clock_v2_node_wildcard(self, node_id: str) -> str:
        """Every worker clock subject of one node (what that node's dvfs agent may publish)."""
        return f"{self._base}.clock.v2.{_check(node_id, 'node id')}.*"

    def worker_stats(self, pool_id: str, node_id: str, worker_id: str) -> str:
        """Event: a worker's periodic statistics, ``stats.worker.<pool>.<node>.<worker>``.

        Pool and node in the subject let the subscribers that need a part of the fleet
        subscribe to that part: a worker to its pool's peers (it ranks them to park), a
        dvfs agent to its node's workers. Both heard every worker of the fleet before,
        O(workers) messages per stats period each, O(workers²) over a fleet of workers.
        """
        return (
            f"{self._base}.stats.worker.{_check(pool_id, 'pool id')}"
            f".{_check(node_id, 'node id')}.{_check(worker_id, 'worker id')}"
        )

    @property
    def worker_stats_wildcard(self) -> str:
        """All workers' statistics (router, emergency ladder, load generator, monitors)."""
        return f"{self._base}.stats.worker.*.*.*"

    def worker_stats_pool_wildcard(self, pool_id: str) -> str:
        """The statistics of one pool's workers (what its workers hear of their peers)."""
        return f"{self._base}.stats.worker.{_check(pool_id, 'pool id')}.*.*"

    def worker_stats_node_wildcard(self, node_id: str) -> str:
        """The statistics of one node's workers (what its dvfs agent hears)."""
        return f"{self._base}.stats.worker.*.{_check(node_id, 'node id')}.*"

    def instance_state(self, node_id: str, worker_id: str) -> str:
        """Event: a worker's per-request state for predictive clock control (dvfs period).

        Node-bound like :meth:`request_done_worker`: only that node's dvfs agent hears it.
        """
        return self._node_bound("state.worker", node_id, worker_id)

    def instance_state_node_wildcard(self, node_id: str) -> str:
        """The instance states of one node's workers (what its dvfs agent hears)."""
        return self._node_bound("state.worker", node_id, None)

    @property
    def instance_state_wildcard(self) -> str:
        """All workers' instance states (tools and tests)."""
        return f"{self._base}.state.worker.*.*"

    def request_done_worker(self, node_id: str, worker_id: str) -> str:
        """Event: requests a worker ended (Completion, ErrorReply or CompletionBatch).

        The node and worker in the subject let each node's dvfs agent hear only its own
        workers (it decoded the whole fleet's completions before), and let the NATS ACL
        bind a worker to its own subject, so no worker can end another's requests.
        """
        return self._node_bound("request.done.worker", node_id, worker_id)

    def request_done_node_wildcard(self, node_id: str) -> str:
        """The ended requests of one node's workers (what its dvfs agent hears)."""
        return self._node_bound("request.done.worker", node_id, None)

    def _node_bound(self, family: str, node_id: str, worker_id: str | None) -> str:
        """``<family>.<node>.<worker>``, or ``.*`` for every worker of the node."""
        worker = "*" if worker_id is None else _check(worker_id, "worker id")
        return f"{self._base}.{family}.{_check(node_id, 'node id')}.{worker}"

    @property
    def request_done_control(self) -> str:
        """Event: requests the control plane ended with an error (refused, shed, invalid)."""
        return f"{self._base}.request.done.control"

    @property
    def request_done_wildcard(self) -> str:
        """Every ended request, from workers and the control plane, for bookkeeping."""
        return f"{self._base}.request.done.>"

    def client_reply(self, client_id: str, request_id: str) -> str:
        """Where a client receives the stream of one request."""
        return (
            f"{self._base}.client.{_check(client_id, 'client id')}."
            f"{_check(request_id, 'request id')}"
        )

    def cancel(self, client_id: str) -> str:
        """Event: one client cancels its requests here (core NATS; a secured server lets only
        it publish). Receivers take the client id from this subject, not from the payload."""
        return f"{self._base}.cancel.client.{_check(client_id, 'client id')}"

    @property
    def cancel_wildcard(self) -> str:
        """Every client's cancels (the scheduler and the workers subscribe)."""
        return f"{self._base}.cancel.client.*"

    def resend(self, client_id: str) -> str:
        """Event: one client, reconnected, asks for endings it may have missed (core NATS; a
        secured server lets only it publish). Receivers take the client id from this
        subject, not from the payload."""
        return f"{self._base}.resend.client.{_check(client_id, 'client id')}"

    @property
    def resend_wildcard(self) -> str:
        """Every client's asks for endings again (the workers subscribe)."""
        return f"{self._base}.resend.client.*"

    @property
    def client_prefix(self) -> str:
        """Every client reply subject starts with this; others are refused as reply targets."""
        return f"{self._base}.client."

    def client_wildcard(self, client_id: str) -> str:
        """Everything addressed to one client."""
        return f"{self._base}.client.{_check(client_id, 'client id')}.*"

    # --- control loops -----------------------------------------------------------------
    @property
    def plan(self) -> str:
        """Event: the planner's current plan."""
        return f"{self._base}.plan.current"

    def forecast(self, region: str) -> str:
        """Event: carbon-intensity forecast of one region."""
        return f"{self._base}.forecast.carbon.{_check(region, 'region')}"

    @property
    def forecast_wildcard(self) -> str:
        """All regions' forecasts."""
        return f"{self._base}.forecast.carbon.*"

    def dvfs_report(self, node_id: str) -> str:
        """Event: a dvfs agent's clock and power report for its node."""
        return f"{self._base}.dvfs.report.{_check(node_id, 'node id')}"

    @property
    def dvfs_report_wildcard(self) -> str:
        """All nodes' dvfs reports."""
        return f"{self._base}.dvfs.report.*"

    def dvfs_override(self, pool_id: str) -> str:
        """Event: the scheduler asks for a pool's maximum clock (emergency ladder)."""
        return f"{self._base}.dvfs.override.{_check(pool_id, 'pool id')}"

    @property
    def dvfs_override_wildcard(self) -> str:
        """All pools' clock overrides (dvfs agents subscribe)."""
        return f"{self._base}.dvfs.override.*"

    @property
    def errors(self) -> str:
        """Dead letters: messages that could not even be attributed to a request."""
        return f"{self._base}.errors"

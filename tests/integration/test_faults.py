"""Fault injection during replays: nothing lost, nothing answered twice, quick recovery."""

from __future__ import annotations

import asyncio

import pytest

from greenserve.faults import run_scenario
from loadgen.traces import load_azure_trace, resolve_trace

pytestmark = pytest.mark.connected

SCENARIOS = [
    "kill:classifier",  # JetStream redelivers what it had not acked; the scheduler dedups
    "kill:scheduler",  # queues come back from Redis; submits during downtime are redelivered
    "restart:redis",  # Redis is the recovery log; the hand-off never waits on it
    # Publishes are retried with the same id; replies swallowed by the outage are re-sent;
    # a dispatch whose reply was lost is not run twice (worker memory, scheduler's ends).
    "restart:nats",
    # The same kill, left to the stack's supervisor: back on its port and store.
    "crash:nats",
    "drop:worker-0",  # the router re-queues the silent worker's requests elsewhere
    # Back within the heartbeat timeout: its new start time tells the router it lost them.
    "kill:worker-0",
    "term:worker-0",  # graceful drain: finish or hand back, then exit 0
    # A worker lost while the router that placed its requests is down: only Redis knows
    # what it held; the restarted router adopts the records and re-dispatches them. Each
    # also covers its kill alone: pulled-but-unplaced requests are re-queued by the
    # scheduler's reaper (the router), or are still queued (the co-located request path).
    "kill:router+drop:worker-0",
    "kill:requestpath+drop:worker-0",
]


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_fault_during_replay_loses_and_duplicates_nothing(scenario: str) -> None:
    """Test that the stack recovers from the fault with every request answered exactly once
    and ends consistent (no placement records of ended requests)."""
    trace = load_azure_trace(resolve_trace("conv"), max_requests=150)
    outcome = await asyncio.to_thread(run_scenario, scenario, trace)
    assert outcome.lost == 0, outcome
    assert outcome.duplicated == 0, outcome
    assert outcome.completed == len(trace), outcome
    assert outcome.token_mismatch == 0, outcome
    # Every ended request forgotten: nothing a later restart would re-queue or re-dispatch.
    assert outcome.leftover_records == 0, outcome
    assert outcome.recovery_s is not None
    assert outcome.recovery_s < 10.0
    assert all(code == 0 for code in outcome.exit_codes.values()), outcome


async def test_redis_refusing_writes_past_the_old_retries_loses_and_duplicates_nothing() -> None:
    """Test refuse:redis for 15 s, past the ten seconds the old hand-off retries lasted (20
    deliveries 0.5 s apart): every request is answered once, by a completion, and the
    stack ends consistent."""
    trace = load_azure_trace(resolve_trace("conv"), max_requests=150)
    outcome = await asyncio.to_thread(run_scenario, "refuse:redis", trace, outage_s=15.0)
    assert outcome.lost == 0, outcome
    assert outcome.duplicated == 0, outcome
    assert outcome.completed == len(trace), outcome
    assert outcome.leftover_records == 0, outcome
    assert outcome.recovery_s is not None
    assert outcome.recovery_s < 10.0


async def test_a_gateway_killed_mid_replay_fails_only_what_it_held_and_explicitly() -> None:
    """Test kill:gateway with OpenAI clients over HTTP: the requests it held or that came
    while it was down end with an explicit error (the client knows to retry), none waits
    for ever, the rest complete, and the restarted gateway serves again on its port."""
    trace = load_azure_trace(resolve_trace("conv"), max_requests=150)
    outcome = await asyncio.to_thread(run_scenario, "kill:gateway", trace)
    assert outcome.lost == 0, outcome
    assert outcome.completed + outcome.failed == len(trace), outcome
    assert outcome.failed > 0, outcome  # in flight at the kill, or sent while it was down
    # ... and only by the connection: cut, or refused until the gateway listened again.
    cut = {"ServerDisconnectedError", "ClientOSError", "ClientConnectorError"}
    assert set(outcome.errors) <= cut, outcome
    assert outcome.token_mismatch == 0, outcome
    assert outcome.recovery_s is not None
    assert outcome.recovery_s < 10.0
    assert outcome.leftover_records == 0, outcome


async def test_nats_back_without_its_store_heals_and_loses_nothing_silently() -> None:
    """Test wipe:nats: nats-server killed and started again with its JetStream store deleted.
    The ingress stream and consumer are created again by their owners, publishes retried
    into them complete, and every request ends once, except what the deleted store held and
    no classifier had taken yet (at most the stream's messages read just before the kill and
    those sent between that read and the kill)."""
    trace = load_azure_trace(resolve_trace("conv"), max_requests=150)
    outcome = await asyncio.to_thread(run_scenario, "wipe:nats", trace)
    # What the deleted store held and no classifier had taken is gone with it (nothing else
    # may be): the stream's messages just before the kill, and what was sent between that read
    # and the kill, bound the loss.
    assert outcome.held_by_lost_store is not None
    assert outcome.lost <= outcome.held_by_lost_store, outcome
    assert outcome.duplicated == 0, outcome
    assert outcome.completed > len(trace) // 2, outcome
    assert outcome.recovery_s is not None
    assert outcome.recovery_s < 10.0

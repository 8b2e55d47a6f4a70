"""Where the multi-host stack puts each process, and what it refuses (no hosts made)."""

from __future__ import annotations

import argparse

import pytest

from greenserve.argtypes import UsageError
from greenserve.bench.control_plane import run as control_plane
from greenserve.bench.control_plane.options import add_arguments
from greenserve.faults import run_scenario
from greenserve.multihost.fabric import Fabric, Host, fabric
from greenserve.multihost.stack import GATEWAY_PORT, multihost_launches
from greenserve.stack import StackSpec

HOSTS = [Host(f"host-{i}", f"gs-1-h{i}", f"10.77.20.{i + 1}", f"gs-1-h{i}") for i in range(3)]


def _placed(spec: StackSpec, classifiers: int = 1) -> dict[str, str]:
    return {x.name: h.name for x, h in multihost_launches(spec, HOSTS, classifiers)}


def test_no_host_holds_the_whole_request_path_and_each_worker_has_its_own() -> None:
    """Test the placement: scheduler and router on host 0, the classifier on host 1, the
    planner and gateway on host 2, worker i on host i + 1, the dvfs agent on the last."""
    placed = _placed(StackSpec(workers=2, regions=("PJM",)))
    assert placed["scheduler"] == placed["router"] == "host-0"
    assert placed["classifier"] == "host-1"
    assert placed["planner"] == placed["gateway"] == "host-2"
    assert placed["worker-0"] == "host-1"
    assert placed["worker-1"] == "host-2"
    assert placed["dvfs-node-pjm"] == "host-2"


def test_classifier_replicas_go_one_per_host_and_every_process_listens_on_its_host() -> None:
    """Test that three classifiers land on three hosts with the classifier's settings, and
    that each process's metrics and the gateway bind to its host's address."""
    launches = multihost_launches(StackSpec(workers=2, regions=("PJM",)), HOSTS, 3)
    placed = {x.name: h.name for x, h in launches}
    assert {placed["classifier"], placed["classifier-2"], placed["classifier-3"]} == {
        "host-0",
        "host-1",
        "host-2",
    }
    by_name = {x.name: x for x, _ in launches}
    assert by_name["classifier-2"].module == by_name["classifier"].module
    assert by_name["classifier-2"].settings.classifier == by_name["classifier"].settings.classifier
    for launch, host in launches:
        assert launch.settings.telemetry.metrics_host == host.address
    assert by_name["gateway"].settings.gateway.host == HOSTS[2].address
    assert by_name["gateway"].settings.gateway.port == GATEWAY_PORT


def test_every_process_connects_to_its_own_hosts_nats_node_first() -> None:
    """Test that each process lists the NATS node of its own host first and keeps that
    order (no shuffle), with every node still in its list to move to."""
    nodes = [f"nats://{h.address}:4222" for h in HOSTS]
    spec = StackSpec(workers=2, regions=("PJM",), nats_url=",".join(reversed(nodes)))
    for launch, host in multihost_launches(spec, HOSTS, 3):
        servers = launch.settings.nats.servers
        assert servers[0] == f"nats://{host.address}:4222", launch.name
        assert sorted(servers) == sorted(nodes)
        assert launch.settings.nats.prefer_first


def test_replicas_are_refused_on_the_colocated_request_path_and_below_one() -> None:
    """Test the two refusals of classifier replicas."""
    colocated = StackSpec(workers=2, regions=("PJM",), colocate_request_path=True)
    with pytest.raises(ValueError, match="separate request path"):
        multihost_launches(colocated, HOSTS, 2)
    with pytest.raises(ValueError, match="at least one classifier"):
        multihost_launches(StackSpec(workers=2, regions=("PJM",)), HOSTS, 0)


@pytest.mark.parametrize(
    ("scenario", "multihost", "message"),
    [
        ("kill:router", True, "does not run on the multi-host stack"),
        ("restart:nats", True, "does not run on the multi-host stack"),
        ("partition:host-1", False, "needs the multi-host stack"),
    ],
)
def test_a_fault_the_stack_cannot_run_is_refused_before_anything_starts(
    scenario: str, multihost: bool, message: str
) -> None:
    """Test that the fault bench names what it cannot run rather than start a stack."""
    with pytest.raises(ValueError, match=message):
        run_scenario(scenario, [], multihost=multihost)


def test_a_fabric_refuses_a_host_count_or_delays_it_cannot_make() -> None:
    """Test the fabric's argument checks (they come before any command runs)."""
    with pytest.raises(ValueError, match="1 to 16 hosts"), fabric(0):
        pass
    with pytest.raises(ValueError, match="3 delays for 2 hosts"), fabric(2, [1.0, 2.0, 3.0]):
        pass
    with pytest.raises(ValueError, match="milliseconds >= 0"), fabric(2, [-1.0]):
        pass


def test_a_partition_of_an_unknown_host_names_the_hosts() -> None:
    """Test that a typo in ``partition:host-<i>`` says which hosts there are."""
    made = Fabric(bridge="gs-1-br", subnet="10.77.20.0/24", hosts=list(HOSTS))
    with pytest.raises(KeyError, match="host-0"):
        made.partition("host-9")


def test_the_control_plane_bench_refuses_multihost_with_cells() -> None:
    """Test that ``--multihost`` with an option it does not take is a usage error."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--multihost", "--cells", "2", "--workers", "2"])
    with pytest.raises(UsageError, match="--multihost takes no"):
        control_plane.run(args)


def test_delays_need_the_hosts_and_one_per_host_at_most() -> None:
    """Test that ``--delays-ms`` without ``--multihost``, or naming more hosts than there
    are, is a usage error in both benches (nothing is made), and a negative one a parse
    error; and that the scenario runner refuses delays without hosts."""
    from greenserve.bench.faults import run as faults
    from greenserve.bench.faults.options import add_arguments as faults_arguments

    for add, bench in ((add_arguments, control_plane), (faults_arguments, faults)):
        parser = argparse.ArgumentParser()
        add(parser)
        with pytest.raises(UsageError, match="needs --multihost"):
            bench.run(parser.parse_args(["--delays-ms", "10"]))
        with pytest.raises(UsageError, match="3 hosts at most"):
            bench.run(parser.parse_args(["--multihost", "--delays-ms", "1,2,3,4"]))
        with pytest.raises(SystemExit):
            parser.parse_args(["--delays-ms", "-5"])
    with pytest.raises(ValueError, match="multi-host"):
        run_scenario("kill:nats-1", [], delays_ms=(10.0,))

"""Settings and wiring of a NATS cluster and a Redis Sentinel set (no servers started)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError
from redis.asyncio.sentinel import SentinelConnectionPool

from greenserve.cli import build_parser
from greenserve.commands import up
from greenserve.local.startup import check_failover_options
from greenserve.stack import StackSpec, stack_launches
from proto.subjects import Subjects
from services.classifier.ingress_consumer import consumer_config
from shared.bus import ingress_stream_config
from shared.config import NatsSettings, RedisSettings
from shared.nats_cluster import plan_nodes, replicas_for
from shared.servers import ServerProcess
from shared.store import connect_redis


def test_a_comma_list_of_nats_urls_is_every_server_in_order() -> None:
    """Test that ``nats.url`` takes a cluster's list and a lone URL stays one server."""
    settings = NatsSettings(url="nats://a:4222, nats://b:4223,nats://c:4224")
    assert settings.servers == ["nats://a:4222", "nats://b:4223", "nats://c:4224"]
    assert NatsSettings(url="nats://a:4222").servers == ["nats://a:4222"]


@pytest.mark.parametrize("url", ["nats://a:4222,", ",nats://a:4222", "nats://a:1,,nats://b:2"])
def test_an_empty_item_in_the_nats_url_list_is_refused(url: str) -> None:
    """Test that a stray comma is a clear error, not a server named ''."""
    with pytest.raises(ValidationError, match="empty item"):
        NatsSettings(url=url)


@pytest.mark.parametrize("replicas", [0, 6, -1])
def test_nats_replicas_outside_what_jetstream_allows_are_refused(replicas: int) -> None:
    """Test that ``nats.replicas`` is 1 to 5 (JetStream's range)."""
    with pytest.raises(ValidationError):
        NatsSettings(replicas=replicas)


def test_the_ingress_stream_and_its_consumer_carry_the_replicas() -> None:
    """Test that both JetStream resources are created with ``nats.replicas`` copies."""
    subjects = Subjects("ns")
    assert ingress_stream_config(subjects).num_replicas == 1
    assert ingress_stream_config(subjects, replicas=3).num_replicas == 3
    config = consumer_config(subjects, ack_wait_s=5.0, max_deliver=-1, replicas=3)
    assert config.num_replicas == 3


@pytest.mark.parametrize(("size", "replicas"), [(1, 1), (2, 2), (3, 3), (5, 3)])
def test_a_cluster_replicates_on_at_most_three_nodes(size: int, replicas: int) -> None:
    """Test min(3, nodes), and that a cluster of none is refused."""
    assert replicas_for(size) == replicas
    with pytest.raises(ValueError, match="at least one node"):
        replicas_for(0)


def test_planned_nodes_have_distinct_names_and_ports_on_the_given_host() -> None:
    """Test that each node gets its own client, route and monitoring port."""
    nodes = plan_nodes(3, host="127.0.0.1")
    assert [n.name for n in nodes] == ["nats-0", "nats-1", "nats-2"]
    ports = [p for n in nodes for p in (n.client_port, n.route_port, n.monitor_port)]
    assert len(set(ports)) == 9
    assert nodes[1].route_url == f"nats://127.0.0.1:{nodes[1].route_port}"


def test_a_server_speaks_what_its_name_says(tmp_path: Path) -> None:
    """Test that cluster nodes get a NATS URL and Sentinels a Redis one, at their host."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert ServerProcess("nats-2", 5, proc, tmp_path, host="10.0.0.2").url == "nats://10.0.0.2:5"
    assert ServerProcess("sentinel-0", 6, proc, tmp_path).url == "redis://127.0.0.1:6"
    assert ServerProcess("redis-replica", 7, proc, tmp_path).url == "redis://127.0.0.1:7"


def test_a_server_without_its_command_line_cannot_be_restarted(tmp_path: Path) -> None:
    """Test that restart refuses what it could not start alike."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    with pytest.raises(RuntimeError, match="command line"):
        ServerProcess("nats", 5, proc, tmp_path).restart()


@pytest.mark.parametrize("item", ["host", "host:", ":26379", "host:port", "host:70000"])
def test_sentinels_that_are_not_host_port_are_refused(item: str) -> None:
    """Test the clear error for a malformed ``redis.sentinels`` item."""
    with pytest.raises(ValidationError, match="host:port"):
        RedisSettings(sentinels=(item,))


def test_sentinels_with_tls_are_refused() -> None:
    """Test that an unsupported combination says so instead of connecting in the clear."""
    with pytest.raises(ValidationError, match="not supported"):
        RedisSettings(url="rediss://h:1/0", sentinels=("h:26379",))


async def test_a_client_with_sentinels_asks_them_for_the_named_primary() -> None:
    """Test that the shared helper builds a Sentinel-managed client for ``master_name``,
    keeping the URL's database and password (nothing connects until a command)."""
    settings = RedisSettings(
        url="redis://:pw@ignored:1/3",
        sentinels=("127.0.0.1:26379", "127.0.0.1:26380"),
        master_name="gs-main",
    )
    client = connect_redis(settings)
    try:
        pool = client.connection_pool
        assert isinstance(pool, SentinelConnectionPool)
        assert pool.service_name == "gs-main"
        assert pool.connection_kwargs["db"] == 3
        assert pool.connection_kwargs["password"] == "pw"
        assert len(pool.sentinel_manager.sentinels) == 2
    finally:
        await client.aclose()


def test_every_service_of_a_replicated_stack_gets_the_server_list_and_sentinels() -> None:
    """Test that the launches carry the cluster's URLs, replicas and the Sentinels."""
    spec = StackSpec(
        workers=1,
        regions=("PJM",),
        nats_url="nats://127.0.0.1:1,nats://127.0.0.1:2,nats://127.0.0.1:3",
        nats_replicas=3,
        redis_sentinels=("127.0.0.1:4", "127.0.0.1:5", "127.0.0.1:6"),
    )
    for launch in stack_launches(spec):
        if launch.module == "services.clockd":
            continue
        assert len(launch.settings.nats.servers) == 3, launch.name
        assert launch.settings.nats.replicas == 3, launch.name
        assert launch.settings.redis.sentinels == spec.redis_sentinels, launch.name


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"nats_cluster": 3, "redis_sentinel": False, "secure": True}, "without --secure"),
        ({"nats_cluster": 1, "redis_sentinel": True, "secure": True}, "without --secure"),
        ({"nats_cluster": 3, "redis_sentinel": False, "nats_url": "nats://x:1"}, "--nats-url"),
        ({"nats_cluster": 1, "redis_sentinel": True, "redis_url": "redis://x:1"}, "--redis-url"),
        ({"nats_cluster": 0, "redis_sentinel": False}, "at least 1"),
    ],
)
def test_combinations_a_replicated_stack_cannot_run_are_refused(
    kwargs: dict[str, object], message: str
) -> None:
    """Test one clear message for each combination ``up`` refuses."""
    with pytest.raises(ValueError, match=message):
        check_failover_options(**kwargs)  # type: ignore[arg-type]


def test_up_refuses_replicated_servers_with_cells(capsys: pytest.CaptureFixture[str]) -> None:
    """Test that ``up --nats-cluster 3 --cells 2`` ends with an error before starting."""
    args = build_parser()[0].parse_args(["up", "--nats-cluster", "3", "--cells", "2"])
    assert up.run(args) == 1
    assert "one cell" in capsys.readouterr().err


def test_up_parses_the_cluster_options() -> None:
    """Test the options' defaults and that a cluster of zero nodes is refused at parse."""
    args = build_parser()[0].parse_args(["up"])
    assert (args.nats_cluster, args.redis_sentinel) == (1, False)
    args = build_parser()[0].parse_args(["up", "--nats-cluster", "3", "--redis-sentinel"])
    assert (args.nats_cluster, args.redis_sentinel) == (3, True)
    with pytest.raises(SystemExit):
        build_parser()[0].parse_args(["up", "--nats-cluster", "0"])

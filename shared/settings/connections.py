"""Settings of what every service connects to: NATS, Redis, telemetry and the model clock."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr, model_validator

from shared.settings.section import _Section

__all__ = ["ClockSettings", "NatsSettings", "RedisSettings", "TelemetrySettings"]


class NatsSettings(_Section):
    """Connection to NATS (JetStream enabled)."""

    url: str = "nats://127.0.0.1:4222"
    """One server's URL, or a cluster's as a comma list (``nats://a:4222,nats://b:4222``):
    the client connects to one and moves to another when it is lost."""
    replicas: int = Field(default=1, ge=1, le=5)
    """Replicas of each JetStream resource (the ingress stream, its consumer): 1 for one
    server, min(3, nodes) for a cluster. Used when a resource is created; JetStream allows
    at most 5 and needs as many nodes."""
    prefer_first: bool = False
    """Connect to the first server of :attr:`url` and, when it is lost, try the others in
    their order. A service across zones or hosts lists its own zone's node first, so a
    message leaves the zone only where its peer is elsewhere (the multi-host harness does;
    docs/deploy.md). Off: nats-py shuffles the list, spreading clients over a cluster."""
    connect_timeout_s: float = 5.0
    reconnect_wait_s: float = 0.5
    max_reconnect_attempts: int = -1
    ping_interval_s: float = Field(default=120.0, gt=0.0)
    """Seconds between the client's pings to its server. A server that leaves more than
    ``max_outstanding_pings`` of them unanswered is dropped and the client reconnects to
    another: the only way it notices a server gone silent without closing the connection
    (a host cut off by a network partition). 120 s is nats-py's default; the multi-host
    harness sets 1 s (``docs/deploy.md``, Multi-host on one machine)."""
    max_outstanding_pings: int = Field(default=2, ge=1)
    request_timeout_s: float = 2.0
    ack_wait_s: float = 5.0
    """JetStream redelivers an ingress message not acked within this time."""
    max_deliver: int = Field(default=-1, ge=-1)
    """Deliveries of one ingress message at most; -1 (default): unlimited. A finite bound
    is honoured by the classifier, which answers the request ``unavailable`` on its last
    delivery instead of letting JetStream stop delivering it unanswered. 0 is refused."""
    user: str | None = None
    password: SecretStr | None = None
    """Masked in repr and logs; prefer ``password_file`` (never both)."""
    password_file: Path | None = None
    """File holding the password (a mounted secret); read at connect time."""
    inbox_prefix: str | None = None
    """Reply-inbox prefix; a secure stack gives each user a private ``_INBOX.<user>``."""
    tls_ca_file: Path | None = None
    """CA bundle (PEM) that signed the server's certificate; turns TLS on."""
    jetstream_check_s: float = Field(default=1.0, gt=0.0)
    """How often the owners of the ingress stream and consumer check that they exist (and
    after each reconnect), creating them again after a server lost its store."""

    @property
    def servers(self) -> list[str]:
        """The server URLs of :attr:`url`, in order."""
        return [item.strip() for item in self.url.split(",")]

    @model_validator(mode="after")
    def _max_deliver_unlimited_or_positive(self) -> NatsSettings:
        if self.max_deliver == 0:
            raise ValueError("nats.max_deliver must be -1 (unlimited) or at least 1")
        return self

    @model_validator(mode="after")
    def _urls_given(self) -> NatsSettings:
        if not all(self.servers):
            raise ValueError(f"nats.url has an empty item: {self.url!r}")
        return self


class RedisSettings(_Section):
    """Connection to Redis."""

    url: str = "redis://127.0.0.1:6379/0"
    socket_timeout_s: float = 2.0
    username: str | None = None
    """ACL user; ``None`` keeps the URL's (or the default user)."""
    password: SecretStr | None = None
    """Masked in repr and logs; prefer ``password_file`` (never both)."""
    password_file: Path | None = None
    """File holding the password (a mounted secret); read at connect time."""
    tls_ca_file: Path | None = None
    """CA bundle (PEM) for a ``rediss://`` URL whose certificate is self-signed."""
    sentinels: tuple[str, ...] = ()
    """``host:port`` of each Redis Sentinel; given, the client asks them for the primary of
    :attr:`master_name` (and asks again after a failover) and takes only the database,
    user and password from :attr:`url`."""
    master_name: str = "greenserve"
    """The name the Sentinels know the primary by."""

    @model_validator(mode="after")
    def _sentinels_are_addresses(self) -> RedisSettings:
        for item in self.sentinels:
            host, colon, port = item.rpartition(":")
            if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"redis.sentinels items are host:port, not {item!r}")
        if not self.master_name.strip():
            raise ValueError("redis.master_name must not be empty")
        if self.sentinels and self.url.startswith("rediss:"):
            raise ValueError("redis.sentinels with TLS (rediss://) is not supported")
        return self


class TelemetrySettings(_Section):
    """OpenTelemetry: off unless an OTLP endpoint is given."""

    otlp_endpoint: str | None = None
    """OTLP/HTTP traces endpoint, e.g. ``http://jaeger:4318/v1/traces``."""
    log_level: str = "INFO"
    log_json: bool = False
    metrics_port: int | None = None
    """Serve Prometheus ``/metrics`` and ``/healthz`` on this port; ``None`` turns it off."""
    metrics_host: str = "127.0.0.1"


class ClockSettings(_Section):
    """Model time: simulated workers and the load generator share a speed-up factor."""

    speedup: float = Field(default=1.0, gt=0.0)
    origin_wall_s: float | None = None
    """Wall time that maps to ``origin_model_s``; ``None`` means process start."""
    origin_model_s: float = 1_656_633_600.0
    """Model time (UTC epoch s) at the origin; default 2022-07-01, inside the carbon data."""

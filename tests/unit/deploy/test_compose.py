"""docker-compose.yml stays deployable: real entry points, known settings, consistent fleet.

No Docker engine runs here, so the file is checked statically: every GreenServe service's
command is a real ``services.<name>`` entry point, every ``GREENSERVE_*`` variable is a field
of :class:`shared.config.Settings` and each service's environment loads into one, and the
fleet (pools, workers, nodes, regions) is consistent with the planner's static plan.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from pydantic import BaseModel

from greenserve.stack import StackSpec, stack_launches
from shared.config import CONFIG_FILE_ENV, Settings
from tests.external_tools import tool

REPO = Path(__file__).resolve().parents[3]
COMPOSE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "docker" / "Dockerfile"
PREFIX = "GREENSERVE_"
INFRA = {"nats", "redis", "jaeger", "prometheus", "grafana", "vllm"}
INTERPOLATION = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


def _compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


SERVICES: dict[str, dict[str, Any]] = _compose()["services"]
NODE_AGENTS = {"clockd"}
"""GreenServe's node processes that use no bus or store (the clock agent)."""
GREENSERVE = {name: svc for name, svc in SERVICES.items() if name not in INFRA | NODE_AGENTS}
SIM_WORKERS = {
    name: svc
    for name, svc in GREENSERVE.items()
    if svc["command"][-1] == "services.worker" and "profiles" not in svc
}


def _resolve(value: str) -> str:
    """Compose interpolation with the defaults in the file (no host variables are set)."""

    def default(match: re.Match[str]) -> str:
        assert match.group(2) is not None, f"${{{match.group(1)}}} has no default"
        return match.group(2)

    return INTERPOLATION.sub(default, value)


def _env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    assert isinstance(env, dict), "use the mapping form of environment"
    return {key: _resolve(value) for key, value in env.items()}


def _setting_path(variable: str) -> list[str]:
    """``GREENSERVE_WORKER__WORKER_ID`` → ``["worker", "worker_id"]``, checked against Settings.

    Raises:
        AssertionError: the variable names no field of the settings model.
    """
    assert variable.startswith(PREFIX), variable
    parts = variable.removeprefix(PREFIX).lower().split("__")
    model: type[BaseModel] = Settings
    for depth, part in enumerate(parts):
        assert part in model.model_fields, f"{variable}: {part!r} is not a setting"
        annotation = model.model_fields[part].annotation
        last = depth == len(parts) - 1
        if not last:
            assert isinstance(annotation, type), variable
            assert issubclass(annotation, BaseModel), variable
            model = annotation
    return parts


def test_the_dockerfile_builds_one_image_from_python_slim() -> None:
    """Test that docker/Dockerfile exists, starts from python:3.11-slim and pip-installs us."""
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert re.search(r"^FROM python:3\.11-slim\b", text, re.MULTILINE)
    assert "pip install" in text
    assert re.search(r"^USER (?!root)\w+", text, re.MULTILINE)
    for source in re.findall(r"^COPY (\S+)", text, re.MULTILINE):
        assert (REPO / source).exists(), f"COPY {source}: no such path"


def test_every_greenserve_service_is_built_from_the_dockerfile() -> None:
    """Test that each GreenServe container uses docker/Dockerfile with the repo as context."""
    assert set(SIM_WORKERS) == {"worker-0", "worker-1"}
    for name, svc in GREENSERVE.items():
        build = svc["build"]
        assert (COMPOSE.parent / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE
        assert svc["image"] == "greenserve:local", name


@pytest.mark.parametrize("name", sorted(GREENSERVE))
def test_each_command_is_a_real_service_entry_point(name: str) -> None:
    """Test that python -m services.<x> has a __main__ that runs service.serve."""
    command = GREENSERVE[name]["command"]
    assert command[:2] == ["python", "-m"]
    module = command[2]
    assert re.fullmatch(r"services\.[a-z_]+", module)
    spec = importlib.util.find_spec(f"{module}.__main__")
    assert spec is not None, f"{module} has no __main__"
    assert spec.origin is not None
    main_src = Path(spec.origin).read_text(encoding="utf-8")
    assert "run_service(NAME, serve)" in main_src
    service_py = Path(spec.origin).with_name("service.py")
    tree = ast.parse(service_py.read_text(encoding="utf-8"))
    serves = [n for n in tree.body if isinstance(n, ast.AsyncFunctionDef) and n.name == "serve"]
    assert serves, f"{service_py} defines no async serve(ctx)"


def test_compose_runs_every_service_the_embedded_stack_runs() -> None:
    """Test that compose deploys each module `greenserve up` starts (seven and the gateway)."""
    deployed = {svc["command"][2] for svc in GREENSERVE.values()}
    launched = {launch.module for launch in stack_launches(StackSpec())}
    assert launched <= deployed, f"not in docker-compose.yml: {sorted(launched - deployed)}"
    assert len(launched) == 8


@pytest.mark.parametrize("name", sorted(GREENSERVE))
def test_every_variable_is_a_known_setting(name: str) -> None:
    """Test that GreenServe containers get only GREENSERVE_* variables naming real fields."""
    for variable in _env(GREENSERVE[name]):
        if variable != CONFIG_FILE_ENV:
            _setting_path(variable)


def test_an_unknown_variable_is_caught() -> None:
    """Test that the field walk rejects typos in the section and in the field."""
    with pytest.raises(AssertionError, match="not a setting"):
        _setting_path("GREENSERVE_WORKER__WORKERID")
    with pytest.raises(AssertionError, match="not a setting"):
        _setting_path("GREENSERVE_WROKER__WORKER_ID")


@pytest.mark.parametrize("name", sorted(GREENSERVE))
def test_each_service_environment_loads_into_settings(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Test that the values parse: Settings built from the environment carries each one."""
    for variable in list(os.environ):
        if variable.startswith(PREFIX):
            monkeypatch.delenv(variable)
    env = _env(GREENSERVE[name])
    for variable, value in env.items():
        monkeypatch.setenv(variable, value)
    settings = Settings()
    for variable, value in env.items():
        loaded: Any = settings
        for part in _setting_path(variable):
            loaded = getattr(loaded, part)
        if isinstance(loaded, bool):
            assert loaded == (value.lower() in {"1", "true", "yes", "on"}), variable
        elif isinstance(loaded, int | float):
            assert float(loaded) == float(value), variable
        elif isinstance(loaded, str | Path):
            assert str(loaded) == value, variable
        else:  # tuples and JSON-parsed sections: parsed into something non-empty
            assert loaded, variable


def test_services_share_one_bus_store_namespace_and_clock() -> None:
    """Test that the common settings are identical in every GreenServe container."""
    shared_keys = [
        "GREENSERVE_NAMESPACE",
        "GREENSERVE_NATS__URL",
        "GREENSERVE_REDIS__URL",
        "GREENSERVE_CLOCK__ORIGIN_WALL_S",
        "GREENSERVE_CLOCK__ORIGIN_MODEL_S",
        "GREENSERVE_PLANNER__STATIC_POOLS",
        "GREENSERVE_TELEMETRY__OTLP_ENDPOINT",
    ]
    envs = [_env(svc) for svc in GREENSERVE.values()]
    for key in shared_keys:
        assert len({env.get(key) for env in envs}) == 1, key
    assert envs[0]["GREENSERVE_TELEMETRY__OTLP_ENDPOINT"] == "http://jaeger:4318/v1/traces"


def test_the_fleet_matches_the_planners_pools() -> None:
    """Test that workers sit in planned pools, counts match, and every node has a dvfs agent."""
    pools_json = _env(GREENSERVE["planner"])["GREENSERVE_PLANNER__STATIC_POOLS"]
    planner = Settings.model_validate({"planner": {"static_pools": yaml.safe_load(pools_json)}})
    pools = {p["pool_id"]: p for p in planner.planner.static_pools}
    workers = [_env(svc) for svc in SIM_WORKERS.values()]
    ids = [w["GREENSERVE_WORKER__WORKER_ID"] for w in workers]
    assert len(set(ids)) == len(ids)
    for pool_id, pool in pools.items():
        members = [w for w in workers if w["GREENSERVE_WORKER__POOL_ID"] == pool_id]
        assert len(members) == pool["instances"], pool_id
        assert {w["GREENSERVE_WORKER__REGION"] for w in members} == {pool["region"]}
        assert {w["GREENSERVE_WORKER__GPU"] for w in members} == {pool["gpu"]}
    dvfs_nodes = {
        _env(svc)["GREENSERVE_DVFS__NODE_ID"]
        for svc in GREENSERVE.values()
        if svc["command"][-1] == "services.dvfs"
    }
    assert {w["GREENSERVE_WORKER__NODE_ID"] for w in workers} <= dvfs_nodes
    regions = yaml.safe_load(_env(GREENSERVE["forecaster"])["GREENSERVE_FORECASTER__REGIONS"])
    assert {p["region"] for p in pools.values()} <= set(regions)


def test_every_container_is_hardened_and_waits_for_healthy_dependencies() -> None:
    """Test no-new-privileges everywhere and service_healthy only on healthchecked services."""
    for name, svc in SERVICES.items():
        assert "no-new-privileges:true" in svc["security_opt"], name
        for dependency, rule in svc.get("depends_on", {}).items():
            assert dependency in SERVICES, f"{name} depends on unknown {dependency}"
            if rule["condition"] == "service_healthy":
                assert "healthcheck" in SERVICES[dependency], f"{dependency} has no healthcheck"
    for name, svc in GREENSERVE.items():
        assert svc["depends_on"]["nats"]["condition"] == "service_healthy", name
        assert svc["depends_on"]["redis"]["condition"] == "service_healthy", name


def test_the_data_directory_is_mounted_read_only_and_named_by_the_setting() -> None:
    """Test that each GreenServe container mounts the data read-only where data_dir points."""
    for name, svc in GREENSERVE.items():
        data_dir = _env(svc)["GREENSERVE_DATA_DIR"]
        mounts = [_resolve(v).rsplit(":", 2) for v in svc["volumes"]]
        assert [data_dir, "ro"] in [m[1:] for m in mounts if len(m) == 3], name


def test_infrastructure_is_what_the_design_names() -> None:
    """Test NATS with JetStream, Redis 7, Jaeger with OTLP on 4318, and the vllm profile."""
    nats, redis, jaeger = SERVICES["nats"], SERVICES["redis"], SERVICES["jaeger"]
    assert nats["image"].startswith("nats:2.10")
    assert "-js" in nats["command"]
    assert "healthcheck" in nats
    assert "healthcheck" in redis
    assert redis["image"].split(":")[1].startswith("7")
    assert jaeger["image"].startswith("jaegertracing/all-in-one")
    assert jaeger["environment"]["COLLECTOR_OTLP_ENABLED"] == "true"
    assert any(p.endswith(":4318") for p in jaeger["ports"])
    vllm, worker = SERVICES["vllm"], SERVICES["worker-vllm"]
    assert vllm["profiles"] == ["vllm"] == worker["profiles"]
    assert vllm["image"].startswith("vllm/vllm-openai")
    devices = vllm["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]
    assert _env(worker)["GREENSERVE_WORKER__BACKEND"] == "vllm"
    assert _env(worker)["GREENSERVE_WORKER__VLLM_URL"] == "http://vllm:8000"


def test_the_vllm_image_is_the_release_the_backend_is_tested_against() -> None:
    """Test that the vllm profile pins the vLLM release whose recorded responses the
    backend's contract tests replay (tests/fixtures/vllm/<version>), and the worker on it
    reads its GPU through NVML and takes clock control from the clock agent only on opt-in."""
    from tests.vllm_replay import FIXTURES, VLLM_VERSION

    assert SERVICES["vllm"]["image"] == f"vllm/vllm-openai:v{VLLM_VERSION}"
    assert (FIXTURES / "README.md").is_file()
    worker = SERVICES["worker-vllm"]
    env = _env(worker)
    assert env["GREENSERVE_WORKER__GPU_CLOCKS"] == "off"  # the default without GS_GPU_CLOCKS
    assert env["GREENSERVE_WORKER__NVML_GPU_INDICES"] == "[0]"
    [device] = worker["deploy"]["resources"]["reservations"]["devices"]
    assert "utility" in device["capabilities"]
    assert worker["depends_on"]["clockd"] == {"condition": "service_healthy", "required": False}


def test_the_clock_agent_is_a_gpu_profile_service_with_only_the_privileges_nvml_needs() -> None:
    """Test the clock agent container: only under the gpu profile (a non-GPU run never starts
    it), the image's services.clockd on the socket the vLLM worker names and shares, root
    with SYS_ADMIN and CHOWN and every other capability dropped, no privileged mode or host
    namespaces, every GPU through the NVIDIA runtime, and a healthcheck on its socket."""
    agent = SERVICES["clockd"]
    assert agent["profiles"] == ["gpu"]
    assert all("gpu" not in svc.get("profiles", []) for n, svc in SERVICES.items() if n != "clockd")
    command = agent["command"]
    assert command[:3] == ["python", "-m", "services.clockd"]
    assert importlib.util.find_spec("services.clockd.__main__") is not None
    socket_path = command[command.index("--socket") + 1]
    assert command[command.index("--socket-group") + 1] == "greenserve"
    assert "useradd --create-home --uid 10001 greenserve" in DOCKERFILE.read_text("utf-8")
    worker_env = _env(SERVICES["worker-vllm"])
    assert worker_env["GREENSERVE_WORKER__CLOCK_AGENT_SOCKET"] == socket_path
    folder = str(Path(socket_path).parent)
    volume = next(v for v in agent["volumes"] if v.endswith(f":{folder}"))
    assert volume in SERVICES["worker-vllm"]["volumes"]
    assert volume.split(":")[0] in _compose()["volumes"]
    assert agent["user"] == "0:0"
    assert agent["cap_drop"] == ["ALL"]
    assert sorted(agent["cap_add"]) == ["CHOWN", "SYS_ADMIN"]
    assert "no-new-privileges:true" in agent["security_opt"]
    assert not {"privileged", "pid", "network_mode", "ipc", "devices"} & set(agent)
    assert agent["environment"] == {}
    assert agent["depends_on"] == {}
    [device] = agent["deploy"]["resources"]["reservations"]["devices"]
    assert device == {"driver": "nvidia", "count": "all", "capabilities": ["gpu", "utility"]}
    assert socket_path in " ".join(agent["healthcheck"]["test"])
    assert agent["restart"] == "unless-stopped"
    assert agent["image"] == "greenserve:local"


def test_the_image_installs_nvml_for_the_clock_agent() -> None:
    """Test that the image installs the gpu extra (nvidia-ml-py), pinned: without it the
    clock agent exits at start with 'cannot import pynvml'."""
    import tomllib

    text = DOCKERFILE.read_text(encoding="utf-8")
    assert "['optional-dependencies']['gpu']" in text
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert any(r.startswith("nvidia-ml-py") for r in project["optional-dependencies"]["gpu"])
    assert "nvidia-ml-py==" in (REPO / "constraints.txt").read_text(encoding="utf-8")


def test_redis_keeps_an_append_only_file_in_both_compose_files() -> None:
    """Test that Redis logs every write (AOF, fsync each second) on its volume, in the open
    and the secure compose file alike: the queues live there, and a Redis restarted
    without it comes back empty."""
    open_cmd = " ".join(SERVICES["redis"]["command"])
    secure_cmd = " ".join(_secure()["services"]["redis"]["command"])
    for command in (open_cmd, secure_cmd):
        assert "--appendonly yes" in command
        assert "--appendfsync everysec" in command
    assert "redis-data:/data" in SERVICES["redis"]["volumes"]
    assert "redis-data:/data" in _secure()["services"]["redis"]["volumes"]


# --- secure variant (docker-compose.secure.yml) ------------------------------------------
SECURE = REPO / "docker-compose.secure.yml"
SECURE_DIR = REPO / "docker" / "secure"
REQUIRED = re.compile(r"\$\{(\w+):\?[^}]*\}")
REDIS_ACL_MOUNT = "/etc/greenserve/users.acl"
"""Where the redis service mounts the ACL file greenserve secrets writes beside secure.env."""
REDIS_ACL_COPY = "/tmp/users.acl"
"""redis's own copy of it, which --aclfile names."""


def _secure() -> dict[str, Any]:
    data = yaml.safe_load(SECURE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _identities() -> dict[str, Any]:
    from shared.security.compose import COMPOSE_IDENTITIES

    return {identity.user: identity for identity in COMPOSE_IDENTITIES}


def test_the_committed_server_configs_are_the_generated_ones() -> None:
    """Test that docker/secure/* equal what shared.security.compose generates today."""
    from shared.security.compose import compose_files

    for name, text in compose_files().items():
        assert (SECURE_DIR / name).read_text(encoding="utf-8") == text, (
            f"docker/secure/{name} is stale: python -m shared.security.compose docker/secure"
        )


def test_every_greenserve_service_connects_as_its_own_identity() -> None:
    """Test user = service name, the role of its command, its scope, and its own secrets."""
    secure = _secure()
    identities = _identities()
    secrets = secure["secrets"]
    for name, base in GREENSERVE.items():
        svc = secure["services"].get(name)
        assert svc is not None, f"{name} has no identity in docker-compose.secure.yml"
        env = {**_env(base), **svc["environment"]}
        identity = identities[name]
        assert env["GREENSERVE_NATS__USER"] == env["GREENSERVE_REDIS__USERNAME"] == name
        assert env["GREENSERVE_NATS__INBOX_PREFIX"] == identity.inbox_prefix
        assert identity.role == base["command"][2].removeprefix("services."), name
        scope = env.get("GREENSERVE_WORKER__WORKER_ID") if identity.role == "worker" else None
        if identity.role == "dvfs":
            scope = env["GREENSERVE_DVFS__NODE_ID"]
        assert identity.scope == scope, name
        for kind in ("nats", "redis"):
            secret = f"{kind}-{name}"
            assert secret in svc["secrets"], name
            assert env[f"GREENSERVE_{kind.upper()}__PASSWORD_FILE"] == f"/run/secrets/{secret}"
            variable = secrets[secret]["environment"]
            assert variable == f"GS_{kind.upper()}_PASSWORD_{name.upper().replace('-', '_')}"
        for variable in svc["environment"]:
            _setting_path(variable)
        assert "GREENSERVE_NATS__PASSWORD" not in env
        assert "GREENSERVE_REDIS__PASSWORD" not in env


def test_neither_server_gets_a_password_only_the_files_beside_secure_env() -> None:
    """Test that nats and redis get no password at all, in their environment or anywhere in
    their service: each mounts what ``greenserve secrets`` writes beside secure.env (the
    NATS bcrypt hashes, as the passwords.conf its nats.conf includes; the Redis ACL file)."""
    from greenserve.secure_env import nats_hashes_path, redis_users_path
    from shared.security.compose import NATS_PASSWORDS_INCLUDE

    services = _secure()["services"]
    for name in ("nats", "redis"):
        assert not services[name].get("environment"), name
        assert "PASSWORD" not in yaml.safe_dump(services[name]), name
    nats, redis = services["nats"], services["redis"]
    mounts = {m.split(":")[1]: m.split(":")[0] for m in nats["volumes"] if m.startswith("./")}
    assert mounts[f"/etc/greenserve/{NATS_PASSWORDS_INCLUDE}"] == (
        "./" + nats_hashes_path(Path("secure.env")).name
    )
    config = (SECURE_DIR / "nats.conf").read_text(encoding="utf-8")
    assert f'include "{NATS_PASSWORDS_INCLUDE}"' in config
    mounts = {m.split(":")[0]: m.split(":")[1] for m in redis["volumes"] if m.startswith("./")}
    assert mounts == {"./" + redis_users_path(Path("secure.env")).name: REDIS_ACL_MOUNT}


def test_nats_server_takes_the_secrets_passwords_against_their_hashes(tmp_path: Path) -> None:
    """Test, on a real nats-server with the committed nats.conf and the hashes file
    ``greenserve secrets`` writes, that each identity's password from secure.env logs in,
    a wrong one is refused, and neither the hashes file nor the config holds a password."""
    import asyncio
    import shutil

    import nats
    from nats.errors import Error as NatsError

    from greenserve.secure_env import nats_hashes_path, write_secure_env
    from shared.servers import start_nats

    if shutil.which("nats-server") is None:
        pytest.skip("nats-server is not installed")
    env_file = write_secure_env(tmp_path / "secure.env")
    passwords = dict(
        line.split("=", 1)
        for line in env_file.read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#")
    )
    hashes = nats_hashes_path(env_file).read_text(encoding="utf-8")
    config = (SECURE_DIR / "nats.conf").read_text(encoding="utf-8")
    for value in passwords.values():
        assert value not in hashes
        assert value not in config
    (tmp_path / "nats.conf").write_text(config, encoding="utf-8")
    (tmp_path / "passwords.conf").write_text(hashes, encoding="utf-8")
    # No env: the passwords reach the server only as the hashes its config includes.
    server = start_nats(tmp_path, config_file=tmp_path / "nats.conf")

    async def login(user: str, password: str) -> bool:
        try:
            client = await nats.connect(
                server.url, user=user, password=password, allow_reconnect=False,
                connect_timeout=2,
            )  # fmt: skip
        except NatsError as exc:
            if "Authorization" in str(exc):
                return False
            raise
        await client.close()
        return True

    try:
        assert asyncio.run(login("scheduler", passwords["GS_NATS_PASSWORD_SCHEDULER"]))
        assert asyncio.run(login("worker-0", passwords["GS_NATS_PASSWORD_WORKER_0"]))
        assert not asyncio.run(login("scheduler", passwords["GS_NATS_PASSWORD_ROUTER"]))
    finally:
        server.stop()


def test_redis_server_takes_the_secrets_passwords_against_the_acl_file(tmp_path: Path) -> None:
    """Test, on a real redis-server loading the ACL file ``greenserve secrets`` writes beside
    secure.env (0600), that each identity's password from secure.env logs in as that user
    with exactly its rules, a wrong password is refused, the default user is off, and the
    file holds no password."""
    import contextlib
    import shutil
    import stat

    from greenserve.secure_env import redis_users_path, write_secure_env
    from proto.keys import Keys
    from shared.security.compose import COMPOSE_NAMESPACE
    from shared.security.redis_acl import acl_rules
    from shared.servers import start_redis

    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    env_file = write_secure_env(tmp_path / "secure.env")
    passwords = dict(
        line.split("=", 1)
        for line in env_file.read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#")
    )
    acl = redis_users_path(env_file)
    assert stat.S_IMODE(acl.stat().st_mode) == 0o600
    text = acl.read_text(encoding="utf-8")
    for value in passwords.values():
        assert value not in text
    # The same users without passwords, each with acl_rules as they stand, on a second
    # server: Redis's normalised form of each user's rules must be the same on both.
    keys = Keys(COMPOSE_NAMESPACE)
    reference = tmp_path / "reference.acl"
    reference.write_text(
        "".join(f"user {u} on nopass {acl_rules(keys, i)}\n" for u, i in _identities().items())
    )
    stack = contextlib.ExitStack()
    server = start_redis(tmp_path / "redis", aclfile=acl, aof=False)
    stack.callback(server.stop)
    with stack:
        expected = start_redis(tmp_path / "reference", aclfile=reference, aof=False)
        stack.callback(expected.stop)
        _check_the_acl_users(server.port, expected.port, passwords)


def _check_the_acl_users(port: int, reference_port: int, passwords: dict[str, str]) -> None:
    """The checks of the test above on its two servers: ``port`` loaded greenserve secrets'
    file, ``reference_port`` the passwordless reference."""
    import redis as redis_py

    from proto.keys import Keys
    from shared.security.compose import COMPOSE_NAMESPACE

    keys = Keys(COMPOSE_NAMESPACE)

    def client(
        user: str | None = None, password: str | None = None, port: int = port
    ) -> redis_py.Redis:
        return redis_py.Redis(port=port, username=user, password=password, decode_responses=True)

    def variable(user: str) -> str:
        return f"GS_REDIS_PASSWORD_{user.upper().replace('-', '_')}"

    def users(admin: redis_py.Redis) -> dict[str, list[str]]:
        """User → its ACL LIST words after ``user <name> on|off``."""
        lines = cast("list[str]", admin.acl_list())
        return {line.split()[1]: line.split()[2:] for line in lines}

    admin = client("admin", passwords[variable("admin")])
    loaded = users(admin)
    wanted = users(client("admin", "any", port=reference_port))
    for user in _identities():
        with client(user, passwords[variable(user)]) as own:
            assert own.ping()  # AUTH as that user went through
        assert loaded[user][0] == "on", user
        assert loaded[user][1].startswith("#"), user
        assert wanted[user][:2] == ["on", "nopass"], user
        # Sorted: Redis lists commands in its command table's order, which is per process.
        assert sorted(loaded[user][2:]) == sorted(wanted[user][2:]), user
    scheduler = client("scheduler", passwords[variable("scheduler")])
    scheduler.hset(keys.queued, "r1", "x")
    with pytest.raises(redis_py.exceptions.NoPermissionError):
        scheduler.set(keys.plan, "x")  # read only for the scheduler
    with pytest.raises(redis_py.exceptions.AuthenticationError):
        client("scheduler", passwords[variable("router")]).ping()
    with pytest.raises(redis_py.exceptions.AuthenticationError):
        client().ping()  # the default user is off
    assert loaded["default"][0] == "off"


def test_the_servers_load_the_mounted_files() -> None:
    """Test that nats runs -c on the mounted nats.conf and redis runs redis-server itself
    (so the image drops to its uid 999) with --aclfile on redis's copy of the mounted file."""
    services = _secure()["services"]
    nats, redis = services["nats"], services["redis"]
    mounts = {m.split(":")[1]: m.split(":")[0] for m in nats["volumes"] if m.startswith("./")}
    config = nats["command"][nats["command"].index("-c") + 1]
    assert (COMPOSE.parent / mounts[config]).resolve() == SECURE_DIR / "nats.conf"
    assert "-js" in nats["command"]
    command = redis["command"]
    assert command[0] == "redis-server"
    assert command[command.index("--aclfile") + 1] == REDIS_ACL_COPY


def test_the_redis_entrypoint_copies_the_acl_file_and_starts_the_images_entrypoint(
    tmp_path: Path,
) -> None:
    """Test the redis service's entrypoint script, run by sh with stand-ins for ``install``
    and the image's ``docker-entrypoint.sh``: it copies the mounted ACL file (0600, the
    host user's) to where --aclfile reads it, owned by redis, then hands the command over
    unchanged, so the image's entrypoint sees redis-server first and drops to uid 999."""
    import shutil
    import subprocess

    if shutil.which("sh") is None:
        pytest.skip("no sh on this machine")
    redis = _secure()["services"]["redis"]
    entrypoint = [arg.replace("$$", "$") for arg in redis["entrypoint"]]
    assert entrypoint[:2] == ["sh", "-c"]
    log = tmp_path / "calls"
    for stub in ("install", "docker-entrypoint.sh"):
        (tmp_path / stub).write_text(f'#!/bin/sh\necho "{stub} $*" >> {log}\n')
        (tmp_path / stub).chmod(0o755)
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}"}
    subprocess.run([*entrypoint, *redis["command"]], env=env, check=True)
    install, handover = log.read_text(encoding="utf-8").splitlines()
    assert install.split()[1:] == [
        "-m", "0400", "-o", "redis", "-g", "redis", REDIS_ACL_MOUNT, REDIS_ACL_COPY,
    ]  # fmt: skip
    assert handover.split() == ["docker-entrypoint.sh", *redis["command"]]


def test_the_redis_healthcheck_needs_no_password(tmp_path: Path) -> None:
    """Test, on a local redis-server, that the unauthenticated healthcheck passes on a
    server whose ACL file switches the default user off and fails on one left open (or
    on none): the container holds no password to check with."""
    import shutil
    import subprocess

    from shared.servers import start_redis

    test = _secure()["services"]["redis"]["healthcheck"]["test"]
    assert test[0] == "CMD-SHELL"
    command = test[1].replace("$$", "$")
    for credential in ("REDISCLI_AUTH", "--pass", "--user", " -a ", "PASSWORD"):
        assert credential not in command, credential
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        pytest.skip("no redis-server/redis-cli on this machine")

    def healthy(port: int) -> bool:
        local = command.replace("redis-cli", f"redis-cli -p {port}", 1)
        env = {"PATH": os.environ["PATH"]}
        return subprocess.run(["sh", "-c", local], env=env, check=False).returncode == 0

    acl = tmp_path / "users.acl"
    acl.write_text("user default off\nuser monitor on >pw resetkeys -@all +ping\n")
    closed = start_redis(tmp_path / "closed", aclfile=acl, aof=False)
    opened = start_redis(tmp_path / "open", aof=False)
    try:
        assert healthy(closed.port)
        assert not healthy(opened.port)
    finally:
        closed.stop()
        opened.stop()
    assert not healthy(closed.port)


# --- the compose-spec schema, the image, the operator's view ------------------------------
PROMETHEUS_YML = REPO / "docker" / "prometheus" / "prometheus.yml"
GRAFANA = REPO / "docker" / "grafana" / "provisioning"
METRICS_PORT = "GREENSERVE_TELEMETRY__METRICS_PORT"


def _compose_spec_validator() -> Any:
    """The compose-spec JSON schema that check-jsonschema ships (``vendor.compose-spec``)."""
    import importlib.resources
    import json

    import jsonschema

    vendor = importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
    schema = json.loads((vendor / "compose-spec.json").read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("path", [COMPOSE, SECURE], ids=lambda p: p.name)
def test_the_compose_files_follow_the_compose_spec(path: Path) -> None:
    """Test each compose file against the compose-spec schema (no Docker engine here)."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    errors = [
        f"{list(e.absolute_path)}: {e.message}" for e in _compose_spec_validator().iter_errors(data)
    ]
    assert errors == []


def test_the_compose_spec_check_catches_a_wrong_file() -> None:
    """Test that the schema check fails on a misspelt key and a wrongly typed port list."""
    data = _compose()
    data["services"]["gateway"]["imagee"] = "greenserve:local"
    data["services"]["nats"]["ports"] = "4222:4222"
    messages = " | ".join(e.message for e in _compose_spec_validator().iter_errors(data))
    assert "'imagee' was unexpected" in messages
    assert "'4222:4222' is not of type 'array'" in messages


def test_the_dockerfile_installs_the_pinned_versions() -> None:
    """Test that the image installs with constraints.txt, which pins every runtime dependency."""
    import tomllib

    text = DOCKERFILE.read_text(encoding="utf-8")
    assert re.search(r"^COPY .*\bconstraints\.txt\b", text, re.MULTILINE)
    assert "pip install -c constraints.txt -r /tmp/requirements.txt" in text
    pins = {
        re.split(r"==", line)[0].lower().replace("_", "-")
        for line in (REPO / "constraints.txt").read_text(encoding="utf-8").splitlines()
        if "==" in line and not line.startswith("#")
    }
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    for requirement in project["dependencies"]:
        name = re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")
        assert name in pins, f"{name} is not pinned in constraints.txt"


def _image_tag(image: str) -> str:
    return image.rsplit(":", 1)[1] if ":" in image.rsplit("/", 1)[-1] else ""


def test_every_image_is_pinned_to_a_version() -> None:
    """Test that no third-party image floats on ``latest`` (or no tag): a restart would pull
    a different server than the one this file was checked with."""
    for name, svc in SERVICES.items():
        tag = _image_tag(svc["image"])
        assert tag, f"{name}: {svc['image']} has no tag"
        assert tag != "latest", f"{name}: {svc['image']}"
        assert re.match(r"v?\d", tag) or svc["image"] == "greenserve:local", name


def test_every_published_port_is_a_port_its_service_listens_on() -> None:
    """Test host:container pairs: the gateway on its setting, Prometheus, Grafana, the servers."""
    listens = {
        "nats": {"4222", "8222"},
        "redis": {"6379"},
        "jaeger": {"16686", "4318"},
        "prometheus": {"9090"},
        "grafana": {"3000"},
        "gateway": {_env(GREENSERVE["gateway"])["GREENSERVE_GATEWAY__PORT"]},
    }
    published: dict[str, set[str]] = {}
    for name, svc in SERVICES.items():
        for mapping in svc.get("ports", []):
            host, container = mapping.split(":")
            assert host == container, f"{name}: {mapping}"
            published.setdefault(name, set()).add(container)
    assert published == listens


def _scrape_targets() -> dict[str, tuple[str, str]]:
    """Prometheus's ``service`` label → (host, port) over every static target."""
    config = yaml.safe_load(PROMETHEUS_YML.read_text(encoding="utf-8"))
    targets: dict[str, tuple[str, str]] = {}
    for job in config["scrape_configs"]:
        if job["job_name"] == "prometheus":
            continue
        assert job.get("metrics_path", "/metrics") == "/metrics"
        for group in job["static_configs"]:
            for target in group["targets"]:
                host, port = target.rsplit(":", 1)
                assert group["labels"]["service"] == host, target
                targets[host] = (host, port)
    return targets


def test_prometheus_scrapes_every_greenserve_container_on_its_metrics_port() -> None:
    """Test that the scrape list is exactly the GreenServe services, each on the port its
    environment serves metrics on (bound to all interfaces, so reachable from Prometheus)."""
    targets = _scrape_targets()
    assert set(targets) == set(GREENSERVE)
    for name, svc in GREENSERVE.items():
        env = _env(svc)
        assert env["GREENSERVE_TELEMETRY__METRICS_HOST"] == "0.0.0.0", name
        assert targets[name][1] == env[METRICS_PORT], name
    prometheus = SERVICES["prometheus"]
    mount = "./docker/prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro"
    assert mount in prometheus["volumes"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]


def test_promtool_accepts_the_prometheus_config(tmp_path: Path) -> None:
    """Test ``promtool check config`` on docker/prometheus/prometheus.yml, and that it
    rejects a broken copy (so a pass means something)."""
    import subprocess

    promtool = tool("promtool", "prometheus")
    done = subprocess.run(
        [promtool, "check", "config", str(PROMETHEUS_YML)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    broken = tmp_path / "prometheus.yml"
    broken.write_text(
        PROMETHEUS_YML.read_text(encoding="utf-8").replace(
            "scrape_interval: 10s", "scrape_interval: often"
        ),
        encoding="utf-8",
    )
    rejected = subprocess.run(
        [promtool, "check", "config", str(broken)], capture_output=True, check=False, timeout=60
    )
    assert rejected.returncode != 0


def test_grafana_is_provisioned_with_prometheus_and_the_dashboard() -> None:
    """Test the datasource URL names the Prometheus service and port, the dashboard provider
    reads the folder where dashboards/ is mounted, and the dashboard's panels use the
    datasource variable that the default datasource fills."""
    import json

    grafana = SERVICES["grafana"]
    mounts = {m.split(":")[1]: m.split(":")[0] for m in grafana["volumes"] if m.startswith("./")}
    assert (REPO / mounts["/etc/grafana/provisioning"]).resolve() == GRAFANA
    datasources = yaml.safe_load((GRAFANA / "datasources" / "prometheus.yml").read_text())
    [source] = datasources["datasources"]
    assert source["type"] == "prometheus"
    assert source["isDefault"] is True
    assert source["url"] == "http://prometheus:9090"
    assert "9090:9090" in SERVICES["prometheus"]["ports"]
    providers = yaml.safe_load((GRAFANA / "dashboards" / "greenserve.yml").read_text())
    [provider] = providers["providers"]
    folder = provider["options"]["path"]
    assert (REPO / mounts[folder]).resolve() == REPO / "dashboards"
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (REPO / "dashboards" / Path(home).relative_to(folder)).is_file()
    dashboard = json.loads((REPO / "dashboards" / "greenserve.json").read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["query"] == "prometheus"
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
    assert grafana["depends_on"]["prometheus"]["condition"] == "service_healthy"


def test_grafana_needs_a_password_in_the_secure_stack() -> None:
    """Test that the secure file turns anonymous access off and requires the admin password."""
    env = _secure()["services"]["grafana"]["environment"]
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    assert REQUIRED.findall(env["GF_SECURITY_ADMIN_PASSWORD"]) == ["GS_GRAFANA_ADMIN_PASSWORD"]


def test_greenserve_secrets_generates_every_variable_the_secure_file_requires() -> None:
    """Test that ``greenserve secrets`` names exactly the variables the secure file reads:
    its ``${VAR:?...}`` and the sources of its Docker secrets."""
    from greenserve.secure_env import secure_env_names

    required = set(REQUIRED.findall(SECURE.read_text(encoding="utf-8")))
    required |= {secret["environment"] for secret in _secure()["secrets"].values()}
    names = secure_env_names()
    assert len(names) == len(set(names))
    assert required <= set(names)
    # Beyond those: the passwords of the host's tool identities, which no container reads
    # (the servers get their hashes, from the files beside secure.env).
    services = set(_secure()["services"])
    tools = {u for u in _identities() if u not in services}
    assert tools == {"loadgen", "monitor", "admin"}
    assert set(names) - required == {
        f"GS_{kind}_PASSWORD_{u.upper()}" for u in tools for kind in ("NATS", "REDIS")
    }


RESTART_POLICIES = {"unless-stopped", "always", "on-failure"}
"""Policies under which Docker brings a crashed container back (``no`` leaves it dead)."""


def test_every_service_restarts_after_a_crash_in_both_compose_files() -> None:
    """Test that every service of the open compose file, and of the secure one merged over
    it, has a restart policy that brings a crashed container back: a killed request path
    otherwise stayed dead and its HTTP requests hung (issue 29)."""
    secure = _secure()["services"]
    assert set(secure) <= set(SERVICES), "the secure file only overlays the open one"
    for name, service in SERVICES.items():
        merged = {**service, **secure.get(name, {})}
        policy = str(merged.get("restart", "no")).split(":", 1)[0]
        assert policy in RESTART_POLICIES, f"{name} restarts {policy!r}"

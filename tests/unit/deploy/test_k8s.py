"""deploy/k8s is the compose stack on Kubernetes, valid for a named Kubernetes version.

The kustomizations are rendered (by :mod:`kustomize_lite`, and compared with
``kubectl kustomize`` where kubectl is installed) with a credentials file that
``greenserve secrets`` writes, every object is validated with ``kubernetes-validate``
against the API schemas of :data:`K8S_VERSION` (strict: unknown fields are errors), and the
workloads are read against docker-compose.yml and docker-compose.secure.yml: the same
images, commands, ports and variables, each service under its own identity. The
nvml-clocks overlay is read against the compose `clockd` service (the gpu profile): the
clock agent's command, privileges, grace and probe, and the socket its workers reach.
"""

from __future__ import annotations

import base64
import copy
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from greenserve.secure_env import secure_env_names, write_secure_env
from tests.unit.deploy.kustomize_lite import KustomizeError, render

REPO = Path(__file__).resolve().parents[3]
K8S = REPO / "deploy" / "k8s"
K8S_VERSION = "1.33.0"
"""The Kubernetes release whose API schemas every object must satisfy."""
OVERLAY = "overlays/nvml-clocks"
INFRA = {"nats", "redis", "jaeger"}
TOOLS = {"loadgen", "monitor", "admin"}
REDIS_ACL_FILE = "/etc/greenserve/users.acl"
"""Where the redis pod reads the ACL file of the greenserve-redis-users Secret."""
INTERPOLATION = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")
Obj = dict[str, Any]


def _load(path: Path) -> Obj:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


COMPOSE = _load(REPO / "docker-compose.yml")["services"]
SECURE = _load(REPO / "docker-compose.secure.yml")["services"]
# The GreenServe services a plain `docker compose up` runs (the vllm profile needs a GPU
# host and a model, and is not part of the Kubernetes stack).
DEPLOYED = {
    name: svc
    for name, svc in COMPOSE.items()
    if svc.get("image") == "greenserve:local" and "profiles" not in svc
}


def _resolve(value: str) -> str:
    return INTERPOLATION.sub(lambda m: m.group(2) or "", value)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """deploy/k8s copied aside with a fresh credentials file (as an operator makes one)."""
    root = tmp_path_factory.mktemp("k8s") / "k8s"
    shutil.copytree(
        K8S, root, ignore=shutil.ignore_patterns("secure.env", "secure.*.conf", "secure.*.acl")
    )
    write_secure_env(root / "base" / "secure.env")
    return root


@pytest.fixture(scope="module")
def base(tree: Path) -> list[Obj]:
    return render(tree / "base")


@pytest.fixture(scope="module")
def overlay(tree: Path) -> list[Obj]:
    return render(tree / OVERLAY)


def _by(objects: list[Obj], kind: str) -> dict[str, Obj]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def _workloads(objects: list[Obj]) -> dict[str, Obj]:
    kinds = {"Deployment", "StatefulSet", "DaemonSet"}
    return {o["metadata"]["name"]: o for o in objects if o["kind"] in kinds}


def _pod(workload: Obj) -> Obj:
    spec: Obj = workload["spec"]["template"]["spec"]
    return spec


def _main(workload: Obj) -> Obj:
    [container] = _pod(workload)["containers"]
    assert isinstance(container, dict)
    return container


def _k8s_env(objects: list[Obj], container: Obj) -> dict[str, str]:
    env: dict[str, str] = {}
    config_maps = _by(objects, "ConfigMap")
    for source in container.get("envFrom", []):
        env.update(config_maps[source["configMapRef"]["name"]]["data"])
    for item in container.get("env", []):
        assert "value" in item, f"{item['name']}: GreenServe containers take plain values"
        env[item["name"]] = item["value"]
    return env


def _compose_env(name: str) -> dict[str, str]:
    env = {k: _resolve(v) for k, v in COMPOSE[name].get("environment", {}).items()}
    env.update(SECURE.get(name, {}).get("environment", {}))
    return env


# --- rendering and validation -------------------------------------------------------------


@pytest.mark.parametrize("folder", ["base", OVERLAY])
def test_kubectl_kustomize_renders_the_same_objects(tree: Path, folder: str) -> None:
    """Test that what the tests read is what ``kubectl kustomize`` (offline) would apply."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed; the objects are rendered by kustomize_lite only")
    done = subprocess.run(
        [kubectl, "kustomize", str(tree / folder)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    theirs = [d for d in yaml.safe_load_all(done.stdout) if d]

    def keyed(objects: list[Obj]) -> dict[tuple[str, str], Obj]:
        return {(o["kind"], o["metadata"]["name"]): o for o in objects}

    assert keyed(theirs) == keyed(render(tree / folder))


def test_the_renderer_refuses_what_it_does_not_render(tmp_path: Path) -> None:
    """Test that a kustomize feature the renderer lacks fails instead of being dropped."""
    (tmp_path / "kustomization.yaml").write_text("resources: []\nimages: [{name: x}]\n")
    with pytest.raises(KustomizeError, match="unsupported fields"):
        render(tmp_path)


@pytest.mark.parametrize("folder", ["base", OVERLAY])
def test_every_object_is_valid_for_the_named_kubernetes_version(tree: Path, folder: str) -> None:
    """Test each rendered object against the Kubernetes API schemas, unknown fields refused."""
    import kubernetes_validate

    objects = render(tree / folder)
    assert len(objects) > 40
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_the_validation_catches_a_wrong_object(base: list[Obj]) -> None:
    """Test that a misspelt field and a port given as text are refused (the check bites)."""
    import kubernetes_validate

    misspelt = _workloads(base)["gateway"]
    misspelt = {**misspelt, "spec": {**misspelt["spec"], "replica": 2}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(misspelt, K8S_VERSION, strict=True)
    service = _by(base, "Service")["gateway"]
    wrong_port = {**service, "spec": {**service["spec"], "ports": [{"port": "8080"}]}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong_port, K8S_VERSION, strict=True)


# --- the same stack as compose ------------------------------------------------------------


def test_one_workload_per_compose_service(base: list[Obj]) -> None:
    """Test a Deployment per GreenServe service, the dvfs agent as a DaemonSet, NATS and
    Redis as StatefulSets and Jaeger as a Deployment: the compose file's services, no more."""
    workloads = _workloads(base)
    assert set(workloads) == set(DEPLOYED) | INFRA
    kinds = {name: w["kind"] for name, w in workloads.items()}
    assert kinds.pop("dvfs") == "DaemonSet"
    assert kinds.pop("nats") == kinds.pop("redis") == "StatefulSet"
    assert set(kinds.values()) == {"Deployment"}


@pytest.mark.parametrize("name", sorted(DEPLOYED))
def test_each_service_runs_the_compose_image_command_and_variables(
    base: list[Obj], name: str
) -> None:
    """Test the image, the command and every variable (shared and the service's own,
    identity included) equal the compose service's under the secure file."""
    container = _main(_workloads(base)[name])
    assert container["image"] == COMPOSE[name]["image"]
    assert container["command"] == COMPOSE[name]["command"]
    assert _k8s_env(base, container) == _compose_env(name)


def test_the_servers_run_the_compose_images_and_commands(base: list[Obj]) -> None:
    """Test NATS, Redis and Jaeger: same images, the secure file's server commands, and a
    container port for every port compose publishes."""
    workloads = _workloads(base)
    for name in INFRA:
        container = _main(workloads[name])
        assert container["image"] == COMPOSE[name]["image"], name
        listening = {str(p["containerPort"]) for p in container["ports"]}
        published = {p.split(":")[1] for p in COMPOSE[name]["ports"]}
        assert published <= listening, name
    assert _main(workloads["nats"])["args"] == SECURE["nats"]["command"]
    # Redis: the compose command, redis-server itself, but on the ACL file as mounted here
    # (the pod runs as uid 999 and reads it directly; compose reads redis's copy of it).
    command = list(_main(workloads["redis"])["command"])
    acl = command.index("--aclfile") + 1
    assert command[acl] == REDIS_ACL_FILE
    assert command[:acl] + command[acl + 1 :] == [
        arg for i, arg in enumerate(SECURE["redis"]["command"]) if i != acl
    ]
    jaeger = {e["name"]: e["value"] for e in _main(workloads["jaeger"])["env"]}
    assert jaeger == COMPOSE["jaeger"]["environment"]


def test_ports_are_the_settings_ports_and_services_expose_them(base: list[Obj]) -> None:
    """Test the metrics port of every GreenServe container and the gateway's API port are
    the ones its variables name, and each Service forwards to a named container port."""
    workloads = _workloads(base)
    services = _by(base, "Service")
    for name in DEPLOYED:
        container = _main(workloads[name])
        env = _k8s_env(base, container)
        ports = {p["name"]: str(p["containerPort"]) for p in container["ports"]}
        assert ports["metrics"] == env["GREENSERVE_TELEMETRY__METRICS_PORT"], name
        if name == "gateway":
            assert ports["http"] == env["GREENSERVE_GATEWAY__PORT"]
    for name, service in services.items():
        pod_ports = {p["name"] for p in _main(workloads[name])["ports"]}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= pod_ports, name
        selector = service["spec"]["selector"]
        labels = workloads[name]["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items(), name
    assert set(services) == set(workloads)


def test_the_data_directory_is_mounted_read_only_where_the_setting_points(
    base: list[Obj],
) -> None:
    """Test that each GreenServe container reads the reference data read-only at data_dir,
    filled by an init container from the data image (compose mounts the host folder)."""
    for name in DEPLOYED:
        pod = _pod(_workloads(base)[name])
        container = _main(_workloads(base)[name])
        data_dir = _k8s_env(base, container)["GREENSERVE_DATA_DIR"]
        [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == data_dir]
        assert mount["readOnly"] is True
        [init] = pod["initContainers"]
        assert any(m["name"] == mount["name"] for m in init["volumeMounts"])


# --- probes, resources, restarts, budgets -------------------------------------------------


@pytest.mark.parametrize("folder", ["base", OVERLAY])
def test_every_container_has_probes_and_resource_requests(tree: Path, folder: str) -> None:
    """Test liveness and readiness on every server and service; CPU and memory requested
    and memory bounded; GreenServe probes on /healthz, the gateway ready on /readyz."""
    for name, workload in _workloads(render(tree / folder)).items():
        pod = _pod(workload)
        assert pod.get("restartPolicy", "Always") == "Always", name
        for container in pod["containers"] + pod.get("initContainers", []):
            resources = container["resources"]
            assert {"cpu", "memory"} <= set(resources["requests"]), name
            assert "memory" in resources["limits"], name
        container = _main(workload)
        assert "livenessProbe" in container, name
        assert "readinessProbe" in container, name
        if name in DEPLOYED:
            assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
            ready = container["readinessProbe"]["httpGet"]
            expected = {"path": "/readyz", "port": "http"} if name == "gateway" else None
            assert ready == (expected or {"path": "/healthz", "port": "metrics"}), name


def test_a_disruption_budget_per_deployment_and_statefulset(base: list[Obj]) -> None:
    """Test one PodDisruptionBudget selecting each Deployment's and StatefulSet's pods:
    replicated services keep one pod up, single ones allow the drain (they restart)."""
    budgets = _by(base, "PodDisruptionBudget")
    for name, workload in _workloads(base).items():
        if workload["kind"] == "DaemonSet":
            assert name not in budgets  # a drain does not evict DaemonSet pods
            continue
        budget = budgets[name]["spec"]
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert budget["selector"]["matchLabels"].items() <= labels.items(), name
        replicas = workload["spec"]["replicas"]
        if replicas > 1:
            assert 1 <= budget["minAvailable"] < replicas, name
        else:
            assert budget["maxUnavailable"] == 1, name
            if workload["kind"] == "Deployment":
                assert workload["spec"]["strategy"]["type"] == "Recreate", name


# --- identities, secrets, network policies ------------------------------------------------


def _identities() -> dict[str, Any]:
    from shared.security.compose import COMPOSE_IDENTITIES

    return {identity.user: identity for identity in COMPOSE_IDENTITIES}


def test_the_server_configs_are_the_generated_ones() -> None:
    """Test deploy/k8s/base/secure/* equal what shared.security.compose generates today."""
    from shared.security.compose import compose_files

    for name, text in compose_files().items():
        assert (K8S / "base" / "secure" / name).read_text(encoding="utf-8") == text, (
            f"deploy/k8s/base/secure/{name} is stale: "
            "python -m shared.security.compose deploy/k8s/base/secure"
        )


def test_the_secret_holds_every_password_greenserve_secrets_writes(base: list[Obj]) -> None:
    """Test the Secret built from secure.env carries each variable, values intact."""
    secret = _by(base, "Secret")["greenserve-credentials"]
    assert list(secret["data"]) == secure_env_names()
    for value in secret["data"].values():
        assert re.fullmatch(r"[A-Za-z0-9_-]{32}", base64.b64decode(value).decode())


@pytest.mark.parametrize("name", sorted(DEPLOYED))
def test_each_service_mounts_only_its_own_two_passwords(base: list[Obj], name: str) -> None:
    """Test the files its *_PASSWORD_FILE variables name hold its identity's passwords, and
    no other key of the Secret reaches the pod."""
    workload = _workloads(base)[name]
    container = _main(workload)
    env = _k8s_env(base, container)
    volumes = {v["name"]: v for v in _pod(workload)["volumes"]}
    keys = set()
    for mount in container["volumeMounts"]:
        source = volumes[mount["name"]].get("secret")
        if source is None:
            continue
        for item in source["items"]:
            keys.add(item["key"])
            path = f"{mount['mountPath']}/{item['path']}"
            kind = "NATS" if item["key"].startswith("GS_NATS_") else "REDIS"
            assert env[f"GREENSERVE_{kind}__PASSWORD_FILE"] == path, name
    suffix = name.upper().replace("-", "_")
    assert keys == {f"GS_NATS_PASSWORD_{suffix}", f"GS_REDIS_PASSWORD_{suffix}"}
    assert not any(item.get("valueFrom") for item in container.get("env", []))


def test_neither_server_gets_a_password_only_their_hashes(tree: Path, base: list[Obj]) -> None:
    """Test NATS and Redis get no password at all, in their environment or anywhere in their
    manifests: NATS's nats.conf and the passwords.conf of bcrypt hashes it includes share one
    folder, from the ConfigMap and the hashes Secret; Redis's ACL file, from the Secret built
    from the file greenserve secrets writes beside secure.env, holds one SHA-256 hash per
    identity of its secure.env password, and the rules of shared.security.redis_acl."""
    import hashlib

    from greenserve.secure_env import redis_users_text

    secrets = _by(base, "Secret")
    workloads = _workloads(base)
    passwords = {
        key: base64.b64decode(value).decode()
        for key, value in secrets["greenserve-credentials"]["data"].items()
    }
    for name in ("nats", "redis"):
        container = _main(workloads[name])
        assert not container.get("env"), name
        manifests = yaml.safe_dump([o for o in base if o["metadata"]["name"] == name])
        assert "PASSWORD" not in manifests, name
        assert "greenserve-credentials" not in manifests, name
        assert not any(value in manifests for value in passwords.values()), name
    nats = _main(workloads["nats"])
    [mount] = [m for m in nats["volumeMounts"] if m["mountPath"] == "/etc/greenserve"]
    [volume] = [v for v in workloads["nats"]["spec"]["template"]["spec"]["volumes"]
                if v["name"] == mount["name"]]  # fmt: skip
    sources = volume["projected"]["sources"]
    files = {
        item["path"]: (kind, source[kind]["name"], item["key"])
        for source in sources
        for kind in ("configMap", "secret")
        if kind in source
        for item in source[kind]["items"]
    }
    assert files["nats.conf"] == ("configMap", "greenserve-server-config", "nats.conf")
    assert files["passwords.conf"] == ("secret", "greenserve-nats-passwords", "passwords.conf")
    config = _by(base, "ConfigMap")["greenserve-server-config"]["data"]["nats.conf"]
    assert 'include "passwords.conf"' in config
    hashes = base64.b64decode(secrets["greenserve-nats-passwords"]["data"]["passwords.conf"])
    names = {line.split(":")[0] for line in hashes.decode().splitlines() if line[:1] != "#"}
    assert names == {f"GS_NATS_PASSWORD_{u.upper().replace('-', '_')}" for u in _identities()}

    redis = _main(workloads["redis"])
    [mount] = [m for m in redis["volumeMounts"] if m["mountPath"] == "/etc/greenserve"]
    assert mount["readOnly"] is True
    [volume] = [v for v in _pod(workloads["redis"])["volumes"] if v["name"] == mount["name"]]
    source = volume["secret"]
    assert source["secretName"] == "greenserve-redis-users"
    assert source["items"] == [{"key": "users.acl", "path": "users.acl"}]
    assert f"{mount['mountPath']}/users.acl" == REDIS_ACL_FILE
    # Readable by redis's uid 999 only through the pod's fsGroup, by nobody else.
    assert source["defaultMode"] == 0o440
    assert _pod(workloads["redis"])["securityContext"]["fsGroup"] == 999
    acl = base64.b64decode(secrets["greenserve-redis-users"]["data"]["users.acl"]).decode()
    assert acl == (tree / "base" / "secure.redis-users.acl").read_text(encoding="utf-8")
    assert acl == redis_users_text(passwords)
    for user in _identities():
        digest = hashlib.sha256(passwords[_variable("REDIS", user)].encode()).hexdigest()
        assert f"user {user} on #{digest} " in acl
    assert not any(value in acl for value in passwords.values())


def _variable(kind: str, user: str) -> str:
    return f"GS_{kind}_PASSWORD_{user.upper().replace('-', '_')}"


def _selects(selector: Obj, labels: dict[str, str]) -> bool:
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for rule in selector.get("matchExpressions", []):
        value = labels.get(rule["key"])
        if rule["operator"] == "In" and value not in rule["values"]:
            return False
        if rule["operator"] == "Exists" and value is None:
            return False
    return True


def _allowed(base: list[Obj], source: dict[str, str], target: str, port: str) -> bool:
    """Whether a pod labelled ``source`` in this namespace may open ``target``'s ``port``."""
    labels = _workloads(base)[target]["spec"]["template"]["metadata"]["labels"]
    for policy in _by(base, "NetworkPolicy").values():
        spec = policy["spec"]
        if not _selects(spec["podSelector"], labels):
            continue
        for rule in spec.get("ingress", []):
            ports = {p["port"] for p in rule.get("ports", [])}
            if ports and port not in ports:
                continue
            peers = rule.get("from")
            if peers is None or any(_selects(p.get("podSelector", {}), source) for p in peers):
                return True
    return False


def test_network_policies_follow_the_identities(base: list[Obj]) -> None:
    """Test that every GreenServe pod is labelled with the user it authenticates as, that
    exactly those pods reach NATS, Redis and Jaeger, that anyone reaches the gateway's API,
    and that an unlabelled pod reaches nothing else."""
    workloads = _workloads(base)
    identities = _identities()
    deployed_users = set(identities) - TOOLS - {"worker-vllm"}
    assert set(DEPLOYED) == deployed_users
    stranger = {"app.kubernetes.io/name": "debug"}
    for name in DEPLOYED:
        labels = workloads[name]["spec"]["template"]["metadata"]["labels"]
        env = _k8s_env(base, _main(workloads[name]))
        assert labels["greenserve.io/identity"] == env["GREENSERVE_NATS__USER"] == name
        for target, port in (("nats", "client"), ("redis", "redis"), ("jaeger", "otlp-http")):
            assert _allowed(base, labels, target, port), (name, target)
        assert not _allowed(base, stranger, name, "metrics")
    for target, port in (("nats", "client"), ("redis", "redis"), ("jaeger", "otlp-http")):
        assert not _allowed(base, stranger, target, port), target
        assert not _allowed(base, {"greenserve.io/identity": "admin"}, target, port), target
    assert _allowed(base, stranger, "gateway", "http")
    prometheus = {"app.kubernetes.io/name": "prometheus"}
    assert all(_allowed(base, prometheus, name, "metrics") for name in DEPLOYED)
    deny = _by(base, "NetworkPolicy")["default-deny-ingress"]["spec"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress"]}


# --- pod security and the dvfs agent -------------------------------------------------------


def _containers(workload: Obj) -> Iterator[Obj]:
    pod = _pod(workload)
    yield from pod["containers"]
    yield from pod.get("initContainers", [])


def test_every_pod_meets_the_restricted_pod_security_standard(base: list[Obj]) -> None:
    """Test the restricted level the namespace enforces: non-root, RuntimeDefault seccomp,
    no privilege escalation, every capability dropped, no host namespaces or paths."""
    [namespace] = _by(base, "Namespace").values()
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    for name, workload in _workloads(base).items():
        pod = _pod(workload)
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["runAsUser"] != 0, name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert not {"hostPID", "hostNetwork", "hostIPC"} & set(pod), name
        assert all("hostPath" not in v for v in pod.get("volumes", [])), name
        for container in _containers(workload):
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, name
            assert context["capabilities"] == {"drop": ["ALL"]}, name


def test_the_dvfs_agent_runs_on_the_gpu_node_it_is_scoped_to(base: list[Obj]) -> None:
    """Test the DaemonSet lands on GPU nodes (NVIDIA's node label and taint) labelled with
    the node id its identity is scoped to, and the workers it governs name that node."""
    dvfs = _workloads(base)["dvfs"]
    pod = _pod(dvfs)
    node_id = _k8s_env(base, _main(dvfs))["GREENSERVE_DVFS__NODE_ID"]
    assert _identities()["dvfs"].scope == node_id
    assert pod["nodeSelector"] == {
        "nvidia.com/gpu.present": "true",
        "greenserve.io/node-id": node_id,
    }
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    for name, workload in _workloads(base).items():
        env = _k8s_env(base, _main(workload)) if name in DEPLOYED else {}
        if "GREENSERVE_WORKER__NODE_ID" in env:
            assert env["GREENSERVE_WORKER__NODE_ID"] == node_id, name


# --- the nvml-clocks overlay: the clock agent (clockd) and its workers --------------------


def _keyed(objects: list[Obj]) -> dict[tuple[str, str], Obj]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def _seconds(duration: str) -> int:
    match = re.fullmatch(r"(\d+)s", duration)
    assert match, f"{duration!r}: write compose durations in seconds"
    return int(match.group(1))


def _opted_in(objects: list[Obj]) -> dict[str, Obj]:
    """The workloads whose worker sends its clock commands to the clock agent."""
    return {
        name: workload
        for name, workload in _workloads(objects).items()
        if name in DEPLOYED
        and _k8s_env(objects, _main(workload)).get("GREENSERVE_WORKER__GPU_CLOCKS") == "nvml"
    }


def _host_dir(workload: Obj, container: Obj, mount_path: str) -> tuple[Obj, Obj]:
    """The volume mount at ``mount_path`` and the hostPath it mounts."""
    [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == mount_path]
    [volume] = [v for v in _pod(workload)["volumes"] if v["name"] == mount["name"]]
    assert "hostPath" in volume, f"{mount_path}: not a host directory"
    host: Obj = volume["hostPath"]
    return mount, host


def _node_admits(pod: Obj, node_labels: dict[str, str]) -> bool:
    """Whether ``pod``'s node selector and required node affinity admit a node so labelled."""
    if not pod.get("nodeSelector", {}).items() <= node_labels.items():
        return False
    affinity = pod.get("affinity", {}).get("nodeAffinity", {})
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return True
    return any(
        _selects({"matchExpressions": term.get("matchExpressions", [])}, node_labels)
        for term in required["nodeSelectorTerms"]
    )


def _clock_path_problems(objects: list[Obj]) -> list[str]:
    """What keeps an opted-in worker from reaching its node's clock agent, one line each."""
    agent = _workloads(objects).get("clockd")
    if agent is None:
        return ["no clockd workload"]
    command = _main(agent)["command"]
    problems = []
    if command != COMPOSE["clockd"]["command"]:
        problems.append(f"clockd runs {command}, compose {COMPOSE['clockd']['command']}")
    socket = command[command.index("--socket") + 1]
    folder = str(Path(socket).parent)
    _, agent_dir = _host_dir(agent, _main(agent), folder)
    workers = _opted_in(objects)
    if not workers:
        problems.append("no worker sends its clock commands to the agent")
    for name, workload in workers.items():
        env = _k8s_env(objects, _main(workload))
        theirs = env.get("GREENSERVE_WORKER__CLOCK_AGENT_SOCKET")
        if theirs != socket:
            problems.append(f"{name} connects to {theirs}, the agent listens on {socket}")
            continue
        mount, host = _host_dir(workload, _main(workload), folder)
        if host != agent_dir:
            problems.append(f"{name} mounts host {host} at {folder}, the agent {agent_dir}")
        if mount.get("readOnly") is not True:
            problems.append(f"{name} mounts the agent's directory writable")
        pod = _pod(workload)
        node = {"nvidia.com/gpu.present": "true", **pod.get("nodeSelector", {})}
        if (
            pod.get("nodeSelector", {}).get("greenserve.io/node-id")
            != env["GREENSERVE_WORKER__NODE_ID"]
        ):
            problems.append(f"{name} may run on a node other than the one it names")
        elif not _node_admits(_pod(agent), node):
            problems.append(f"no clock agent runs on {name}'s node {node}")
    return problems


def test_the_overlay_adds_the_clock_agent_and_opts_the_workers_in(
    base: list[Obj], overlay: list[Obj]
) -> None:
    """Test that the overlay adds clockd and its NetworkPolicy, changes only the workers and
    the namespace's Pod Security level, and leaves the dvfs agent as the base has it."""
    before, after = _keyed(base), _keyed(overlay)
    assert set(before) <= set(after)
    assert set(after) - set(before) == {
        ("DaemonSet", "clockd"),
        ("NetworkPolicy", "clockd-no-network"),
    }
    changed = {key for key in before if before[key] != after[key]}
    assert changed == {
        ("Deployment", "worker-0"),
        ("Deployment", "worker-1"),
        ("Namespace", "greenserve"),
    }
    labels = after[("Namespace", "greenserve")]["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels["pod-security.kubernetes.io/warn"] == "restricted"
    assert labels["pod-security.kubernetes.io/audit"] == "restricted"
    assert set(_opted_in(overlay)) == {"worker-0", "worker-1"}
    assert not _opted_in(base)


def _privileges(workload: Obj) -> Iterator[tuple[int | None, list[str]]]:
    """Each container's effective uid (None: the image's) and its added capabilities."""
    pod_uid = _pod(workload).get("securityContext", {}).get("runAsUser")
    for container in _containers(workload):
        context = container.get("securityContext", {})
        added = context.get("capabilities", {}).get("add", [])
        yield context.get("runAsUser", pod_uid), added


@pytest.mark.parametrize("folder", ["base", OVERLAY])
def test_only_the_clock_agent_runs_as_root_or_holds_a_capability(tree: Path, folder: str) -> None:
    """Test every container but clockd's: a non-root uid and no capability added, the dvfs
    agent included (it only sends ClockCommands over NATS); nothing privileged anywhere."""
    for name, workload in _workloads(render(tree / folder)).items():
        pod = _pod(workload)
        assert not {"hostPID", "hostNetwork", "hostIPC"} & set(pod), name
        for container in _containers(workload):
            assert container.get("securityContext", {}).get("privileged") is not True, name
        if name == "clockd":
            continue
        for uid, added in _privileges(workload):
            assert uid not in (None, 0), name
            assert added == [], name
        assert pod["securityContext"]["runAsNonRoot"] is True, name
    dvfs = _main(_workloads(render(tree / folder))["dvfs"])
    assert not any(e["name"].startswith("NVIDIA_") for e in dvfs.get("env", []))


def test_the_clock_agent_has_exactly_the_compose_services_privileges(overlay: list[Obj]) -> None:
    """Test clockd against the compose `clockd` service: its user, SYS_ADMIN and CHOWN
    with every other capability dropped, no escalation, a read-only root filesystem, every
    GPU through the NVIDIA runtime without taking one, and its one host directory."""
    agent = COMPOSE["clockd"]
    workload = _workloads(overlay)["clockd"]
    pod, container = _pod(workload), _main(workload)
    context = pod["securityContext"]
    assert f"{context['runAsUser']}:{context['runAsGroup']}" == agent["user"] == "0:0"
    assert context["runAsNonRoot"] is False
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert [uid for uid, _ in _privileges(workload)] == [0]
    own = container["securityContext"]
    assert own["capabilities"]["drop"] == agent["cap_drop"] == ["ALL"]
    assert sorted(own["capabilities"]["add"]) == sorted(agent["cap_add"])
    assert sorted(agent["cap_add"]) == ["CHOWN", "SYS_ADMIN"]
    assert own["privileged"] is False
    assert own["allowPrivilegeEscalation"] is False
    assert own["readOnlyRootFilesystem"] is True
    assert pod["automountServiceAccountToken"] is False
    assert container["image"] == agent["image"]
    assert _k8s_env(overlay, container) == {
        "NVIDIA_VISIBLE_DEVICES": "all",
        "NVIDIA_DRIVER_CAPABILITIES": "utility",
    }
    [device] = agent["deploy"]["resources"]["reservations"]["devices"]
    assert device["count"] == "all"
    assert "utility" in device["capabilities"]
    assert "nvidia.com/gpu" not in str(container["resources"])
    [volume] = pod["volumes"]
    assert "hostPath" in volume
    assert "ports" not in container  # no metrics port: it binds 127.0.0.1 only


def test_the_clock_agent_command_grace_and_probe_are_the_compose_services(
    overlay: list[Obj],
) -> None:
    """Test clockd's command, its SIGTERM grace (the reset of every GPU) and its probes
    (a connection to the socket) equal the compose service's, so the two cannot drift."""
    agent = COMPOSE["clockd"]
    workload = _workloads(overlay)["clockd"]
    container = _main(workload)
    assert container["command"] == agent["command"]
    assert container["command"][:3] == ["python", "-m", "services.clockd"]
    grace = _pod(workload)["terminationGracePeriodSeconds"]
    assert grace == _seconds(agent["stop_grace_period"])
    check = agent["healthcheck"]["test"]
    assert check[0] == "CMD"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["exec"]["command"] == check[1:], probe
    socket = container["command"][container["command"].index("--socket") + 1]
    assert socket in check[-1]
    resources = container["resources"]
    assert {"cpu", "memory"} <= set(resources["requests"])
    assert "memory" in resources["limits"]


def test_the_socket_group_is_the_workers_group(overlay: list[Obj]) -> None:
    """Test the socket's group is the image's user greenserve, whose group id (useradd gives
    the user's group its uid) is the opted-in workers' group."""
    command = _main(_workloads(overlay)["clockd"])["command"]
    group = command[command.index("--socket-group") + 1]
    assert "useradd --create-home --uid 10001 greenserve" in (
        REPO / "docker" / "Dockerfile"
    ).read_text(encoding="utf-8")
    assert group == "greenserve"
    for name, workload in _opted_in(overlay).items():
        context = _pod(workload)["securityContext"]
        assert context["runAsUser"] == context["runAsGroup"] == context["fsGroup"] == 10001, name


def test_the_workers_reach_the_agent_on_their_node(overlay: list[Obj]) -> None:
    """Test each opted-in worker names the agent's socket, mounts the agent's host
    directory read-only, and is pinned to its own node, where a clock agent runs."""
    assert _clock_path_problems(overlay) == []
    vllm = _compose_env("worker-vllm")
    command = COMPOSE["clockd"]["command"]
    assert vllm["GREENSERVE_WORKER__CLOCK_AGENT_SOCKET"] == command[command.index("--socket") + 1]


def test_a_broken_clock_path_is_reported(overlay: list[Obj]) -> None:
    """Test the clock-path check on copies of the overlay broken one way each."""

    def broken(change: Callable[[dict[str, Obj]], None]) -> list[str]:
        objects = copy.deepcopy(overlay)
        change(_workloads(objects))
        return _clock_path_problems(objects)

    def other_socket(w: dict[str, Obj]) -> None:
        _main(w["clockd"])["command"][4] = "/run/greenserve/other.sock"

    def other_host_dir(w: dict[str, Obj]) -> None:
        [volume] = [v for v in _pod(w["worker-1"])["volumes"] if "hostPath" in v]
        volume["hostPath"]["path"] = "/var/run/elsewhere"

    def writable(w: dict[str, Obj]) -> None:
        for mount in _main(w["worker-0"])["volumeMounts"]:
            mount.pop("readOnly", None)

    def unpinned(w: dict[str, Obj]) -> None:
        del _pod(w["worker-0"])["nodeSelector"]["greenserve.io/node-id"]

    def agent_elsewhere(w: dict[str, Obj]) -> None:
        _pod(w["clockd"])["nodeSelector"]["greenserve.io/node-id"] = "node-9"

    assert any("connects to" in p for p in broken(other_socket))
    assert any("worker-1 mounts host" in p for p in broken(other_host_dir))
    assert any("writable" in p for p in broken(writable))
    assert any("other than the one it names" in p for p in broken(unpinned))
    assert any("no clock agent runs" in p for p in broken(agent_elsewhere))


def test_opted_in_workers_load_valid_clock_settings(
    overlay: list[Obj], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Test each opted-in worker's variables load into settings a worker starts with (GPU
    clocks need the instance's GPU indices) and no two workers of a node lock one GPU."""
    from shared.config import Settings

    gpus: dict[str, set[int]] = {}
    workers = _opted_in(overlay)
    assert set(workers) == {"worker-0", "worker-1"}
    for name, workload in workers.items():
        for variable in list(os.environ):
            if variable.startswith("GREENSERVE_"):
                monkeypatch.delenv(variable)
        env = _k8s_env(overlay, _main(workload))
        for variable, value in env.items():
            monkeypatch.setenv(variable, value)
        worker = Settings().worker
        assert worker.gpu_clocks == "nvml", name
        assert worker.nvml_gpu_indices, f"{name}: gpu_clocks nvml without nvml_gpu_indices"
        taken = gpus.setdefault(worker.node_id, set())
        assert not taken & set(worker.nvml_gpu_indices), f"{name} shares a GPU"
        taken |= set(worker.nvml_gpu_indices)


def test_the_clock_agent_has_no_network(overlay: list[Obj]) -> None:
    """Test the policies that select clockd's pod deny its egress and admit no ingress."""
    labels = _workloads(overlay)["clockd"]["spec"]["template"]["metadata"]["labels"]
    selecting = [
        p["spec"]
        for p in _by(overlay, "NetworkPolicy").values()
        if _selects(p["spec"]["podSelector"], labels)
    ]
    assert any("Egress" in spec["policyTypes"] for spec in selecting)
    assert all(not spec.get("egress") for spec in selecting)
    assert all(not spec.get("ingress") for spec in selecting)
    assert any("Ingress" in spec["policyTypes"] for spec in selecting)


def test_the_data_image_is_built_where_the_init_containers_copy_from(base: list[Obj]) -> None:
    """Test docker/Dockerfile.data builds the image the init containers use, with the data
    at the folder they copy from."""
    text = (REPO / "docker" / "Dockerfile.data").read_text(encoding="utf-8")
    for name in DEPLOYED:
        [init] = _pod(_workloads(base)[name])["initContainers"]
        assert f"-t {init['image']} " in text, name
        source = init["command"][-2].removesuffix("/.")
        assert re.search(rf"^COPY \. {re.escape(source)}$", text, re.MULTILINE), name

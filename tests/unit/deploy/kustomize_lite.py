"""Render deploy/k8s without kubectl: the part of kustomize those kustomizations use.

The tests validate what ``kubectl kustomize`` would apply, but kubectl is not on every
machine that runs them; so this reads the same files and does the same few things:
``resources`` (files and folders with their own kustomization), ``namespace``, ``labels``
(``includeTemplates``, never selectors), ``configMapGenerator`` (``files``),
``secretGenerator`` (``envs``, ``files``) without name hashes, and JSON 6902 ``patches`` (``add``,
``replace``, ``remove``). Anything else in a kustomization is refused, so a feature added
there fails here instead of being skipped. ``test_k8s.py`` compares this rendering with
kubectl's wherever kubectl is installed.
"""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import yaml

__all__ = ["KustomizeError", "render"]

_KNOWN = {
    "apiVersion",
    "kind",
    "namespace",
    "labels",
    "resources",
    "generatorOptions",
    "configMapGenerator",
    "secretGenerator",
    "patches",
}
_CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass"}
_TEMPLATED = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}

Obj = dict[str, Any]


class KustomizeError(ValueError):
    """A kustomization asks for something this renderer does not do, or is wrong."""


def render(folder: Path) -> list[Obj]:
    """The objects ``kubectl kustomize folder`` prints, in the order of its resources."""
    path = folder / "kustomization.yaml"
    spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    unknown = set(spec) - _KNOWN
    if unknown:
        raise KustomizeError(f"{path}: unsupported fields {sorted(unknown)}")
    objects: list[Obj] = []
    for entry in spec.get("resources", []):
        target = folder / entry
        if target.is_dir():
            objects += render(target)
        else:
            objects += [d for d in yaml.safe_load_all(target.read_text(encoding="utf-8")) if d]
    generates = spec.get("configMapGenerator") or spec.get("secretGenerator")
    if generates and not spec.get("generatorOptions", {}).get("disableNameSuffixHash"):
        raise KustomizeError(f"{path}: generated names with a hash are not rendered here")
    objects += [_config_map(folder, g) for g in spec.get("configMapGenerator", [])]
    objects += [_secret(folder, g) for g in spec.get("secretGenerator", [])]
    for patch in spec.get("patches", []):
        _patch(objects, patch, path)
    for obj in objects:
        if "namespace" in spec and obj["kind"] not in _CLUSTER_SCOPED:
            obj["metadata"]["namespace"] = spec["namespace"]
        for labels in spec.get("labels", []):
            _label(obj, labels, path)
    return objects


def _config_map(folder: Path, generator: Obj) -> Obj:
    if set(generator) - {"name", "files"}:
        raise KustomizeError(f"configMapGenerator {generator['name']}: only files")
    data = {
        Path(name).name: (folder / name).read_text(encoding="utf-8") for name in generator["files"]
    }
    meta = {"name": generator["name"]}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def _secret(folder: Path, generator: Obj) -> Obj:
    if set(generator) - {"name", "envs", "files"}:
        raise KustomizeError(f"secretGenerator {generator['name']}: only envs and files")
    data: dict[str, str] = {}
    for entry in generator.get("files", []):
        # "key=path" names the key; a bare path keys by its file name, as kustomize does.
        key, _, name = entry.rpartition("=")
        text = (folder / name).read_text(encoding="utf-8")
        data[key or Path(name).name] = _base64(text)
    for name in generator.get("envs", []):
        for line in (folder / name).read_text(encoding="utf-8").splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                key, _, value = line.partition("=")
                data[key] = _base64(value)
    meta = {"name": generator["name"]}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque", "data": data}


def _base64(text: str) -> str:
    """As kustomize encodes a Secret's value: base64, broken into 70-character lines (each
    ended by a newline) once it is longer than one line."""
    encoded = base64.b64encode(text.encode()).decode()
    if len(encoded) <= _BASE64_LINE:
        return encoded
    lines = [encoded[i : i + _BASE64_LINE] for i in range(0, len(encoded), _BASE64_LINE)]
    return "\n".join(lines) + "\n"


_BASE64_LINE = 70


def _label(obj: Obj, entry: Obj, path: Path) -> None:
    if entry.get("includeSelectors"):
        raise KustomizeError(f"{path}: labels with includeSelectors are not rendered here")
    pairs = entry["pairs"]
    obj["metadata"].setdefault("labels", {}).update(pairs)
    if entry.get("includeTemplates") and obj["kind"] in _TEMPLATED:
        template = obj["spec"]["template"]
        template.setdefault("metadata", {}).setdefault("labels", {}).update(pairs)
        for claim in obj["spec"].get("volumeClaimTemplates", []):
            claim.setdefault("metadata", {}).setdefault("labels", {}).update(pairs)


def _patch(objects: list[Obj], patch: Obj, path: Path) -> None:
    target = patch["target"]
    matches = [
        o
        for o in objects
        if o["kind"] == target["kind"] and o["metadata"]["name"] == target["name"]
    ]
    if len(matches) != 1:
        raise KustomizeError(f"{path}: patch target {target} matches {len(matches)} objects")
    for op in yaml.safe_load(patch["patch"]):
        _apply(matches[0], op)


def _apply(obj: Obj, op: Obj) -> None:
    """One JSON 6902 operation (RFC 6901 pointers: ``~1`` is ``/``, ``~0`` is ``~``)."""
    tokens = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
    parent: Any = obj
    for token in tokens[:-1]:
        parent = parent[int(token)] if isinstance(parent, list) else parent[token]
    last = tokens[-1]
    value = copy.deepcopy(op.get("value"))
    if op["op"] == "remove":
        del parent[int(last) if isinstance(parent, list) else last]
    elif isinstance(parent, list):
        if op["op"] == "add":
            parent.insert(len(parent) if last == "-" else int(last), value)
        elif op["op"] == "replace":
            parent[int(last)] = value
        else:
            raise KustomizeError(f"unsupported patch op {op['op']!r}")
    elif op["op"] == "replace" and last not in parent:
        raise KustomizeError(f"replace of missing {op['path']}")
    elif op["op"] in {"add", "replace"}:
        parent[last] = value
    else:
        raise KustomizeError(f"unsupported patch op {op['op']!r}")

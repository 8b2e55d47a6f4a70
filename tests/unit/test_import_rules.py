"""The package rules: services import only ``shared/`` and ``proto/``, never each other,
``shared/`` imports nothing from ``services/``, and every module under ``services/`` is one a
running service imports (lab code lives in ``loadgen/`` or ``greenserve/bench/``).

Every ``import`` and ``from … import`` counts, at module level and inside functions (an
import moved into a function to dodge a cycle is still a dependency), relative ones
resolved against the importing module's package.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _module_name(path: Path) -> tuple[str, ...]:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return parts[:-1] if parts[-1] == "__init__" else parts


def _from_stem(node: ast.ImportFrom, package: tuple[str, ...]) -> str:
    """The dotted module a ``from … import`` reads from, relative ones resolved."""
    if node.level:
        base = package[: len(package) - (node.level - 1)]
        return ".".join((*base, *([node.module] if node.module else [])))
    return node.module or ""


def imported_modules(
    source: str, module: tuple[str, ...], is_package: bool
) -> Iterator[tuple[int, str]]:
    """Yield ``(line, dotted module)`` of every import in ``source``, one per statement
    (``from services import router`` imports ``services.router``)."""
    package = module if is_package else module[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            stem = _from_stem(node, package)
            if "." in stem:
                yield node.lineno, stem
            else:  # ``from services import router`` imports the package services.router
                for alias in node.names:
                    yield node.lineno, f"{stem}.{alias.name}" if stem else alias.name


def offences(source: str, module: tuple[str, ...], is_package: bool = False) -> list[str]:
    """The imports in ``source`` (the text of ``module``) that break the package rules."""
    found = []
    for line, name in imported_modules(source, module, is_package):
        target = name.split(".")
        if target[0] != "services" or len(target) < 2:
            continue
        here = ".".join(module)
        if module[0] == "shared":
            found.append(f"{here}:{line} imports {name} (shared/ must not)")
        elif module[0] == "services" and len(module) > 1 and target[1] != module[1]:
            found.append(f"{here}:{line} imports {name} (another service)")
    return sorted(set(found))


def file_offences(path: Path) -> list[str]:
    """The imports of the file at ``path`` that break the package rules."""
    return offences(path.read_text(), _module_name(path), path.name == "__init__.py")


def _python_files(folder: str) -> list[Path]:
    return sorted(p for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)


def test_no_service_imports_another_service() -> None:
    """Test that no ``services.X`` module imports ``services.Y`` (X ≠ Y), at any depth."""
    files = _python_files("services")
    assert len(files) > 50  # the walk found the services
    bad = [o for path in files for o in file_offences(path)]
    assert not bad, "services import only shared/ and proto/:\n" + "\n".join(bad)


def test_shared_imports_nothing_from_services() -> None:
    """Test that ``shared/`` (the domain included) does not import ``services/``."""
    files = _python_files("shared")
    assert any(p.parts[-2] == "domain" for p in files)
    bad = [o for path in files for o in file_offences(path)]
    assert not bad, "shared/ must not import services/:\n" + "\n".join(bad)


SERVICE_ENTRY_POINTS = ("__main__", "service")
"""The modules a service process starts from: ``python -m services.X`` runs ``__main__``;
the in-process runner and the co-located request path call ``service``."""

UNREACHED_ON_PURPOSE: dict[str, str] = {}
"""Modules under ``services/`` that no service imports, each with why it stays there."""


def _service_modules() -> dict[str, Path]:
    return {".".join(_module_name(p)): p for p in _python_files("services")}


def _services_imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that the module ``name`` (at ``path``) imports: for
    ``from a.b import c`` the module ``a.b.c`` where there is one, else ``a.b``; importing a
    module imports its packages too."""
    is_package = path.name == "__init__.py"
    module = tuple(name.split("."))
    package = module if is_package else module[:-1]
    candidates: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            candidates += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            stem = _from_stem(node, package)
            candidates.append(stem)
            candidates += [f"{stem}.{alias.name}" for alias in node.names]
    found = set()
    for candidate in candidates:
        parts = candidate.split(".")
        found |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & set(known)
    return found


def reached_from_entry_points(known: dict[str, Path]) -> set[str]:
    """Every module of ``known`` that a service entry point imports, directly or not."""
    todo = [m for m in known if m.rpartition(".")[2] in SERVICE_ENTRY_POINTS]
    reached: set[str] = set()
    while todo:
        name = todo.pop()
        if name in reached:
            continue
        reached.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in known]
        todo += _services_imported(name, known[name], known)
    return reached


def test_every_service_module_is_reached_from_a_service_entry_point() -> None:
    """Test that each module under ``services/`` is imported, directly or through others,
    by some service's ``__main__.py`` or ``service.py``. A backtest, an evaluation harness
    or a simulator-only piece belongs in ``loadgen/`` or ``greenserve/bench/``: kept under
    ``services/`` it reads as something a service runs."""
    known = _service_modules()
    reached = reached_from_entry_points(known)
    assert {"services.worker.admission", "services.router.bfio"} <= reached  # the walk works
    unreached = sorted(set(known) - reached - set(UNREACHED_ON_PURPOSE))
    assert not unreached, "no service imports these; move them out of services/:\n" + (
        "\n".join(unreached)
    )
    assert sorted(set(UNREACHED_ON_PURPOSE) & reached) == []  # an exception no longer needed


def test_the_reach_walk_follows_packages_and_from_imports(tmp_path: Path) -> None:
    """Test that ``from services.x import y`` reaches the module ``y`` (not only the package)
    and that a module reached makes its packages reached; an unimported module stays out."""
    files = {
        "services/__init__.py": "",
        "services/x/__init__.py": "",
        "services/x/service.py": "from services.x import y\n",
        "services/x/y.py": "def f():\n    from .z import g\n",
        "services/x/z.py": "",
        "services/x/lab.py": "from services.x import z\n",
    }
    known = {}
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        parts = Path(rel).with_suffix("").parts
        known[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    reached = reached_from_entry_points(known)
    assert set(known) - reached == {"services.x.lab"}


@pytest.mark.parametrize(
    ("source", "module", "expected"),
    [
        ("from services.classifier.core import x", "services.dvfs.service", ["classifier"]),
        ("def f():\n    import services.planner.plan\n", "services.worker.shim", ["planner"]),
        ("from services import router", "services.scheduler.service", ["router"]),
        ("from ..router import service", "services.scheduler.service", ["router"]),
        ("from .controller import X", "services.dvfs.service", []),
        ("from services.dvfs.controller import X", "services.dvfs.service", []),
        ("from shared.domain.classes import X", "services.dvfs.service", []),
        ("from services.dvfs import controller", "shared.domain.plan", ["dvfs"]),
    ],
)
def test_the_check_sees_each_form_of_import(source: str, module: str, expected: list[str]) -> None:
    """Test that the rule catches absolute, nested, ``from services import`` and relative
    imports of another service, and lets a service's own modules and shared/ through."""
    found = offences(source, tuple(module.split(".")))
    targets = {o.split(" imports ")[1].split(".")[1].split(" ")[0] for o in found}
    assert sorted(targets) == expected

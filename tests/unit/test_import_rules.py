"""The package rules: services import only ``shared/`` and ``proto/``, never each other, and
``shared/`` imports nothing from ``services/``.

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
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                stem = ".".join((*base, *([node.module] if node.module else [])))
            else:
                stem = node.module or ""
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

"""A package's names imported from their modules on first use (PEP 562).

Packages whose light parts must stay light (a CLI's ``--help`` reads a few of their names)
re-export their heavy names through this instead of importing every module at once.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping

__all__ = ["lazy_getattr"]


def lazy_getattr(package: str, module_of: Mapping[str, str]) -> Callable[[str], object]:
    """Return a module ``__getattr__`` that imports ``package.<module_of[name]>`` for ``name``."""

    def attribute(name: str) -> object:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return attribute

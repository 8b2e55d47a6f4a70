"""Benchmarks: one module per `greenserve bench <name>` command.

Every module in this package that defines ``NAME`` is a benchmark. It must define:

- ``NAME: str``: the command name (``"engine-accuracy"``),
- ``HELP: str``: one line for ``--help``,
- ``add_arguments(parser: argparse.ArgumentParser) -> None``,
- ``run(args: argparse.Namespace) -> dict[str, Any]``: does the work, returns the result.

The CLI prints human-readable progress on stderr and, with ``--json``, the result as one
JSON object on the last line of stdout. Discovery by module keeps benchmarks independent:
adding one never edits a shared registry file.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

__all__ = ["discover"]


def discover() -> dict[str, ModuleType]:
    """Return every benchmark module of this package, keyed by its command name."""
    found: dict[str, ModuleType] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        name = getattr(module, "NAME", None)
        if isinstance(name, str):
            found[name] = module
    return found

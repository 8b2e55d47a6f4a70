"""The ``greenserve`` command line.

Sub-commands are discovered from :mod:`greenserve.commands` (one module per command), so
each capability adds its own command without editing this file.

Building the parser imports every command module and every benchmark's options module, so
none of them imports anything heavy at the top (numpy, scikit-learn, NATS, Redis, aiohttp,
pydantic): a command imports its work in ``run``. ``greenserve --help`` and each command's
``--help`` then answer in a fraction of a second (``greenserve bench cli-help`` measures
it), where importing everything took seconds.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import NoReturn

from greenserve import commands

__all__ = ["build_parser", "main"]


class _OneLineParser(argparse.ArgumentParser):
    """A parser whose usage errors are one line on stderr and exit status 2, as for every
    other wrong input (argparse would print the whole usage block first, which for a bench
    is a dozen lines above the one that says what is wrong). Sub-parsers inherit the class."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _command_modules() -> dict[str, ModuleType]:
    found: dict[str, ModuleType] = {}
    for info in pkgutil.iter_modules(commands.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        name = getattr(module, "NAME", None)
        if isinstance(name, str):
            found[name] = module
    return found


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, ModuleType]]:
    """Build the top-level parser with one sub-parser per discovered command."""
    # Typed as the base class: the sub-parsers argparse makes are _OneLineParsers too (it
    # uses type(parser)), but the commands' functions take plain ArgumentParsers.
    parser: argparse.ArgumentParser = _OneLineParser(
        prog="greenserve",
        description="Carbon- and energy-aware control plane for LLM serving.",
        formatter_class=commands.HelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    modules = _command_modules()
    for name in sorted(modules):
        module = modules[name]
        module.add_arguments(commands.add_subcommand(sub, name, module.HELP))
    return parser, modules


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return the process exit status."""
    parser, modules = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # Imported once a command runs (it imports pydantic and yaml, which --help does not need).
    from greenserve.commands._input_errors import USER_ERRORS, one_line

    try:
        result: int = modules[args.command].run(args)
    except USER_ERRORS as exc:
        # A path, trace or scenario the user gave is wrong: say which, not where it was read.
        if args.verbose:
            raise
        print(f"greenserve {args.command}: {one_line(exc)}", file=sys.stderr)
        return 2
    return result


if __name__ == "__main__":
    sys.exit(main())

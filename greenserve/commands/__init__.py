"""CLI sub-commands: each module defines NAME, HELP, add_arguments(parser) and run(args) -> int."""

from __future__ import annotations

import argparse

__all__ = ["add_subcommand"]


def add_subcommand(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, text: str
) -> argparse.ArgumentParser:
    """Add sub-parser ``name`` with ``text`` as its help and description.

    argparse %-formats help strings, and a HELP may quote a figure such as "-13 %".
    """
    return sub.add_parser(name, help=text.replace("%", "%%"), description=text)

"""CLI sub-commands: each module defines NAME, HELP, add_arguments(parser) and run(args) -> int.

The CLI imports every one of these modules to build its parser, so a module imports what its
``run`` needs inside ``run`` (or from a private ``_*.py`` module imported there), never at
the top: see :mod:`greenserve.cli`.
"""

from __future__ import annotations

import argparse
import textwrap

__all__ = ["HelpFormatter", "add_subcommand"]


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, except that help text is not broken at hyphens: a policy set
    such as ``greenserve-planned-split`` stays whole on one line."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


def add_subcommand(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, text: str
) -> argparse.ArgumentParser:
    """Add sub-parser ``name`` with ``text`` as its help and description.

    argparse %-formats help strings, and a HELP may quote a figure such as "-13 %".
    """
    return sub.add_parser(
        name, help=text.replace("%", "%%"), description=text, formatter_class=HelpFormatter
    )

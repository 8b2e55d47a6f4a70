"""Options whose values are a long list of names (the simulator's policy sets).

argparse writes ``choices`` into the usage line as ``{a,b,c,...}``, one token it cannot
break: with every policy set in it that token alone is a dozen terminal lines. Such options show a
short ``metavar`` in the usage and list the names once, in their help text, where argparse
wraps them to the terminal.
"""

from __future__ import annotations

from collections.abc import Iterable

from loadgen.simulator.policy_names import CLI_POLICY_NAMES

__all__ = ["POLICY_METAVAR", "POLICY_NAMES", "listed"]

POLICY_NAMES: tuple[str, ...] = tuple(sorted(CLI_POLICY_NAMES))
"""The policy sets the CLI offers (``loadgen.simulator.policy_names``, a module that imports
nothing heavy), sorted as argparse lists them."""

POLICY_METAVAR = "POLICY"
"""What the usage line shows in place of the policy names."""


def listed(help_text: str, choices: Iterable[str]) -> str:
    """``help_text`` followed by the choices, for an option whose usage shows a metavar.

    Args:
        help_text: what the option does (may be empty).
        choices: the accepted values, in the order to show them.

    Returns:
        The help text ending with "one of: a, b, c".
    """
    names = ", ".join(choices)
    return f"{help_text}; one of: {names}" if help_text else f"one of: {names}"

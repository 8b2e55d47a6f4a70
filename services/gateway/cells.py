"""Which cell takes a request: the one this gateway has the fewest requests in flight with.

Cells (``docs/architecture.md``, cells) are whole stacks on shared servers, each with its
own ingress stream and reply space. A gateway configured with ``gateway.cells`` is a front
door to all of them: each request goes to the cell where this gateway has the fewest
requests in flight, ties going round the cells in turn. Joining the shortest queue keeps
each cell's backlog shorter than a random split would (a random split of a Poisson stream
leaves every cell a Poisson stream of its own, bursts included); with several gateways
each balances its own share, which is what a load balancer in front of them would do too.

A cell whose ingress stream does not answer (no stream: the cell is down or not yet
started) is skipped for ``retry_s``; its requests go to the others. Pure: the clock is an
argument, so tests step it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from proto.subjects import Subjects

__all__ = ["Cell", "CellPicker"]


@dataclass(slots=True)
class Cell:
    """One cell as a gateway sees it: its subjects and this gateway's requests there."""

    subjects: Subjects
    index: int
    """Position in the gateway's list of cells (ties go round in this order)."""
    in_flight: int = 0
    down_until: float = 0.0
    """Monotonic time before which the cell is skipped (its ingress stream did not answer)."""


class CellPicker:
    """Join the shortest queue over cells, counting this gateway's own requests in flight."""

    def __init__(self, namespaces: Sequence[str], retry_s: float = 5.0) -> None:
        """``namespaces``: the cells' namespaces, each once.

        Raises:
            ValueError: none given, a repeated one, or one that is not a subject token.
        """
        if not namespaces:
            raise ValueError("a gateway needs at least one cell")
        if len(set(namespaces)) != len(namespaces):
            raise ValueError(f"cells named twice in {list(namespaces)}")
        self.cells = [Cell(Subjects(ns), i) for i, ns in enumerate(namespaces)]
        self._retry_s = retry_s
        self._turn = 0

    def pick(self, now: float, exclude: Sequence[Cell] = ()) -> Cell | None:
        """The cell for the next request (counted in flight there), or ``None`` if every
        cell not in ``exclude`` is down.

        A cell marked down comes back once its ``retry_s`` has passed; when every cell is
        down the least recently failed one is tried anyway, so a restarted fleet is found
        without waiting out the timer.
        """
        candidates = [c for c in self.cells if all(c is not e for e in exclude)]
        if not candidates:
            return None
        up = [c for c in candidates if c.down_until <= now]
        if not up:
            up = [min(candidates, key=lambda c: c.down_until)]
        n = len(self.cells)
        # Ties go to the first cell at or after the turn, so an idle fleet is used in turn.
        start = self._turn
        best = min(up, key=lambda c: (c.in_flight, (c.index - start) % n))
        self._turn = (best.index + 1) % n
        best.in_flight += 1
        return best

    def release(self, cell: Cell) -> None:
        """A request picked for ``cell`` ended (answered, failed or abandoned)."""
        cell.in_flight = max(0, cell.in_flight - 1)

    def mark_down(self, cell: Cell, now: float) -> None:
        """``cell``'s ingress did not answer: skip it for ``retry_s``."""
        cell.down_until = now + self._retry_s

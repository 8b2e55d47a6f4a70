"""Request classes by input × output length, their SLOs, and the output-length predictor contract.

A :class:`ClassScheme` is a set of token thresholds that names each request by two bucket
letters, input first (DynamoLLM §1.1, Table IV: ``SS`` … ``LL``; FREESH §2.2, Table 4: the
two-way partitions ``a`` and ``b``). The planner picks the scheme; the classifier applies it.

Everything here is pure except :func:`freesh_scheme`, an explicit loader of the FREESH
partition table.
"""

from __future__ import annotations

import csv
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

from shared.paths import data_path

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "DYNAMOLLM_SCHEME_NAME",
    "FREESH_SCHEME_PREFIX",
    "ClassSLO",
    "ClassScheme",
    "OutputLengthPredictor",
    "default_slos",
    "dynamollm_scheme",
    "freesh_scheme",
    "load_freesh_schemes",
    "percentile_scheme",
    "scheme_by_name",
]

DYNAMOLLM_SCHEME_NAME: Final = "dynamollm9"
"""Name of DynamoLLM's nine-class scheme (Table IV)."""

FREESH_SCHEME_PREFIX: Final = "freesh-"
"""Prefix of FREESH partition scheme names (``freesh-a``, ``freesh-b``)."""

_THREE_LABELS: Final = ("S", "M", "L")
_TWO_LABELS: Final = ("S", "L")


def _bucket(edges: tuple[int, ...], tokens: int) -> int:
    """Return the index of the bucket holding ``tokens``; edges are exclusive upper bounds."""
    for index, edge in enumerate(edges):
        if tokens < edge:
            return index
    return len(edges)


def _check_edges(kind: str, edges: tuple[int, ...]) -> None:
    if any(edge <= 0 for edge in edges):
        raise ValueError(f"{kind} edges must be positive token counts, got {edges}")
    if any(later <= earlier for earlier, later in itertools.pairwise(edges)):
        raise ValueError(f"{kind} edges must increase strictly, got {edges}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassScheme:
    """A set of token thresholds naming request classes (DynamoLLM Table IV, FREESH Table 4).

    A request with ``p`` prompt tokens and ``o`` output tokens falls in input bucket ``i``,
    the first with ``p < input_edges[i]`` (the last bucket when none), and likewise for the
    output; its class is ``labels[i] + labels[j]``.
    """

    name: str
    """Scheme name, e.g. ``"dynamollm9"``, ``"freesh-a"``, ``"freesh-b"``."""
    input_edges: tuple[int, ...]
    """Exclusive upper bounds of each input bucket except the last (open-ended) one."""
    output_edges: tuple[int, ...]
    """Exclusive upper bounds of each output bucket except the last (open-ended) one."""
    labels: tuple[str, ...]
    """Bucket letters from shortest to longest, e.g. ``("S", "M", "L")``."""

    def __post_init__(self) -> None:
        """Validate that edges increase and that there is one label per bucket."""
        _check_edges("input", self.input_edges)
        _check_edges("output", self.output_edges)
        if len(self.input_edges) != len(self.output_edges):
            raise ValueError("input and output must have the same number of buckets")
        if len(self.labels) != len(self.input_edges) + 1:
            raise ValueError(
                f"{len(self.input_edges) + 1} buckets need as many labels, got {self.labels}"
            )
        if len(set(self.labels)) != len(self.labels):
            raise ValueError(f"labels must be distinct, got {self.labels}")

    @property
    def classes(self) -> tuple[str, ...]:
        """Every class name, input-major (SS < SM < SL < MS < … , the DynamoLLM §1.3 order)."""
        return tuple(first + second for first in self.labels for second in self.labels)

    def input_bucket(self, prompt_tokens: int) -> int:
        """Return the input bucket index (0 = shortest) of a prompt length.

        Raises:
            ValueError: when ``prompt_tokens`` is negative.
        """
        if prompt_tokens < 0:
            raise ValueError(f"prompt_tokens must be ≥ 0, got {prompt_tokens}")
        return _bucket(self.input_edges, prompt_tokens)

    def output_bucket(self, output_tokens: int) -> int:
        """Return the output bucket index (0 = shortest) of an output length.

        Raises:
            ValueError: when ``output_tokens`` is negative.
        """
        if output_tokens < 0:
            raise ValueError(f"output_tokens must be ≥ 0, got {output_tokens}")
        return _bucket(self.output_edges, output_tokens)

    def output_label(self, output_tokens: int) -> str:
        """Return the output bucket letter of an output length."""
        return self.labels[self.output_bucket(output_tokens)]

    def classify(self, prompt_tokens: int, output_tokens: int) -> str:
        """Return the class name, input letter first (e.g. ``"SM"``).

        Raises:
            ValueError: when either count is negative.
        """
        return (
            self.labels[self.input_bucket(prompt_tokens)]
            + self.labels[self.output_bucket(output_tokens)]
        )

    def output_range(self, bucket: int) -> tuple[int, int | None]:
        """Return the ``[low, high)`` bounds of an output bucket (``high`` None for the last)."""
        if not 0 <= bucket <= len(self.output_edges):
            raise ValueError(f"output bucket {bucket} out of range for scheme {self.name}")
        low = 0 if bucket == 0 else self.output_edges[bucket - 1]
        high = self.output_edges[bucket] if bucket < len(self.output_edges) else None
        return low, high


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassSLO:
    """Latency targets of one request class."""

    ttft_ms: float
    """Time to first token target, milliseconds."""
    tbt_ms: float
    """Time between tokens target, milliseconds."""


def dynamollm_scheme() -> ClassScheme:
    """Return DynamoLLM's nine classes (Table IV): input S <256, M <1024; output S <100, M <350."""
    return ClassScheme(
        name=DYNAMOLLM_SCHEME_NAME,
        input_edges=(256, 1024),
        output_edges=(100, 350),
        labels=_THREE_LABELS,
    )


def load_freesh_schemes(path: Path | None = None) -> dict[str, ClassScheme]:
    """Load every FREESH partition (Table 4) from ``partitions.csv``, keyed by scheme name.

    Args:
        path: the CSV; defaults to ``freesh/partitions.csv`` under the data directory.

    Raises:
        DataDirError: when the default file is missing.
        ValueError: when a row is malformed.
    """
    csv_path = path if path is not None else data_path("freesh", "partitions.csv")
    schemes: dict[str, ClassScheme] = {}
    with csv_path.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            try:
                partition = row["partition"].strip()
                input_edge = int(row["input_threshold_tokens"])
                output_edge = int(row["output_threshold_tokens"])
            except (KeyError, ValueError, AttributeError) as error:
                raise ValueError(f"malformed FREESH partition row in {csv_path}: {row}") from error
            name = FREESH_SCHEME_PREFIX + partition
            schemes[name] = ClassScheme(
                name=name,
                input_edges=(input_edge,),
                output_edges=(output_edge,),
                labels=_TWO_LABELS,
            )
    return schemes


def freesh_scheme(name: str, *, path: Path | None = None) -> ClassScheme:
    """Return one FREESH partition (§2.2, Table 4) read from ``partitions.csv``.

    Args:
        name: ``"a"``/``"b"`` or ``"freesh-a"``/``"freesh-b"``.
        path: the CSV; defaults to ``freesh/partitions.csv`` under the data directory.

    Raises:
        KeyError: when the partition is not in the file.
    """
    key = name if name.startswith(FREESH_SCHEME_PREFIX) else FREESH_SCHEME_PREFIX + name
    schemes = load_freesh_schemes(path)
    if key not in schemes:
        raise KeyError(f"FREESH partition {name!r} not found; known: {sorted(schemes)}")
    return schemes[key]


def scheme_by_name(name: str, *, path: Path | None = None) -> ClassScheme:
    """Return a scheme by its plan name (``dynamollm9``, ``freesh-a``, ``freesh-b``).

    Raises:
        KeyError: for an unknown name.
    """
    if name == DYNAMOLLM_SCHEME_NAME:
        return dynamollm_scheme()
    if name.startswith(FREESH_SCHEME_PREFIX):
        return freesh_scheme(name, path=path)
    raise KeyError(f"unknown class scheme {name!r}")


def percentile_scheme(
    name: str, output_lengths: Sequence[int], *, percentiles: Sequence[float] = (25, 50, 75, 99)
) -> ClassScheme:
    """Return output-only ordinal buckets at percentiles of observed lengths (μ-Serve §3 labels).

    μ-Serve labels ``[0,p25) [p25,p50) [p50,p75) [p75,p99) [p99,∞)``. Input edges here are
    placeholders (every prompt shares one letter per bucket index) because μ-Serve buckets only
    the output; use :meth:`ClassScheme.output_bucket` with this scheme.

    Raises:
        ValueError: when there are no lengths or percentiles collapse onto one edge.
    """
    if not output_lengths:
        raise ValueError("percentile_scheme needs at least one observed output length")
    ordered = sorted(output_lengths)
    edges: list[int] = []
    for percentile in percentiles:
        rank = min(len(ordered) - 1, int(percentile / 100 * len(ordered)))
        edge = max(1, ordered[rank])
        edges.append(edge if not edges else max(edge, edges[-1] + 1))
    labels = tuple(str(index) for index in range(len(edges) + 1))
    placeholder_inputs = tuple(range(1, len(edges) + 1))
    return ClassScheme(
        name=name, input_edges=placeholder_inputs, output_edges=tuple(edges), labels=labels
    )


DYNAMOLLM_TTFT_MS: Final = (250.0, 400.0, 2000.0)
"""TTFT SLO by DynamoLLM input class S/M/L (Table IV; keyed by input class, [inferred])."""
DYNAMOLLM_TBT_MS: Final = 100.0
"""UNVERIFIED: Table IV's TBT values were lost in extraction; 100 ms follows a secondary source."""
FREESH_TTFT_MS: Final = (300.0, 600.0)
"""TTFT SLO by FREESH input class S/L (FREESH §1.4 SLO filters)."""
FREESH_TBT_MS: Final = 150.0
"""TBT SLO of every FREESH class (FREESH §1.4 SLO filters)."""


def default_slos(scheme: ClassScheme) -> dict[str, ClassSLO]:
    """Return a TTFT/TBT target per class, keyed by the scheme's class names.

    Three-bucket schemes use DynamoLLM Table IV TTFT by input class (250/400/2000 ms) and a
    TBT of 100 ms that is UNVERIFIED (the paper's TBT column was lost; configurable by the
    caller). Two-bucket schemes use FREESH's filters (TTFT 300/600 ms by input, TBT 150 ms).
    Other bucket counts reuse the DynamoLLM values, the last one for every further bucket.
    """
    if len(scheme.labels) == len(FREESH_TTFT_MS):
        ttfts: tuple[float, ...] = FREESH_TTFT_MS
        tbt = FREESH_TBT_MS
    else:
        ttfts, tbt = DYNAMOLLM_TTFT_MS, DYNAMOLLM_TBT_MS
    slos: dict[str, ClassSLO] = {}
    for input_index, input_label in enumerate(scheme.labels):
        ttft = ttfts[min(input_index, len(ttfts) - 1)]
        for output_label in scheme.labels:
            slos[input_label + output_label] = ClassSLO(ttft_ms=ttft, tbt_ms=tbt)
    return slos


class OutputLengthPredictor(Protocol):
    """Predicts how many tokens a request will generate.

    ``predict`` may use the true length (oracle modes, for trace replay where DynamoLLM §1.2
    and throttLL'eM §1.5 simulate predictors), the prompt text (proxy model), or only the
    prompt length (the online quantile model). ``observe`` feeds back each completion.
    """

    name: str

    def predict(
        self, prompt_tokens: int, *, true_output_tokens: int | None = None, text: str | None = None
    ) -> int:
        """Return the predicted output length in tokens (≥ 1)."""
        ...

    def observe(self, prompt_tokens: int, output_tokens: int) -> None:
        """Learn from a finished request's true lengths."""
        ...

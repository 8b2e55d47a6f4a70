"""DynamoLLM's MultiPool baseline: one static pool per request class, sized by its load.

DynamoLLM (seed 001) compares against MultiPool: requests of each type get their own pool of
instances at maximum clock, each pool sized for its own peak, nothing reconfigured. The
simulator sizes the pools by each class's share of the trace's output tokens (decode
iterations dominate engine time); that share is read from the whole trace, the same hindsight
SinglePool's "sized for peak" has. Every instance slot of the inventory is used.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from loadgen.traces import TraceRequest
from shared.domain.classes import ClassScheme

__all__ = ["class_instance_counts", "class_token_shares"]


def class_token_shares(trace: Sequence[TraceRequest], scheme: ClassScheme) -> dict[str, float]:
    """Share of the trace's output tokens in each class of ``scheme`` (true sizes)."""
    tokens: dict[str, float] = {}
    for item in trace:
        name = scheme.classify(item.prompt_tokens, item.output_tokens)
        tokens[name] = tokens.get(name, 0.0) + item.output_tokens
    total = sum(tokens.values())
    return {name: value / total for name, value in sorted(tokens.items())} if total else {}


def class_instance_counts(shares: Mapping[str, float], instances: int) -> dict[str, int]:
    """Instances per class: one each, the rest by largest remainder of the shares.

    Raises:
        ValueError: when there are fewer instances than classes with load.
    """
    classes = [name for name, share in sorted(shares.items()) if share > 0]
    if len(classes) > instances:
        raise ValueError(f"{instances} instances cannot give {len(classes)} classes one each")
    counts = dict.fromkeys(classes, 1)
    spare = instances - len(classes)
    total = sum(shares[c] for c in classes)
    ideal = {c: spare * shares[c] / total for c in classes}
    for c in classes:
        counts[c] += int(ideal[c])
    left = instances - sum(counts.values())
    for c in sorted(classes, key=lambda c: (int(ideal[c]) - ideal[c], c))[:left]:
        counts[c] += 1
    return counts

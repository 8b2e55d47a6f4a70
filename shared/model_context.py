"""The context a request may use per model: the deployment's limit, or the model's own if
smaller.

One ``classifier.max_context_tokens`` served every model while a stack ran one; with several
a model of a shorter context (Llama-2-13B: 4,096 tokens) must not take a request sized for
another (Llama-3-8B: 8,192). A model the engine's table knows (``shared.engine.hardware``)
is held to its own context; another name (a vLLM served-model name the table lacks) to the
deployment's limit.
"""

from __future__ import annotations

from collections.abc import Iterable

from shared.engine.hardware import model_shape

__all__ = ["context_limits"]


def context_limits(models: Iterable[str], ceiling: int) -> dict[str, int]:
    """Model → the most prompt + output tokens a request for it may take (≤ ``ceiling``)."""
    limits: dict[str, int] = {}
    for model in models:
        try:
            limits[model] = min(ceiling, model_shape(model).max_context)
        except ValueError:  # not in the engine's table: the deployment's limit holds
            limits[model] = ceiling
    return limits

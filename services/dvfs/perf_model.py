"""The learned iterations-per-second model of throttLL'eM and the profiler that feeds it.

throttLL'eM §2 (seed 002): a gradient-boosted tree maps (batch size, KV blocks in use, GPU
clock) of one engine to its decode throughput in iterations per second (IPS); TBT is 1/IPS.
Training data comes from a profiler that, for each batch size b, starts b requests whose
generation lengths make the KV cache (or the context limit) full at the last iteration, so
one run sweeps the whole KV range, and changes the clock at random between samples.

:func:`profile_engine` runs that procedure on any :class:`shared.engine.api.Engine` (the
simulator here, a real engine behind the same API elsewhere); :func:`fit_ips_model` fits
scikit-learn's ``HistGradientBoostingRegressor`` with a monotone constraint (IPS never falls
when the clock rises, never rises with batch or KV), which the binary search over clocks in
:mod:`services.dvfs.predictive` relies on (the paper's GBDT does not promise it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

import numpy as np
from numpy.typing import NDArray
from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

from shared.engine.api import Engine, EngineRequest

if TYPE_CHECKING:
    # scikit-learn takes over a second to import: only the predictive agent fits a model,
    # so every other DVFS agent (MIAD, the default) starts without it.
    from sklearn.ensemble import HistGradientBoostingRegressor

__all__ = [
    "DEFAULT_BATCH_SIZES",
    "IpsModel",
    "IpsPredictor",
    "ModelAccuracy",
    "PredictiveModels",
    "PrefillModel",
    "ProfileData",
    "evaluate_ips_model",
    "fit_ips_model",
    "fit_predictive_models",
    "profile_engine",
    "profile_prefill",
]

FloatArray = NDArray[np.float64]

DEFAULT_BATCH_SIZES: Final = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256)
"""Batch sizes the profiler sweeps (throttLL'eM sweeps every size; these span 1..256)."""

_MONOTONE: Final = (-1, -1, 1)
"""Feature order (batch, KV blocks, clock): IPS falls with batch and KV, rises with clock."""


class IpsPredictor(Protocol):
    """Anything that predicts decode iterations per second (what predictive control needs)."""

    def predict_ips(
        self, batch: FloatArray, kv_blocks: FloatArray, clock_mhz: FloatArray
    ) -> FloatArray:
        """Return IPS for each row of the three equally long arrays."""
        ...


@dataclass(frozen=True, slots=True)
class ProfileData:
    """Profiler samples: one row per decode-only iteration recorded."""

    batch: FloatArray
    kv_blocks: FloatArray
    clock_mhz: FloatArray
    ips: FloatArray

    def __len__(self) -> int:
        return int(self.ips.size)

    def split(self, train_share: float, seed: int = 0) -> tuple[ProfileData, ProfileData]:
        """Return a random (train, test) split with ``train_share`` of rows in train."""
        order = np.random.default_rng(seed).permutation(len(self))
        cut = round(train_share * len(self))
        return self._take(order[:cut]), self._take(order[cut:])

    def _take(self, rows: NDArray[np.int64]) -> ProfileData:
        return ProfileData(
            self.batch[rows], self.kv_blocks[rows], self.clock_mhz[rows], self.ips[rows]
        )


def profile_engine(
    make_engine: Callable[[], Engine],
    *,
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    max_context_tokens: int = 8192,
    prompt_tokens: int = 16,
    iterations_per_run: int = 600,
    runs_per_batch: int = 2,
    clock_change_every: int = 24,
    record_every: int = 3,
    seed: int = 0,
) -> ProfileData:
    """Profile an engine as throttLL'eM §2 does and return the samples.

    Args:
        make_engine: builds a fresh, empty engine (one per batch size).
        batch_sizes: batch sizes to sweep (each capped at the engine's ``max_num_seqs``).
        max_context_tokens: the model's context limit, which caps a request's final length.
        prompt_tokens: prompt of every profiling request (short, so KV starts near empty).
        iterations_per_run: longest run; a longer sweep becomes ``runs_per_batch`` runs
            starting at evenly spread prompt lengths (keeps profiling to about a second).
        runs_per_batch: runs per batch size when the sweep is cut.
        clock_change_every: iterations between random clock changes (the paper's "change
            the clock after each 1 s sample").
        record_every: keep one decode-only iteration in this many (the runs are long).
        seed: seed of the random clock choices.
    """
    rng = np.random.default_rng(seed)
    rows: list[tuple[int, int, float, float]] = []
    limit = make_engine().config.max_num_seqs
    # A smaller engine caps several sizes to its limit: sweep that batch once, not once each.
    for b in sorted({min(wanted, limit) for wanted in batch_sizes}):
        probe = make_engine()
        capacity = probe.kv_blocks_total * probe.config.block_size
        final_context = min(capacity // b, max_context_tokens)
        # Long sweeps are cut into runs that start at spread-out prompt lengths, so the KV
        # range is still covered end to end at a fraction of the iterations.
        span = final_context - prompt_tokens
        runs = 1 if span <= iterations_per_run else runs_per_batch
        length = min(span, iterations_per_run)
        starts = np.linspace(prompt_tokens, final_context - length, runs).round().astype(int)
        for run, start in enumerate(starts):
            engine = probe if run == 0 else make_engine()
            rows.extend(_profile_run(engine, b, int(start), max(length, 1), rng,
                                     clock_change_every, record_every))  # fmt: skip
    table = np.asarray(rows, dtype=np.float64)
    return ProfileData(table[:, 0], table[:, 1], table[:, 2], table[:, 3])


def _profile_run(
    engine: Engine,
    batch: int,
    prompt_tokens: int,
    output_tokens: int,
    rng: np.random.Generator,
    clock_change_every: int,
    record_every: int,
) -> list[tuple[int, int, float, float]]:
    clocks = engine.supported_clocks_mhz
    for i in range(batch):
        engine.add(EngineRequest(request_id=f"p{i}", prompt_tokens=prompt_tokens,
                                 output_tokens=output_tokens))  # fmt: skip
    rows: list[tuple[int, int, float, float]] = []
    iteration = 0
    while (result := engine.step()) is not None:
        if iteration % clock_change_every == 0:
            engine.set_clock_mhz(float(rng.choice(clocks)))
        if result.prefill_tokens == 0 and iteration % record_every == 0:
            rows.append(
                (result.decode_tokens, result.kv_blocks_used, result.clock_mhz,
                 1.0 / result.duration_s)
            )  # fmt: skip
        iteration += 1
    return rows


class _FlatForest:
    """The fitted trees flattened into arrays and walked for all rows and trees at once.

    scikit-learn's ``predict`` walks tree after tree with per-tree Python overhead
    (~30 µs each, ~3 ms per call for 80 trees); a controller that probes seven clocks every
    period needs far less. This reads the fitted trees (a private but long-stable layout of
    ``HistGradientBoostingRegressor``) and is checked against ``predict`` at build time.
    """

    def __init__(self, regressor: HistGradientBoostingRegressor) -> None:
        trees = [predictors[0].nodes for predictors in regressor._predictors]
        sizes = np.array([tree.size for tree in trees], dtype=np.int64)
        offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        nodes = np.concatenate(trees)
        shift = np.repeat(offsets, sizes)
        self._roots = offsets
        self._feature = nodes["feature_idx"].astype(np.int64)
        self._threshold = nodes["num_threshold"].astype(np.float64)
        self._left = nodes["left"].astype(np.int64) + shift
        self._right = nodes["right"].astype(np.int64) + shift
        self._leaf = nodes["is_leaf"].astype(np.bool_)
        self._value = nodes["value"].astype(np.float64)
        self._depth = int(nodes["depth"].max())
        self._baseline = float(np.ravel(regressor._baseline_prediction)[0])

    def predict(self, features: FloatArray) -> FloatArray:
        rows = np.arange(features.shape[0])[:, None]
        index = np.broadcast_to(self._roots, (features.shape[0], self._roots.size)).copy()
        for _ in range(self._depth):
            go_left = features[rows, self._feature[index]] <= self._threshold[index]
            child = np.where(go_left, self._left[index], self._right[index])
            index = np.where(self._leaf[index], index, child)
        return np.asarray(self._baseline + self._value[index].sum(axis=1), dtype=np.float64)


@dataclass(frozen=True, slots=True)
class PrefillModel:
    """Seconds of GPU time per prompt token against clock (our extension, not throttLL'eM's).

    throttLL'eM's IPS model covers decode iterations only and names prefill stalls as its
    source of TBT outliers; with long prompts (Azure conv: ~1,150 tokens) prefill takes a
    large share of the GPU, which predictive control must budget for.
    """

    clocks_mhz: FloatArray
    """Profiled clocks, ascending."""
    seconds_per_token: FloatArray

    def at(self, clock_mhz: float) -> float:
        """Return seconds per prompt token at ``clock_mhz`` (interpolated in clock)."""
        return float(np.interp(clock_mhz, self.clocks_mhz, self.seconds_per_token))


def profile_prefill(
    make_engine: Callable[[], Engine], *, prompt_tokens: int = 2048
) -> PrefillModel:
    """Time one prefill of ``prompt_tokens`` at every supported clock of a fresh engine."""
    engine = make_engine()
    clocks = engine.supported_clocks_mhz
    per_token = np.empty(len(clocks))
    for k, clock in enumerate(clocks):
        engine.set_clock_mhz(clock)
        engine.add(EngineRequest(request_id=f"prefill-{k}", prompt_tokens=prompt_tokens,
                                 output_tokens=1))  # fmt: skip
        seconds = prefilled = 0.0
        while (result := engine.step()) is not None:
            seconds += result.duration_s
            prefilled += result.prefill_tokens
        per_token[k] = seconds / max(prefilled, 1.0)
    return PrefillModel(np.asarray(clocks, dtype=np.float64), per_token)


class IpsModel:
    """A fitted IPS model (throttLL'eM's M, for one engine: model × GPU × TP)."""

    def __init__(self, regressor: HistGradientBoostingRegressor) -> None:
        """Wrap a regressor fitted on (batch, KV blocks, clock) → IPS."""
        self._regressor = regressor
        self._threads = ThreadpoolController()
        self._forest = _fast_forest(regressor, self._threads)

    @property
    def regressor(self) -> HistGradientBoostingRegressor:
        """The fitted scikit-learn model."""
        return self._regressor

    def predict_ips(
        self, batch: FloatArray, kv_blocks: FloatArray, clock_mhz: FloatArray
    ) -> FloatArray:
        """Return predicted IPS (floored at a tiny positive value so 1/IPS is finite)."""
        features = np.column_stack((batch, kv_blocks, clock_mhz)).astype(np.float64)
        if self._forest is not None:
            predicted = self._forest.predict(features)
        else:
            predicted = _sklearn_predict(self._regressor, self._threads, features)
        return np.maximum(predicted, 1e-3)


def _sklearn_predict(
    regressor: HistGradientBoostingRegressor, threads: ThreadpoolController, features: FloatArray
) -> FloatArray:
    # A few dozen rows per call: OpenMP threads only add spin-up cost (and stall for tens
    # of ms on a loaded host), so prediction runs on one thread.
    with threads.limit(limits=1, user_api="openmp"):
        return np.asarray(regressor.predict(features), dtype=np.float64)


def _fast_forest(
    regressor: HistGradientBoostingRegressor, threads: ThreadpoolController
) -> _FlatForest | None:
    """Return the flattened forest if it reproduces ``predict`` exactly, else ``None``."""
    try:
        forest = _FlatForest(regressor)
    except (AttributeError, KeyError, IndexError, ValueError, TypeError):
        return None
    probe = np.random.default_rng(0).uniform(0.0, 3000.0, size=(64, 3))
    if np.allclose(forest.predict(probe), _sklearn_predict(regressor, threads, probe)):
        return forest
    return None


def fit_ips_model(
    data: ProfileData, *, max_iter: int = 80, max_leaf_nodes: int = 31, seed: int = 0
) -> IpsModel:
    """Fit the gradient-boosted IPS model with a monotone constraint in clock.

    Args:
        data: profiler samples.
        max_iter: boosting iterations (throttLL'eM gives no hyperparameters; this trains
            in well under a second on the default profile).
        max_leaf_nodes: leaves per tree.
        seed: random state (only used if early stopping were enabled; kept for clarity).
    """
    from sklearn.ensemble import HistGradientBoostingRegressor

    regressor = HistGradientBoostingRegressor(
        max_iter=max_iter,
        max_leaf_nodes=max_leaf_nodes,
        learning_rate=0.15,
        monotonic_cst=list(_MONOTONE),
        early_stopping=False,
        random_state=seed,
    )
    with ThreadpoolController().limit(limits=1, user_api="openmp"):
        regressor.fit(np.column_stack((data.batch, data.kv_blocks, data.clock_mhz)), data.ips)
    return IpsModel(regressor)


@dataclass(frozen=True, slots=True)
class ModelAccuracy:
    """Held-out accuracy in throttLL'eM Table III's terms."""

    r2: float
    mape_pct: float
    mae_ips: float
    test_rows: int
    time_error_p95: float = 0.0
    """95th percentile of (true iteration time / predicted − 1): how far the model may
    under-predict an iteration's duration; a safety margin for predictive control."""


def evaluate_ips_model(model: IpsPredictor, test: ProfileData) -> ModelAccuracy:
    """Return R², MAPE and MAE of ``model`` on ``test``."""
    predicted = model.predict_ips(test.batch, test.kv_blocks, test.clock_mhz)
    error = predicted - test.ips
    total = float(np.sum((test.ips - test.ips.mean()) ** 2))
    r2 = 1.0 - float(np.sum(error**2)) / total if total > 0 else float("nan")
    return ModelAccuracy(
        r2=r2,
        mape_pct=float(np.mean(np.abs(error) / test.ips) * 100.0),
        mae_ips=float(np.mean(np.abs(error))),
        test_rows=len(test),
        time_error_p95=float(np.percentile(predicted / test.ips - 1.0, 95.0)),
    )


@dataclass(frozen=True, slots=True)
class PredictiveModels:
    """What predictive control needs for one engine (model × GPU × TP)."""

    ips: IpsModel
    """Fitted on every profiler row."""
    prefill: PrefillModel
    held_out: ModelAccuracy
    """Accuracy of the same fit on a 90/10 split (Table III's setting)."""

    @property
    def margin(self) -> float:
        """Safety margin on predicted iteration times: the held-out p95 time error."""
        return max(self.held_out.time_error_p95, 0.0)


def fit_predictive_models(make_engine: Callable[[], Engine], *, seed: int = 0) -> PredictiveModels:
    """Profile an engine, fit the IPS model and time prefill (about 1–2 s on the simulator).

    The margin comes from a second fit on 90 % of the rows, measured on the other 10 %.
    """
    data = profile_engine(make_engine, seed=seed)
    train, test = data.split(0.9, seed=seed)
    return PredictiveModels(
        ips=fit_ips_model(data, seed=seed),
        prefill=profile_prefill(make_engine),
        held_out=evaluate_ips_model(fit_ips_model(train, seed=seed), test),
    )

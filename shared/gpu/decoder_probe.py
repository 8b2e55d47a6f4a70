"""Measure real iteration latency, power and energy of a Llama-shaped decoder on a real GPU.

The simulated engine (``shared.engine``) is calibrated on published measurements (Vidur,
Splitwise, ML.ENERGY). This probe gives it a check against hardware we can run: it builds a
decoder (:mod:`shared.gpu.decoder_model`) with the exact shapes of a model the engine knows
(default Llama-3-8B: 32 layers, hidden 4096, 32 query heads, 8 KV heads, FFN 14336,
vocabulary 128256; bf16, random weights: timing and power depend on shapes, not on the
values) and times the two kinds of iteration the engine prices with ``CostModel.cost_of``:

* **prefill**: one sequence of ``n`` prompt tokens, causal attention, logits of the last
  token only (what vLLM samples), i.e. ``cost_of(n, 0, n²/2, n, 1, f)``;
* **decode**: ``b`` sequences with ``c`` tokens of context each, one new token per sequence
  against a static KV cache, i.e. ``cost_of(0, b, b·c, b·c, b, f)``.

Each iteration is captured once as a CUDA graph and replayed, as vLLM does for decode, so
host overhead is a graph launch, not a Python loop over 32 layers. Each point runs for a
fixed wall time; energy comes from NVML's energy counter (``nvmlDeviceGetTotalEnergyConsumption``,
the difference over the timed window divided by the iterations), power from the same
difference over the window, and the SM clock from readings sampled during the window.

**Read-only.** The probe never sets a clock, a power limit or any other GPU setting: it reads
through :class:`shared.gpu.nvml.NvmlReader`, whose module protocol has no setter. The GPU
runs at whatever clock its firmware picks (boost, lowered under the power cap), and each
point records the clock it saw, so the comparison prices it at that clock.

What it is not: vLLM. No paged attention, no scheduler, no sampling kernel; attention is
PyTorch's ``scaled_dot_product_attention`` over a contiguous cache. It measures the GPU work of
the iterations the engine model prices; the engine's fitted host overhead (vLLM's scheduler
and sampler on the CPU) is therefore expected to make the model slower than this probe at
small batches, and the comparison (``greenserve bench engine-real``) reports that split.

Run it on a machine with CUDA, PyTorch and ``nvidia-ml-py``::

    python -m shared.gpu.decoder_probe --out h100.json

``--device cpu --tiny`` runs a two-layer toy shape on the CPU for tests (no NVML, no graphs).
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from shared.gpu.decoder_model import LLAMA_3_8B, TINY, Decoder, DecoderShape, import_torch

__all__ = [
    "DecoderShape",
    "ProbePoint",
    "ProbeResult",
    "main",
    "run_probe",
]

PROBE_VERSION = 1
"""Bumped when what a point means changes; the comparison refuses other versions."""


@dataclass(slots=True)
class ProbePoint:
    """One measured iteration shape."""

    kind: str
    """``prefill`` (one sequence of ``tokens`` prompt tokens) or ``decode``."""
    batch: int
    """Sequences in the iteration (1 for prefill)."""
    tokens: int
    """Prefill: prompt tokens. Decode: context tokens per sequence."""
    iterations: int
    iteration_s: float
    """Mean wall time of one iteration over the timed window (CUDA-synchronised)."""
    iteration_p50_s: float
    iteration_p90_s: float
    energy_j_per_iteration: float | None
    power_w: float | None
    """Mean board power over the window (energy difference / window)."""
    sm_clock_mhz: float | None
    """Mean of the SM clock readings taken during the window."""
    sm_clock_min_mhz: float | None
    sm_clock_max_mhz: float | None


@dataclass(slots=True)
class ProbeResult:
    """Everything a probe run measured, with where it ran."""

    version: int
    shape: DecoderShape
    dtype: str
    device: str
    compiled: bool
    """Layer bodies fused by ``torch.compile`` (closer to vLLM's fused kernels) or eager."""
    gpu_name: str | None
    driver: str | None
    torch_version: str
    host: str
    started_utc: str
    idle_power_w: float | None
    idle_sm_clock_mhz: float | None
    supported_sm_clocks_mhz: list[float] = field(default_factory=list)
    """Graphics clocks NVML lists at the highest memory clock (read, never set)."""
    power_limit_w: float | None = None
    """Enforced board power limit (read, never set)."""
    points: list[ProbePoint] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return asdict(self)


class _Sampler:
    """Reads the SM clock every ``period_s`` in a thread while a window runs."""

    def __init__(self, read_clock: Callable[[], float], period_s: float = 0.05) -> None:
        self._read = read_clock
        self._period = period_s
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> _Sampler:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.samples.append(self._read())
            self._stop.wait(self._period)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


@contextmanager
def _nvml_reader(enabled: bool) -> Iterator[Any]:
    if not enabled:
        yield None
        return
    from shared.gpu.nvml import NvmlReader

    reader = NvmlReader([0])
    try:
        yield reader
    finally:
        reader.close()


def _time_window(
    torch: Any,
    step: Callable[[], None],
    reader: Any,
    window_s: float,
    cuda: bool,
) -> tuple[int, list[float], float | None, list[float], float]:
    """Run ``step`` repeatedly for about ``window_s``; return per-iteration times and energy."""

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    for _ in range(3):
        step()
    sync()
    # Estimate one iteration to size chunks: sync every chunk so the per-chunk time is real
    # device time, without a sync after every iteration (which would add launch gaps).
    t0 = time.perf_counter()
    step()
    sync()
    one = max(time.perf_counter() - t0, 1e-6)
    chunk = max(1, min(200, int(0.05 / one)))
    times: list[float] = []
    clocks: list[float] = []
    energy0 = reader.energy_j() if reader is not None else None
    start = time.perf_counter()
    iterations = 0
    sampler = _Sampler(reader.sm_clock_mhz) if reader is not None else None
    if sampler is not None:
        sampler.__enter__()
    try:
        while time.perf_counter() - start < window_s:
            c0 = time.perf_counter()
            for _ in range(chunk):
                step()
            sync()
            times.append((time.perf_counter() - c0) / chunk)
            iterations += chunk
    finally:
        if sampler is not None:
            sampler.__exit__(None, None, None)
            clocks = sampler.samples
    elapsed = time.perf_counter() - start
    energy = (reader.energy_j() - energy0) if reader is not None and energy0 is not None else None
    return iterations, times, energy, clocks, elapsed


def _point(
    kind: str,
    batch: int,
    tokens: int,
    iterations: int,
    times: list[float],
    energy_j: float | None,
    clocks: list[float],
    elapsed: float,
) -> ProbePoint:
    ordered = sorted(times)
    return ProbePoint(
        kind=kind,
        batch=batch,
        tokens=tokens,
        iterations=iterations,
        iteration_s=elapsed / iterations,
        iteration_p50_s=statistics.median(ordered),
        iteration_p90_s=ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
        energy_j_per_iteration=energy_j / iterations if energy_j is not None else None,
        power_w=energy_j / elapsed if energy_j is not None else None,
        sm_clock_mhz=statistics.fmean(clocks) if clocks else None,
        sm_clock_min_mhz=min(clocks) if clocks else None,
        sm_clock_max_mhz=max(clocks) if clocks else None,
    )


def _graphed(torch: Any, fn: Callable[[], Any], cuda: bool) -> Callable[[], None]:
    """Capture ``fn`` as a CUDA graph (replayed per call); plain calls on the CPU."""
    if not cuda:

        def call() -> None:
            fn()

        return call
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm-up on a side stream, as graph capture requires
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay  # type: ignore[no-any-return]


def run_probe(
    *,
    shape: DecoderShape = LLAMA_3_8B,
    device: str = "cuda",
    prefill_tokens: Sequence[int] = (128, 256, 512, 1024, 2048, 4096, 8192),
    decode_points: Sequence[tuple[int, int]] = (
        (1, 512),
        (8, 512),
        (32, 512),
        (64, 512),
        (128, 512),
        (256, 512),
        (1, 2048),
        (8, 2048),
        (32, 2048),
        (64, 2048),
        (128, 2048),
    ),
    window_s: float = 2.0,
    idle_s: float = 3.0,
    compiled: bool = False,
    progress: Callable[[str], None] | None = None,
    on_point: Callable[[ProbeResult], None] | None = None,
) -> ProbeResult:
    """Measure the given prefill and decode shapes; see the module docstring.

    ``on_point`` sees the result after every point (the command line rewrites its file
    then, so a run cut short keeps what it measured).
    """
    torch = import_torch()
    cuda = device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        raise SystemExit("no CUDA device visible to PyTorch; use --device cpu --tiny to try it")
    say = progress or (lambda _msg: None)
    dtype = torch.bfloat16
    gpu_name = torch.cuda.get_device_name(0) if cuda else None
    notes: list[str] = []
    with _nvml_reader(cuda) as reader:
        driver: str | None = None
        if reader is not None:
            try:
                import pynvml

                raw = pynvml.nvmlSystemGetDriverVersion()
                driver = raw.decode() if isinstance(raw, bytes) else str(raw)
            except Exception as exc:
                notes.append(f"driver version unread: {exc}")
        idle_power = idle_clock = None
        if reader is not None and idle_s > 0:
            say(f"idle power for {idle_s:.0f} s")
            e0, t0 = reader.energy_j(), time.perf_counter()
            with _Sampler(reader.sm_clock_mhz) as sampler:
                time.sleep(idle_s)
            idle_power = (reader.energy_j() - e0) / (time.perf_counter() - t0)
            idle_clock = statistics.fmean(sampler.samples) if sampler.samples else None
        say(f"building {shape.name} ({device}, bf16, random weights)")
        model = Decoder(torch, shape, device, dtype, compiled=compiled)
        result = ProbeResult(
            version=PROBE_VERSION,
            shape=shape,
            dtype="bfloat16",
            device=device,
            compiled=compiled,
            gpu_name=gpu_name,
            driver=driver,
            torch_version=str(torch.__version__),
            host=platform.node(),
            started_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            idle_power_w=idle_power,
            idle_sm_clock_mhz=idle_clock,
            notes=notes,
        )
        if reader is not None:
            result.supported_sm_clocks_mhz = list(reader.supported_clocks_mhz())
            try:
                import pynvml

                handle = reader.handles[0]
                result.power_limit_w = pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0
            except Exception as exc:
                notes.append(f"power limit unread: {exc}")
        with torch.inference_mode():
            for n in prefill_tokens:
                say(f"prefill {n} tokens")
                ids = torch.randint(0, shape.vocab, (n,), device=device)
                step = _graphed(torch, functools.partial(model.prefill, ids), cuda)
                its, times, energy, clocks, elapsed = _time_window(
                    torch, step, reader, window_s, cuda
                )
                result.points.append(_point("prefill", 1, n, its, times, energy, clocks, elapsed))
                if on_point is not None:
                    on_point(result)
                del step
            for batch, context in decode_points:
                say(f"decode batch {batch} at context {context}")
                caches = model.new_caches(batch, context)
                ids = torch.randint(0, shape.vocab, (batch,), device=device)
                step = _graphed(torch, functools.partial(model.decode, ids, caches, context), cuda)
                its, times, energy, clocks, elapsed = _time_window(
                    torch, step, reader, window_s, cuda
                )
                result.points.append(
                    _point("decode", batch, context, its, times, energy, clocks, elapsed)
                )
                if on_point is not None:
                    on_point(result)
                del step, caches
                if cuda:
                    torch.cuda.empty_cache()
    return result


def _decode_list(text: str) -> tuple[tuple[int, int], ...]:
    pairs = []
    for item in text.split(","):
        batch, _, context = item.partition("x")
        pairs.append((int(batch), int(context)))
    return tuple(pairs)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: run the probe and write its JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, help="write the JSON here (default: stdout)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="toy shape (tests, CPU)")
    parser.add_argument("--compile", action="store_true", help="fuse layers with torch.compile")
    parser.add_argument("--prefill", help="prompt lengths, e.g. 128,512,2048")
    parser.add_argument("--decode", help="batch x context pairs, e.g. 1x512,64x2048")
    parser.add_argument("--window-s", type=float, default=2.0, help="timed seconds per point")
    parser.add_argument("--idle-s", type=float, default=3.0, help="idle power window")
    args = parser.parse_args(argv)
    kwargs: dict[str, Any] = {}
    if args.tiny:
        kwargs = {"prefill_tokens": (16, 64), "decode_points": ((1, 32), (4, 64))}
    if args.prefill:
        kwargs["prefill_tokens"] = tuple(int(n) for n in args.prefill.split(","))
    if args.decode:
        kwargs["decode_points"] = _decode_list(args.decode)

    def save(result: ProbeResult) -> None:
        if args.out:
            args.out.write_text(json.dumps(result.to_json(), indent=1) + "\n")

    result = run_probe(
        shape=TINY if args.tiny else LLAMA_3_8B,
        device=args.device,
        window_s=args.window_s,
        idle_s=args.idle_s,
        compiled=args.compile,
        progress=lambda msg: print(f"[probe] {msg}", file=sys.stderr, flush=True),
        on_point=save,
        **kwargs,
    )
    save(result)
    if not args.out:
        print(json.dumps(result.to_json(), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

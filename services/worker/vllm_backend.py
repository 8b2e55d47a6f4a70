"""The ``vllm`` backend: a vLLM server (or ``greenserve sim-engine``) over its OpenAI API.

Each request is one streamed ``POST /v1/completions`` (``max_tokens``, ``ignore_eos``, the
prompt text, or a list of token ids of the right length when only the count is known).
Every SSE event becomes an :class:`~services.worker.backend.OutputBatch` with the tokens it
adds (see :mod:`services.worker.vllm_protocol`); the stream's end finishes the request.
``/metrics`` is scraped each stats period for running and waiting requests and KV use.
Energy, power and clock come from :class:`~services.worker.energy_meter.EnergyMeter`.

Clock commands go to a clock-control endpoint (``POST /clock``) when one is configured or
the server advertises one (a sim-engine publishes ``greenserve:sm_clock_mhz``); otherwise
they are refused: on a real GPU, clocks are locked through NVML by the node's clock agent
when the node opts in (``worker.gpu_clocks: nvml``, :mod:`services.worker.gpu_clocks`).
A request the server rejects or drops ends with a clear error; it is not retried
elsewhere, since tokens may already have reached the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Final

import aiohttp

from proto.messages import ClassifiedRequest
from services.worker.backend import BackendSnapshot, ClockOutcome, OutputBatch, OutputSink
from services.worker.clock_range import out_of_range
from services.worker.energy_meter import EnergyMeter
from services.worker.vllm_metrics import EngineMetrics, read_engine_metrics
from services.worker.vllm_protocol import (
    TokenCounter,
    completion_body,
    error_message,
    parse_sse_line,
)
from shared.engine.hardware import GpuSpec, gpu_spec

__all__ = ["KV_FRACTION_BLOCKS", "VllmBackend"]

logger = logging.getLogger(__name__)

ABORTED: Final = "abort"
"""vLLM's finish reason for a request it dropped before the end."""
KV_FRACTION_BLOCKS: Final = 1000
"""When a server publishes KV use but not its block count, blocks are reported in
thousandths of the cache (``kv_blocks_total`` = 1000)."""


class VllmBackend:
    """Streams requests to one OpenAI-compatible server and scrapes its metrics."""

    def __init__(
        self,
        base_url: str,
        *,
        gpu: str,
        model: str,
        tp: int,
        meter: EnergyMeter | None = None,
        clock_url: str | None = None,
        connect_timeout_s: float = 5.0,
        scrape_timeout_s: float = 2.0,
        read_timeout_s: float = 60.0,
    ) -> None:
        """Talk to the server at ``base_url``.

        Args:
            base_url: e.g. ``http://127.0.0.1:8000`` (no ``/v1``).
            gpu: GPU type of the instance, for stats.
            model: model shape name; used as the served model name unless ``/v1/models``
                lists others.
            tp: tensor-parallel degree, for stats.
            meter: energy source (default: scraped sim-engine series, else zero).
            clock_url: clock-control endpoint; ``None`` uses ``{base_url}/clock`` only when
                the server advertises it.
            connect_timeout_s: TCP connect limit of each HTTP call.
            scrape_timeout_s: limit of a ``/metrics`` or ``/clock`` call.
            read_timeout_s: longest silence of a completion stream (before its headers,
                between chunks); past it the engine is taken as stalled and the request
                ends with ``engine_error``. Not a limit on the whole request, which may
                stream for minutes; the longest silence is queueing plus the prefill of
                the prompt (no chunk comes before the first token), so it must exceed the
                prefill of the largest prompt served.
        """
        self._base = base_url.rstrip("/")
        self._gpu, self._model, self._tp = gpu, model, tp
        self._served_model = model
        self._meter = meter if meter is not None else EnergyMeter()
        self._clock_url = clock_url
        self._connect_timeout_s = connect_timeout_s
        self._read_timeout_s = read_timeout_s
        self._scrape_timeout = aiohttp.ClientTimeout(total=scrape_timeout_s)
        self._session: aiohttp.ClientSession | None = None
        self._sink: OutputSink | None = None
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._metrics = EngineMetrics()
        self._reachable = True

    @property
    def name(self) -> str:
        """``vllm``."""
        return "vllm"

    @property
    def served_model(self) -> str:
        """Model name sent in requests (discovered from ``/v1/models`` at start)."""
        return self._served_model

    @property
    def metrics(self) -> EngineMetrics:
        """The last scrape."""
        return self._metrics

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("VllmBackend used before start")
        return self._session

    async def start(self, sink: OutputSink) -> None:
        """Open the HTTP session, learn the served model name and take a first scrape."""
        self._sink = sink
        # No total: a stream lasts as long as its output. sock_read bounds each wait for
        # data instead, or an engine that stalls with its connection open would hold the
        # request and its worker slot for good, its client never answered. The other
        # calls pass their own total limit.
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(
                total=None, sock_connect=self._connect_timeout_s, sock_read=self._read_timeout_s
            ),
            connector=aiohttp.TCPConnector(limit=0),
        )
        try:
            async with self._http().get(
                f"{self._base}/v1/models", timeout=self._scrape_timeout
            ) as resp:
                resp.raise_for_status()
                served = [m.get("id") for m in (await resp.json()).get("data", [])]
            if served and self._model not in served:
                self._served_model = str(served[0])
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            logger.warning(
                "could not list models at %s (%s); sending %r", self._base, exc, self._model
            )
        await self.refresh()

    async def run(self) -> None:
        """Requests run as their own tasks; wait until cancelled, then cancel them."""
        try:
            await asyncio.Event().wait()
        finally:
            for task in list(self._tasks.values()):
                task.cancel()

    def submit(self, request: ClassifiedRequest) -> None:
        """Start streaming one request."""
        rid = request.request.request_id
        task = asyncio.create_task(self._stream(request), name=f"vllm-{rid}")
        self._tasks[rid] = task
        task.add_done_callback(lambda _t: self._tasks.pop(rid, None))

    def abort(self, request_id: str) -> None:
        """Cancel a request's stream: its connection is closed, on which vLLM aborts it."""
        task = self._tasks.get(request_id)
        if task is not None:
            task.cancel()

    async def _stream(self, request: ClassifiedRequest) -> None:
        sink = self._sink
        if sink is None:
            raise RuntimeError("VllmBackend used before start")
        rid = request.request.request_id
        counter = TokenCounter()
        try:
            async with self._http().post(
                f"{self._base}/v1/completions", json=completion_body(request, self._served_model)
            ) as resp:
                if resp.status != 200:
                    detail = (await resp.text())[:500]
                    await sink.on_failure(rid, "engine_rejected", f"HTTP {resp.status}: {detail}")
                    return
                try:
                    async for line in resp.content:
                        event = parse_sse_line(line)
                        if event is None:
                            continue
                        if isinstance(event, str):  # the only text event is DONE
                            break
                        failure = error_message(event)
                        if failure is not None:
                            await sink.on_failure(rid, "engine_error", failure)
                            return
                        new = counter.update(event)
                        if new:
                            await self._emit(sink, rid, new)
                except asyncio.CancelledError:
                    # Aborted (a cancel, a drain): close the connection rather than hand it
                    # back to the pool, for vLLM aborts a request only when its client's
                    # connection closes, and frees its batch slot and KV blocks then.
                    resp.close()
                    raise
        except aiohttp.SocketTimeoutError:
            # Before the generic clause (it is a ClientError): the engine took the request
            # and went silent, it is not unreachable.
            silence = f"no data from the engine for {self._read_timeout_s:g} s"
            await sink.on_failure(rid, "engine_error", silence)
            return
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            await sink.on_failure(rid, "engine_unavailable", f"{type(exc).__name__}: {exc}")
            return
        except Exception as exc:  # task boundary: nobody awaits this task
            # An event of an unexpected shape (``choices`` not a list of objects, say) must
            # end the request: a task dying here left it in the worker's book for good, a
            # slot lost and a client never answered, and its exception unobserved.
            logger.exception("the stream of %s failed", rid)
            await sink.on_failure(rid, "engine_error", f"{type(exc).__name__}: {exc}")
            return
        if counter.counted == 0:
            await sink.on_failure(rid, "engine_error", "the stream ended without any token")
            return
        if counter.finish_reason == ABORTED:
            # vLLM ends a request it dropped (engine shutdown, preempted past recovery) with
            # finish_reason "abort": cut short, not finished, and a client must not take
            # its partial text for a whole answer.
            await sink.on_failure(rid, "engine_error", "the engine aborted the request")
            return
        await sink.on_output(
            OutputBatch(
                emitted=(),
                finished=(rid,),
                at=time.time(),
                finish_reasons={rid: counter.finish_reason or "length"},
            )
        )

    async def _emit(self, sink: OutputSink, rid: str, tokens: int) -> None:
        batch = OutputBatch(emitted=(rid,) * tokens, energy_j=self._meter.take(), at=time.time())
        await sink.on_output(batch)

    def _clock_endpoint(self) -> str | None:
        if self._clock_url is not None:
            return self._clock_url
        return f"{self._base}/clock" if self._metrics.clock_control else None

    async def set_clock(self, mhz: float) -> ClockOutcome:
        """Forward a supported clock to the clock-control endpoint, or refuse with the reason.

        On a GPU of the engine model's table the clock must lie in its supported range and
        goes out snapped to its nearest supported step, as NVML would set it: the endpoint
        drives real hardware, so nothing unsupported is passed on for it to judge. Another
        GPU's clock is forwarded as asked, and its endpoint must check it.
        """
        current = self._meter.clock_mhz()
        url = self._clock_endpoint()
        if url is None:
            return ClockOutcome(
                applied_mhz=current,
                accepted=False,
                reason="the vllm backend has no clock-control endpoint; GPU clocks are set "
                "through NVML by the node's clock agent (opt-in: worker.gpu_clocks nvml)",
            )
        try:
            spec: GpuSpec | None = gpu_spec(self._gpu)
        except ValueError:
            spec = None  # a GPU the engine model does not know
        if spec is not None:
            refused = out_of_range(self._gpu, mhz)
            if refused is not None:
                return ClockOutcome(applied_mhz=current, accepted=False, reason=refused)
            mhz = spec.snap_clock(mhz)
        try:
            async with self._http().post(
                url, json={"clock_mhz": mhz}, timeout=self._scrape_timeout
            ) as resp:
                resp.raise_for_status()
                applied = float((await resp.json())["applied_mhz"])
        except (aiohttp.ClientError, TimeoutError, ValueError, KeyError) as exc:
            return ClockOutcome(
                applied_mhz=current, accepted=False, reason=f"clock endpoint: {exc}"
            )
        return ClockOutcome(applied_mhz=applied, accepted=True)

    async def refresh(self) -> None:
        """Scrape ``/metrics``; keep the last values (and log once) while it fails."""
        try:
            async with self._http().get(
                f"{self._base}/metrics", timeout=self._scrape_timeout
            ) as resp:
                resp.raise_for_status()
                text = await resp.text()
        except (aiohttp.ClientError, TimeoutError) as exc:
            if self._reachable:
                logger.warning("cannot scrape %s/metrics: %s", self._base, exc)
            self._reachable = False
            return
        if not self._reachable:
            logger.info("%s/metrics reachable again", self._base)
        self._reachable = True
        self._metrics = read_engine_metrics(text)
        self._meter.observe(self._metrics)

    def snapshot(self) -> BackendSnapshot:
        """State from the last scrape and the energy meter."""
        m = self._metrics
        total = m.kv_blocks_total or (KV_FRACTION_BLOCKS if m.kv_usage is not None else 0)
        return BackendSnapshot(
            gpu=self._gpu,
            model=self._model,
            tp=self._tp,
            running=m.running,
            waiting=m.waiting,
            kv_blocks_used=round((m.kv_usage or 0.0) * total),
            kv_blocks_total=total,
            kv_block_size=m.block_size or 16,
            clock_mhz=self._meter.clock_mhz(),
            power_w=self._meter.power_w(),
            energy_j=self._meter.counter_j(),
        )

    async def close(self) -> None:
        """Cancel streams, close the session and the meter (idempotent)."""
        for task in list(self._tasks.values()):
            task.cancel()
        for task in list(self._tasks.values()):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._session is not None:
            await self._session.close()
            self._session = None
        self._meter.close()

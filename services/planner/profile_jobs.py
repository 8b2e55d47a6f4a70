"""The profile rows each live pool plans with, and the jobs that measure the missing ones.

Rows come from the profiles CSV or are measured on the engine model in a child process, per
mode and served lengths (:data:`ProfileKey`), then de-rated by what SLO feedback learned.
:class:`ProfileJobs` is a base of :class:`services.planner.live_service.LivePlanner`, which
builds the state declared here in its ``__init__``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor

from services.planner.live_inputs import LivePool
from services.planner.live_profiles import (
    ModeProfileJob,
    ProfileRequest,
    gpu_family,
    live_mode_profiles,
    mode_idle_w,
    profiles_for_mode,
    reference_lengths,
)
from services.planner.problem import ServingConfig
from services.planner.slo_feedback import CapacityFeedback
from shared.config import PlannerSettings as LivePlannerSettings
from shared.domain.classes import scheme_by_name
from shared.domain.observed_mix import profile_lengths

__all__ = ["ProfileJobs", "ProfileKey"]

logger = logging.getLogger(__name__)

ProfileKey = tuple[str, int, str, int, bool, int]
"""(GPU family, TP, model, max_num_seqs, split, lengths version): what one measurement
covers (the mixed-class capacity of a split fleet is measured per group; version 0 is the
reference lengths, each re-profile on drifted served sizes the next)."""


class ProfileJobs:
    """The live planner's profile rows and measurements (a base of ``LivePlanner``)."""

    _cfg: LivePlannerSettings
    _csv: tuple[ServingConfig, ...]
    _learned: CapacityFeedback
    _profiled_on: tuple[tuple[int, int], ...]
    _lengths_version: int
    _measured: dict[ProfileKey, tuple[ServingConfig, ...]]
    _measuring: dict[ProfileKey, asyncio.Task[tuple[ServingConfig, ...]]]
    _max_num_seqs: dict[str, int]
    _idle: dict[tuple[str, int, str, int], float]

    def _idle_w(self, pools: dict[str, LivePool]) -> dict[str, float]:
        """Idle power of one instance per pool (engine model; cached per mode)."""
        out: dict[str, float] = {}
        for pool_id, pool in pools.items():
            key = (pool.gpu, pool.tp, pool.model, self._max_num_seqs[pool_id])
            if key not in self._idle:
                self._idle[key] = mode_idle_w(*key)
            out[pool_id] = self._idle[key]
        return out

    def _profiles(
        self, pools: dict[str, LivePool], groups: dict[str, str]
    ) -> dict[str, tuple[ServingConfig, ...]]:
        """Rows per pool: from the CSV, else measured, then (``mixed_capacity``) scaled by the
        class mix's measured capacity; modes still being prepared are absent.

        Measurements run in a child process (the engine model is CPU-bound Python and would
        starve this process's event loop, which may host other services in tests).
        """
        out: dict[str, tuple[ServingConfig, ...]] = {}
        mixed = self._cfg.mixed_capacity
        for pool_id, pool in pools.items():
            rows = profiles_for_mode(self._csv, (gpu_family(pool.gpu), pool.tp))
            if rows and not mixed:
                out[pool_id] = rows
                continue
            version = self._lengths_version
            key = (
                gpu_family(pool.gpu), pool.tp, pool.model, self._max_num_seqs[pool_id],
                mixed and bool(groups), version,
            )  # fmt: skip
            # While the other split variant, or the profiles of older lengths, are all there
            # is, plan with them rather than fall back to the bootstrap plan.
            known = self._measured.get(key) or self._measured.get((*key[:4], not key[4], version))
            for older in range(version - 1, -1, -1):
                known = known or self._measured.get((*key[:5], older))
            if known:
                out[pool_id] = self._derated(pool_id, known)
            if key not in self._measured and key not in self._measuring:
                prompts: tuple[int, ...] = ()
                outputs: tuple[int, ...] = ()
                if self._profiled_on:
                    prompts, outputs = profile_lengths(
                        self._profiled_on, reference_lengths(), scheme_by_name(self._cfg.scheme)
                    )
                request = ProfileRequest(
                    gpu=pool.gpu, tp=pool.tp, model=pool.model, scheme=self._cfg.scheme,
                    clock_fractions=self._cfg.profile_clock_fractions,
                    window_s=self._cfg.profile_window_s, max_num_seqs=key[3],
                    prompts=prompts, outputs=outputs,
                )  # fmt: skip
                job = ModeProfileJob(
                    request=request, rows=rows if not self._profiled_on else (), mixed=mixed,
                    groups=tuple(sorted(groups.items())), observed=self._profiled_on,
                )  # fmt: skip
                self._measuring[key] = asyncio.create_task(self._measure(key, job))
        return out

    def _derated(self, pool_id: str, rows: tuple[ServingConfig, ...]) -> tuple[ServingConfig, ...]:
        """``rows`` with the capacity SLO feedback learned for ``pool_id``."""
        share = self._learned.share(pool_id)
        if share >= 1.0:
            return rows
        return tuple(dataclasses.replace(r, max_qps=r.max_qps * share) for r in rows)

    async def close(self) -> None:
        """Cancel the measurements in progress and end their child processes."""
        tasks = list(self._measuring.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _measure(self, key: ProfileKey, job: ModeProfileJob) -> tuple[ServingConfig, ...]:
        started = time.perf_counter()
        context = multiprocessing.get_context("spawn")  # no fork of a threaded event loop
        request = job.request
        try:
            pool = ProcessPoolExecutor(1, mp_context=context)
            done = False
            try:
                rows, mixed = await asyncio.get_running_loop().run_in_executor(
                    pool, live_mode_profiles, job
                )
                done = True
            finally:
                # Not ``with pool``: its shutdown(wait=True) blocked the event loop, when
                # this task was cancelled at shutdown, until the child's profiling ended.
                if done:
                    pool.shutdown(wait=True)  # the child is idle: it exits at once
                else:
                    _stop_now(pool)
        except asyncio.CancelledError:
            self._measuring.pop(key, None)  # not measured: a later epoch may ask again
            raise
        except Exception:
            logger.exception("profiling %s tp%d failed; retrying", request.gpu, request.tp)
            del self._measuring[key]
            return ()
        self._measured[key] = rows
        logger.info(
            "profiled %s: %d rows in %.1f s; mixed-class capacity factors %s", key,
            len(rows), time.perf_counter() - started,
            {f"{c.group}@{c.clock_mhz:g}": round(c.derating, 3) for c in mixed},
        )  # fmt: skip
        return rows


def _stop_now(pool: ProcessPoolExecutor) -> None:
    """Shut ``pool`` down without waiting, and end its child mid-job.

    ``shutdown(wait=False, cancel_futures=True)`` alone leaves a running job running: the
    child would go on profiling, and at interpreter exit ``concurrent.futures`` joins the
    executor's manager thread, which waits for that job, so the process would not exit
    until the measurement ended. Python 3.11's executor has no public way to end a running
    job (``terminate_workers`` came in 3.14), so the child is terminated through the
    executor's process table, read before ``shutdown`` drops it. The manager thread then
    sees the child gone, marks the pool broken, reaps the child and ends.
    """
    children = list((pool._processes or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for child in children:
        if child.is_alive():
            child.terminate()  # SIGTERM: the job is pure Python, nothing to flush

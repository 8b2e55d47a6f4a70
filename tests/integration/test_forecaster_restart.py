"""Fast, clean restarts of the forecaster process: a SIGTERM during the start-up fit ends it
within seconds, and a restart loads the fitted model from the cache in seconds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from greenserve.local import FORECASTER_CACHE_ENV
from services.forecaster.service import load_or_fit_regions
from services.forecaster.sources import load_zone
from shared.paths import DATA_DIR_ENV, REPO_ROOT
from shared.servers import ServerProcess
from shared.zones import ZoneRegistry
from tests.zone_files import write_eia_csv

pytestmark = pytest.mark.connected

AFTER_THE_DATA = pd.Timestamp("2022-05-01", tz="UTC")
STOP_LIMIT_S = 5.0
"""A stop must take less than this (compose's default grace period is 10 s)."""


class _Forecaster:
    """``python -m services.forecaster`` with its log lines collected as they come."""

    def __init__(self, env: dict[str, str]) -> None:
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.forecaster"],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[tuple[float, str]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append((time.monotonic() - self.started, line.rstrip()))

    def wait_for(self, text: str, timeout_s: float) -> float:
        """Seconds from the start until a log line holding ``text``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for at, line in list(self.lines):
                if text in line:
                    return at
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        log = "\n".join(line for _, line in self.lines[-30:])
        raise AssertionError(f"no log line with {text!r} within {timeout_s} s:\n{log}")

    def terminate(self) -> tuple[float, int]:
        """Send SIGTERM; the seconds until the process ended and its exit code."""
        sent = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(timeout=5)
        return time.monotonic() - sent, code


def _env(
    nats: ServerProcess, redis: ServerProcess, namespace: str, data: Path, cache: Path
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GREENSERVE_")}
    env.pop(FORECASTER_CACHE_ENV, None)
    env.update(
        {
            "GREENSERVE_NAMESPACE": namespace,
            "GREENSERVE_NATS__URL": nats.url,
            "GREENSERVE_REDIS__URL": redis.url,
            DATA_DIR_ENV: str(data),
            "GREENSERVE_FORECASTER__REGIONS": '["eia:ERCO"]',
            FORECASTER_CACHE_ENV: str(cache),
            # Past the data's end: the fit's data end (and its cache key) is the data's.
            "GREENSERVE_CLOCK__ORIGIN_MODEL_S": str(
                pd.Timestamp("2022-05-01", tz="UTC").timestamp()
            ),
            "GREENSERVE_SHUTDOWN_TIMEOUT_S": "2",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def test_sigterm_stops_the_forecaster_mid_fit_and_a_restart_loads_the_fit(
    nats_server: ServerProcess,
    redis_server: ServerProcess,
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Test, with 100 days of ERCO (a fit of about 30 CPU seconds here): SIGTERM a second into
    the start-up fit ends the process cleanly in under 5 s; with the fit in the cache, a
    restart has its model within seconds of starting, and stops as fast."""
    data = tmp_path / "data"
    write_eia_csv(data, "ERCO", "2022-01-01", 24 * 100)
    cache = tmp_path / "cache"
    env = _env(nats_server, redis_server, namespace, data, cache)

    fitting = _Forecaster(env)
    fitting.wait_for("forecaster started", 60)
    time.sleep(1.0)  # into the fit (it logs nothing until the region is done)
    assert not any("fitted on data to" in line for _, line in fitting.lines)
    mid_fit_stop_s, code = fitting.terminate()
    assert code == 0, fitting.lines[-20:]
    assert mid_fit_stop_s < STOP_LIMIT_S, f"stop took {mid_fit_stop_s:.1f} s"
    assert not list(cache.glob("ERCO-*.pkl"))  # the interrupted fit stored nothing

    # The fit the service would make, stored the way it stores it (same key).
    monkeypatch.setenv(DATA_DIR_ENV, str(data))
    history = load_zone(ZoneRegistry.from_settings().resolve("eia:ERCO"))
    cut = history.intensity.index[-1]
    [(_, fitted)] = list(load_or_fit_regions({"ERCO": history}, "eia", cut, cache))
    assert not isinstance(fitted, ValueError), fitted
    assert len(list(cache.glob("ERCO-*.pkl"))) == 1

    restarted = _Forecaster(env)
    started_s = restarted.wait_for("forecaster started", 60)
    loaded_s = restarted.wait_for("forecaster for ERCO fitted on data to", 30)
    stop_s, code = restarted.terminate()
    assert code == 0, restarted.lines[-20:]
    assert loaded_s - started_s < 5.0, f"model ready {loaded_s - started_s:.1f} s after start"
    assert stop_s < STOP_LIMIT_S, f"stop took {stop_s:.1f} s"
    print(
        f"forecaster restart: model from the cache {loaded_s - started_s:.2f} s after start "
        f"({loaded_s:.2f} s after spawn); SIGTERM to exit {stop_s:.2f} s, "
        f"{mid_fit_stop_s:.2f} s mid-fit"
    )

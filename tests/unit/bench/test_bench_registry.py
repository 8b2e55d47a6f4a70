"""Each benchmark is a light options module and a work module that agree with each other."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import greenserve.bench
import greenserve.faults
import services.dvfs.profile_live
from greenserve.bench import discover
from greenserve.bench.options import faults as faults_options
from greenserve.bench.options import profile_drift as profile_drift_options

BENCHES = discover()


@pytest.mark.parametrize("name", sorted(BENCHES))
def test_every_benchmark_has_a_work_module_that_runs_it(name: str) -> None:
    """Test that each options module's work module has ``run`` and says the same name and
    help (the CLI shows the options module's; the work module's is what its tests import)."""
    bench = BENCHES[name]
    work = bench.load()
    assert callable(work.run)
    assert (bench.name, bench.help) == (work.NAME, work.HELP)


def test_discovery_finds_the_benchmarks_the_docs_name() -> None:
    """Test that discovery reads the options package (one module per benchmark)."""
    assert {"cli-help", "cluster", "dvfs", "freesh-pool", "llf", "sim-speed"} <= set(BENCHES)
    assert BENCHES["llf"].module == "greenserve.bench.llf"


def test_constants_written_out_in_options_modules_match_their_source() -> None:
    """Test the defaults an options module repeats rather than import a heavy module for."""
    assert faults_options.ALL_SCENARIOS == greenserve.faults.ALL_SCENARIOS
    assert faults_options.OUTAGE_S == greenserve.faults.OUTAGE_S
    assert faults_options.MULTIHOST_SCENARIOS == greenserve.faults.MULTIHOST_SCENARIOS
    drift = services.dvfs.profile_live.DEFAULT_DRIFT_WINDOW
    assert drift == profile_drift_options.DEFAULT_DRIFT_WINDOW


def test_every_benchmark_module_has_an_options_module() -> None:
    """Test that no module of ``greenserve/bench`` defines a command (a top-level ``NAME``)
    without the light options module the CLI discovers; one written the old way would
    silently vanish from ``greenserve bench``. Read as text, so as to import none of them."""
    folder = Path(greenserve.bench.__file__).parent
    defines_a_command = re.compile(r"^(NAME\b|from greenserve\.bench\.options\.)", re.MULTILINE)
    commands = {
        path.stem
        for path in folder.glob("[!_]*.py")
        if defines_a_command.search(path.read_text(encoding="utf-8"))
    }
    discovered = {bench.module.rpartition(".")[2] for bench in BENCHES.values()}
    assert commands == discovered

"""Each benchmark is a folder: a light options module and a work module that agree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import greenserve.bench
import greenserve.faults
import services.dvfs.profile_live
from greenserve.bench import discover
from greenserve.bench.faults import options as faults_options
from greenserve.bench.profile_drift import options as profile_drift_options

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
    assert BENCHES["llf"].module == "greenserve.bench.llf.run"


def test_constants_written_out_in_options_modules_match_their_source() -> None:
    """Test the defaults an options module repeats rather than import a heavy module for."""
    assert faults_options.OUTAGE_S == greenserve.faults.OUTAGE_S
    drift = services.dvfs.profile_live.DEFAULT_DRIFT_WINDOW
    assert drift == profile_drift_options.DEFAULT_DRIFT_WINDOW


def test_every_benchmark_module_has_an_options_module() -> None:
    """Test that no module of ``greenserve/bench`` defines a command (a top-level ``NAME``,
    or an import of an options module) except the ``run.py`` of a discovered folder, and
    that every folder is discovered; one written another way would silently vanish from
    ``greenserve bench``. Read as text, so as to import none of them."""
    root = Path(greenserve.bench.__file__).parent
    defines_a_command = re.compile(
        r"^(NAME\b|from greenserve\.bench\.\w+\.options import)", re.MULTILINE
    )
    commands = {
        ".".join(("greenserve", "bench", *path.relative_to(root).with_suffix("").parts))
        for path in root.rglob("*.py")
        if path.name != "options.py" and defines_a_command.search(path.read_text("utf-8"))
    }
    folders = {
        f"greenserve.bench.{path.parent.name}.run"
        for path in root.glob("*/*.py")
        if "__pycache__" not in path.parts
    }
    discovered = {bench.module for bench in BENCHES.values()}
    assert commands == discovered
    assert folders == discovered


MEASURED_ELSEWHERE_OK = frozenset({"__init__", "options", "run", "plots", "report"})
"""Names of a role, not of a measured module: each bench folder may have its own."""


def test_no_bench_module_is_named_after_a_module_outside_the_bench() -> None:
    """Test that a bench module's file name is not that of a module it might measure
    (``bfio.py``, ``faults.py``, ``cluster.py``): two files of one name send a reader of a
    traceback or a search to the wrong one."""
    root = Path(greenserve.bench.__file__).parents[2]
    bench = root / "greenserve" / "bench"
    outside = {
        path.stem
        for folder in ("greenserve", "loadgen", "services", "shared", "proto", "tools")
        for path in (root / folder).rglob("*.py")
        if bench not in path.parents
    }
    inside = {path.stem for path in bench.rglob("*.py")} - MEASURED_ELSEWHERE_OK
    assert sorted(inside & outside) == []

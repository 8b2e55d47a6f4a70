"""``greenserve up --models``: the workers dealt out over models, one pool per region and model."""

from __future__ import annotations

import pytest

from greenserve.cli import build_parser
from greenserve.commands._stack_args import spec_from_args
from greenserve.stack import StackSpec, stack_launches, worker_placements
from services.planner.service import static_plan
from shared.config import PlannerSettings, Settings

TWO = ("llama-3-8b", "llama-2-13b")


def _workers(spec: StackSpec) -> dict[str, tuple[str, str, str]]:
    return {
        launch.name: (
            launch.settings.worker.model,
            launch.settings.worker.region,
            launch.settings.worker.pool_id,
        )
        for launch in stack_launches(spec)
        if launch.module == "services.worker"
    }


def test_workers_go_to_the_models_in_turn_and_each_models_to_the_regions_in_turn() -> None:
    """Test that with 4 workers, 2 models and 3 regions each model gets 2 workers on two
    regions, each in its own pool, and the static plan names every pool's model."""
    spec = StackSpec(workers=4, models=TWO, regions=("PJM", "CISO", "BPAT"))
    assert worker_placements(spec) == [
        ("PJM", TWO[0]), ("PJM", TWO[1]), ("CISO", TWO[0]), ("CISO", TWO[1]),
    ]  # fmt: skip
    assert _workers(spec) == {
        "worker-0": (TWO[0], "PJM", "pjm-a100-llama-3-8b"),
        "worker-1": (TWO[1], "PJM", "pjm-a100-llama-2-13b"),
        "worker-2": (TWO[0], "CISO", "ciso-a100-llama-3-8b"),
        "worker-3": (TWO[1], "CISO", "ciso-a100-llama-2-13b"),
    }
    settings = stack_launches(spec)[0].settings
    plan = static_plan(settings.planner, 0, 0.0, 1.0)
    assert {(p.pool_id, p.model, p.instances) for p in plan.pools} == {
        ("pjm-a100-llama-3-8b", TWO[0], 1),
        ("ciso-a100-llama-3-8b", TWO[0], 1),
        ("pjm-a100-llama-2-13b", TWO[1], 1),
        ("ciso-a100-llama-2-13b", TWO[1], 1),
    }


def test_one_model_keeps_its_pool_names_and_a_new_model_joins_the_classifiers_list() -> None:
    """Test that a one-model stack is dealt out as before (pools ``<region>-<gpu>``), and
    that a model outside the classifier's default list is added to it."""
    one = StackSpec(workers=3, regions=("PJM", "CISO"))
    assert [pool for _, _, pool in _workers(one).values()] == ["pjm-a100", "ciso-a100", "pjm-a100"]
    mixed = StackSpec(workers=2, models=("llama-3-8b", "llama-3.1-8b"), regions=("PJM",))
    assert {pool for _, _, pool in _workers(mixed).values()} == {
        "pjm-a100-llama-3-8b",
        "pjm-a100-llama-3-1-8b",  # the dot is not an id character
    }
    assert "llama-3.1-8b" in stack_launches(mixed)[0].settings.classifier.models


def test_a_settings_file_deploys_a_mix_through_the_static_pools() -> None:
    """Test that ``planner.static_pools`` entries take a ``model`` (a pool without one takes
    any model, as plans did before pools named models)."""
    settings = Settings(
        planner={
            "static_pools": [
                {"pool_id": "a", "region": "PJM", "gpu": "A100-80GB", "tp": 1, "instances": 1,
                 "model": "llama-2-13b"},
                {"pool_id": "b", "region": "PJM", "gpu": "A100-80GB", "tp": 1, "instances": 1},
            ]
        }
    )  # fmt: skip
    plan = static_plan(settings.planner, 0, 0.0, 1.0)
    assert [(p.pool_id, p.model) for p in plan.pools] == [("a", "llama-2-13b"), ("b", "")]
    assert PlannerSettings().static_pools[0].get("model") is None


def test_models_on_the_command_line() -> None:
    """Test ``--models``: parsed into the spec; a model named twice, an unknown model or
    fewer workers than models are refused."""
    parser, _ = build_parser()
    args = parser.parse_args(["up", "--models", "llama-3-8b, llama-2-13b", "--workers", "2"])
    spec = spec_from_args(args)
    assert spec.served_models == TWO
    demo = parser.parse_args(["demo"])
    assert spec_from_args(demo).served_models == ("llama-3-8b", "qwen3-8b")
    assert spec_from_args(parser.parse_args(["up"])).served_models == ("llama-3-8b",)
    for bad in ("llama-3-8b,llama-3-8b", "gpt-99", ","):
        with pytest.raises(SystemExit):
            parser.parse_args(["up", "--models", bad])
    with pytest.raises(ValueError, match="at least as many workers"):
        StackSpec(workers=1, models=TWO)

"""Inner validation of forecaster variants, inside the EIA training months only.

The bench's rolling protocol moved into the training span: history cut at 2022-07-31 23:00
(the end of the EIA training months), first fit on January-April, refit every 30 days,
daily origins May 1 - July 30, the seven balancing authorities pooled. No test-span
(August-December) value is read. Prints one JSON line: mean MAPE per bucket of the blend,
the booster and template + level, the blend's mean MAPE relative to template + level over
regions x buckets, the buckets that lose to template + level, and day 1 per region.

    PYTHONPATH=. GREENSERVE_DATA_DIR=... python tools/forecaster_inner_validation.py VARIANT...

Variants (docs/forecaster.md, *Inner validation and the extra history*), each lever a
suffix on a variant:

* history: ``base``; ``A<days>`` recency half-life; ``B0`` derived low-carbon/renewable share
  columns; ``B1`` those plus EM 2021-22 rows of the three US zones mapped onto them; ``B2``
  EM rows of the three US zones with unknown shares (kept); ``B3`` the same with all seven
  EM zones; ``+A<days>`` adds a half-life to a variant;
* source-production tier (:mod:`services.forecaster.mix`): ``+M`` the per-fuel mix forecast
  as a fifth blend member, ``+F`` its log-ratio to the template as a booster feature, ``+S``
  the forecast mix's fuel shares at the target hour as booster features, ``+H<hours>`` those
  features only for the boosters up to that horizon (``B2+F+S+H24`` kept); a variant without
  them starts from the config before the tier;
* booster base (on top of ``B2+F+S+H24``): ``+R`` the booster learns the log-ratio to
  template + level instead of the template (``booster_base``); ``+G`` three bagged boosters
  per bucket (``booster_bag``; ``+G<k>``: k of them); both kept;
* on top of ``B2+F+S+H24+R+G``: ``+C`` the blend scaled per bucket by its validation
  MAPE-optimal factor (``mape_scale``); ``+X`` the booster reads the seven regions' recent
  level ratios (``context_features``, :func:`~services.forecaster.sources.with_context`);
  ``+W`` blend weights fitted to the validation MAPE (``blend_stack_share`` = 1),
  ``+W<percent>`` that share of them, the rest inverse-error weights (``+W50``); ``+D`` the
  booster reads NERC's public holidays (``holiday_features``,
  :mod:`services.forecaster.holidays`; kept);
* on top of ``B2+F+S+H24+R+G+D``: ``+Q`` EIA hours whose total generation is implausible
  become gaps (:mod:`greenserve.bench.forecaster.screening`); ``+Z`` the booster reads the sun's
  path against the template's (``solar_features``, :mod:`services.forecaster.sun`).

``EM:<variant>`` runs a variant on the Electricity Maps inner protocol instead (each zone
cut at 2023-12-31, one fit on 2021-2022, daily origins through 2023; the options that need
EIA generation data do nothing there): ``EM:B2+F+S+H24`` against ``EM:B2+F+S+H24+R+G``
checks the booster-base levers on the zones they were not chosen on.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from dataclasses import replace

import numpy as np
import pandas as pd

from greenserve.bench.forecaster.backtest import run_backtest
from greenserve.bench.forecaster.screening import screened
from services.forecaster.config import ForecasterConfig
from services.forecaster.models import SharedFits
from services.forecaster.sources import (
    EIA_REGIONS,
    EM_ZONES,
    CarbonHistory,
    load_eia_csv,
    load_em_csv,
    with_context,
    with_unknown_context,
    with_unknown_shares,
)

CUT = pd.Timestamp("2022-07-31 23:00", tz="UTC")
EM_CUT = pd.Timestamp("2023-12-31 23:00", tz="UTC")
EM_TRAIN_END = pd.Timestamp("2022-12-31 23:00", tz="UTC")
TRAIN_END = pd.Timestamp("2022-04-30 23:00", tz="UTC")
US_ZONES = ("US-CAL-CISO", "US-MIDA-PJM", "US-NY-NYIS")
BUCKETS = ("1-6h", "day1", "day2")


def _with_mix(history: CarbonHistory, mix: pd.DataFrame) -> CarbonHistory:
    return dataclasses.replace(history, fuel_mix=mix)


def _derived(history: CarbonHistory) -> CarbonHistory:
    assert history.fuel_mix is not None
    mix = history.fuel_mix.copy()
    mix["low_carbon"] = mix[["NUC", "WAT", "WND", "SUN"]].sum(axis=1, min_count=1)
    mix["renewable"] = mix[["WAT", "WND", "SUN"]].sum(axis=1, min_count=1)
    return _with_mix(history, mix)


def main(spec: str, shared: SharedFits | None = None) -> dict[str, object]:
    """Run one variant and return its scores (``shared``: fits reused across variants)."""
    on_em = spec.startswith("EM:")
    variant, *options = spec.removeprefix("EM:").split("+")
    # The variants start from the config without the source-production features (the kept
    # variant is ``B2+F+S+H24``) and with every later lever pinned off, so a variant names
    # its whole model and does not depend on the current default.
    cfg = ForecasterConfig(
        mix_feature=False,
        mix_share_features=False,
        mix_features_max_h=None,
        booster_base="template",
        booster_bag=1,
        mape_scale=False,
        holiday_features=False,
        solar_features=False,
    )
    screen = "Q" in options
    for option in ([variant] if variant.startswith("A") else []) + options:
        if option == "Q":
            continue  # data screening, applied to the histories below
        if option == "M":
            cfg = replace(cfg, mix_member=True)
        elif option == "F":
            cfg = replace(cfg, mix_feature=True)
        elif option == "S":
            cfg = replace(cfg, mix_share_features=True)
        elif option.startswith("H"):
            cfg = replace(cfg, mix_features_max_h=int(option[1:]))
        elif option == "R":
            cfg = replace(cfg, booster_base="template_level")
        elif option.startswith("G"):
            cfg = replace(cfg, booster_bag=int(option[1:] or 3))
        elif option == "C":
            cfg = replace(cfg, mape_scale=True)
        elif option == "X":
            cfg = replace(cfg, context_features=True)
        elif option == "D":
            cfg = replace(cfg, holiday_features=True)
        elif option == "Z":
            cfg = replace(cfg, solar_features=True)
        elif option.startswith("W"):
            cfg = replace(cfg, blend_stack_share=int(option[1:] or 100) / 100)
        else:
            cfg = replace(cfg, booster_half_life_days=float(option[1:]))
    if on_em:
        return _em(spec, cfg)
    hist = {r: load_eia_csv(r).until(CUT) for r in EIA_REGIONS}
    if screen:
        hist = {r: screened(h)[0] for r, h in hist.items()}
    if variant in ("B0", "B1"):
        hist = {r: _derived(h) for r, h in hist.items()}
    columns = list(next(iter(hist.values())).fuel_mix.columns)  # type: ignore[union-attr]
    extra: list[CarbonHistory] = []
    zones = {"B1": US_ZONES, "B2": US_ZONES, "B3": EM_ZONES}.get(variant, ())
    for zone in zones:
        em = load_em_csv(zone, years=(2021, 2022)).until(CUT)
        if variant == "B1":
            assert em.fuel_mix is not None
            mix = pd.DataFrame(
                {c: em.fuel_mix[c] if c in em.fuel_mix.columns else np.nan for c in columns},
                index=em.fuel_mix.index,
            )
            extra.append(_with_mix(em, mix))
        else:
            extra.append(with_unknown_shares(em, columns))
    if cfg.context_features:
        # Every member carries the same context: the seven regions' intensity (its own
        # included); the Electricity Maps rows have it unknown.
        hist = {r: with_context(h, hist) for r, h in hist.items()}
        extra = [with_unknown_context(h, sorted(hist)) for h in extra]
    shared = shared if shared is not None else SharedFits()
    started = time.perf_counter()
    scores: dict[str, dict[str, dict[str, float]]] = {}
    bands: dict[str, dict[str, dict[str, float]]] = {}
    for region in EIA_REGIONS:
        related = [h for other, h in hist.items() if other != region] + extra
        result = run_backtest(
            hist[region], TRAIN_END, config=cfg, refit_days=30, related=related, shared=shared
        )
        scores[region], bands[region] = result.mape, result.bands
        print(region, result.mape["chosen"], file=sys.stderr, flush=True)
    return _summary(spec, scores, started, bands)


def _band_summary(bands: dict[str, dict[str, dict[str, float]]]) -> dict[str, object]:
    """Per band: coverage by region, the mean |coverage - 0.80| (the session-10 rule's
    score) and the mean log-width."""
    return {
        band: {
            "coverage": {r: bands[r][band]["coverage"] for r in bands},
            "mean_abs_coverage_error": round(
                float(np.mean([abs(bands[r][band]["coverage"] - 0.8) for r in bands])), 4
            ),
            "mean_log_width": round(
                float(np.mean([bands[r][band]["mean_log_width"] for r in bands])), 4
            ),
        }
        for band in ("validation", "recent")
    }


def _summary(
    spec: str,
    scores: dict[str, dict[str, dict[str, float]]],
    started: float,
    bands: dict[str, dict[str, dict[str, float]]],
) -> dict[str, object]:
    """Mean MAPE per model and bucket, the score relative to t+l, misses, day 1 by region,
    and the coverage of both p10/p90 bands."""
    models = ("chosen", "gbm", "template_level") + (
        ("mix",) if all("mix" in scores[r] for r in scores) else ()
    )
    return {
        "variant": spec,
        "mean": {
            m: {b: round(float(np.mean([scores[r][m][b] for r in scores])), 3) for b in BUCKETS}
            for m in models
        },
        "rel_to_tl": round(
            float(
                np.mean(
                    [
                        scores[r]["chosen"][b] / scores[r]["template_level"][b]
                        for r in scores
                        for b in BUCKETS
                    ]
                )
            ),
            4,
        ),
        "misses": [
            f"{r}/{b}"
            for r in scores
            for b in BUCKETS
            if scores[r]["chosen"][b] >= scores[r]["template_level"][b]
        ],
        "day1": {r: scores[r]["chosen"]["day1"] for r in scores},
        "bands": _band_summary(bands),
        "wall_s": round(time.perf_counter() - started),
    }


def _em(spec: str, cfg: ForecasterConfig) -> dict[str, object]:
    """The Electricity Maps inner protocol: each zone's history cut at the end of its
    training years (2023), fitted once on 2021-2022, daily origins through 2023 (the bench
    fits once on 2021-2023 and tests 2024). Zones are not pooled, as in the bench."""
    started = time.perf_counter()
    scores: dict[str, dict[str, dict[str, float]]] = {}
    bands: dict[str, dict[str, dict[str, float]]] = {}
    for zone in EM_ZONES:
        history = load_em_csv(zone, years=(2021, 2022, 2023)).until(EM_CUT)
        result = run_backtest(history, EM_TRAIN_END, config=cfg)
        scores[zone], bands[zone] = result.mape, result.bands
        print(zone, scores[zone]["chosen"], file=sys.stderr, flush=True)
    return _summary(spec, scores, started, bands)


if __name__ == "__main__":
    # Several variants in one run share their fits (e.g. ``B2+F+S+H24+R+G`` and its ``+C``,
    # whose boosters are the same); each prints its own line.
    memo = SharedFits()
    for name in sys.argv[1:] or ["base"]:
        print(json.dumps(main(name, memo)), flush=True)

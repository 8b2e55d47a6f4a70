"""Tests of class schemes, FREESH partitions and default SLOs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from shared.domain.classes import (
    ClassScheme,
    default_slos,
    dynamollm_scheme,
    freesh_scheme,
    load_freesh_schemes,
    percentile_scheme,
    scheme_by_name,
)

if TYPE_CHECKING:
    from pathlib import Path


@pytest.mark.parametrize(
    ("prompt_tokens", "output_tokens", "expected"),
    [
        (0, 0, "SS"),
        (255, 99, "SS"),
        (256, 99, "MS"),
        (255, 100, "SM"),
        (1023, 349, "MM"),
        (1024, 349, "LM"),
        (1023, 350, "ML"),
        (1024, 350, "LL"),
        (8192, 4096, "LL"),
    ],
)
def test_dynamollm_classes_switch_exactly_at_table_iv_thresholds(
    prompt_tokens: int, output_tokens: int, expected: str
) -> None:
    """Test that a count equal to a threshold falls in the next class (bounds are exclusive)."""
    assert dynamollm_scheme().classify(prompt_tokens, output_tokens) == expected


def test_dynamollm_scheme_names_nine_classes_input_first() -> None:
    """Test that the nine DynamoLLM classes are listed input-major, SS first and LL last."""
    assert dynamollm_scheme().classes == ("SS", "SM", "SL", "MS", "MM", "ML", "LS", "LM", "LL")


def test_freesh_partitions_are_read_from_the_shared_csv() -> None:
    """Test that partitions a and b carry the Table 4 thresholds from partitions.csv."""
    schemes = load_freesh_schemes()
    assert schemes["freesh-a"].input_edges == (184,)
    assert schemes["freesh-a"].output_edges == (444,)
    assert schemes["freesh-b"].input_edges == (25,)
    assert schemes["freesh-b"].output_edges == (232,)
    assert freesh_scheme("a") == schemes["freesh-a"] == freesh_scheme("freesh-a")


def test_freesh_partition_a_switches_exactly_at_its_thresholds() -> None:
    """Test that partition a names 183/443 short and 184/444 long."""
    scheme = freesh_scheme("a")
    assert scheme.classes == ("SS", "SL", "LS", "LL")
    assert scheme.classify(183, 443) == "SS"
    assert scheme.classify(184, 443) == "LS"
    assert scheme.classify(183, 444) == "SL"


def test_freesh_scheme_reads_a_given_csv(tmp_path: Path) -> None:
    """Test that a custom partitions file is honoured and an unknown partition is refused."""
    path = tmp_path / "partitions.csv"
    path.write_text(
        "partition,input_threshold_tokens,output_threshold_tokens,note\nz,10,20,test\n",
        encoding="utf-8",
    )
    assert freesh_scheme("z", path=path).classify(10, 19) == "LS"
    with pytest.raises(KeyError, match="not found"):
        freesh_scheme("a", path=path)


def test_malformed_partition_row_is_refused(tmp_path: Path) -> None:
    """Test that a non-numeric threshold gives a clear error naming the file."""
    path = tmp_path / "partitions.csv"
    path.write_text(
        "partition,input_threshold_tokens,output_threshold_tokens,note\nz,ten,20,x\n",
        encoding="utf-8",
    )
    with pytest.raises(ValueError, match="malformed FREESH partition row"):
        load_freesh_schemes(path)


def test_scheme_by_name_resolves_plan_names_and_refuses_unknown_ones() -> None:
    """Test that plan scheme names map to schemes and a typo raises KeyError."""
    assert scheme_by_name("dynamollm9") == dynamollm_scheme()
    assert scheme_by_name("freesh-b").output_edges == (232,)
    with pytest.raises(KeyError):
        scheme_by_name("dynamo9")


@pytest.mark.parametrize(
    ("input_edges", "output_edges", "labels"),
    [
        ((256, 256), (100, 350), ("S", "M", "L")),
        ((0,), (100,), ("S", "L")),
        ((256,), (100, 350), ("S", "M", "L")),
        ((256,), (100,), ("S", "M", "L")),
        ((256,), (100,), ("S", "S")),
    ],
)
def test_inconsistent_schemes_are_refused(
    input_edges: tuple[int, ...], output_edges: tuple[int, ...], labels: tuple[str, ...]
) -> None:
    """Test that non-increasing edges, mismatched bucket counts and label clashes fail."""
    with pytest.raises(ValueError):
        ClassScheme(name="bad", input_edges=input_edges, output_edges=output_edges, labels=labels)


def test_negative_counts_cannot_be_classified() -> None:
    """Test that a negative prompt or output count raises ValueError."""
    with pytest.raises(ValueError, match="prompt_tokens"):
        dynamollm_scheme().classify(-1, 10)
    with pytest.raises(ValueError, match="output_tokens"):
        dynamollm_scheme().classify(10, -1)


def test_default_slos_key_ttft_by_input_class() -> None:
    """Test that DynamoLLM TTFTs are 250/400/2000 ms by input class and FREESH's 300/600 ms."""
    dynamo = default_slos(dynamollm_scheme())
    assert set(dynamo) == set(dynamollm_scheme().classes)
    assert [dynamo[c].ttft_ms for c in ("SL", "ML", "LS")] == [250.0, 400.0, 2000.0]
    assert all(slo.tbt_ms == 100.0 for slo in dynamo.values())
    freesh = default_slos(freesh_scheme("b"))
    assert (freesh["SL"].ttft_ms, freesh["LS"].ttft_ms, freesh["LL"].tbt_ms) == (
        300.0,
        600.0,
        150.0,
    )


def test_percentile_scheme_places_edges_at_observed_percentiles() -> None:
    """Test that μ-Serve buckets put 1..100 at edges 26/51/76/100."""
    scheme = percentile_scheme("muserve5", list(range(1, 101)))
    assert scheme.output_edges == (26, 51, 76, 100)
    assert [scheme.output_bucket(n) for n in (25, 26, 99, 100)] == [0, 1, 3, 4]


def test_output_range_reports_open_last_bucket() -> None:
    """Test that bucket bounds are [0,100), [100,350) and [350, open)."""
    scheme = dynamollm_scheme()
    assert [scheme.output_range(b) for b in range(3)] == [(0, 100), (100, 350), (350, None)]

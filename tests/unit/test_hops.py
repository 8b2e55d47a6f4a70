"""Opt-in hop stamps (``greenserve bench control-plane --hops``)."""

from __future__ import annotations

from shared.bus import HOPS_KEY, add_hops, parse_hops


def test_add_hops_appends_and_parse_keeps_the_last_stamp_of_a_repeated_hop() -> None:
    """Test that stamps accumulate in order and a requeued request's second pull wins."""
    carrier = add_hops({"traceparent": "x"}, fetch=1.0, submit=2.5)
    carrier = add_hops(carrier, pull=3.0)
    carrier = add_hops(carrier, pull=4.25)
    assert carrier["traceparent"] == "x"
    assert parse_hops(carrier[HOPS_KEY]) == {"fetch": 1.0, "submit": 2.5, "pull": 4.25}


def test_parse_hops_skips_malformed_items() -> None:
    """Test that a garbled stamp is dropped, not fatal."""
    assert parse_hops("a=1.5,b=oops,,c") == {"a": 1.5}

"""Reading Azure-format traces of any length mix and order (``loadgen.traces``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.traces import TraceFormatError, TraceRequest, read_azure_trace

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def _csv(tmp_path: Path, rows: str) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(HEADER + rows, encoding="utf-8")
    return path


def test_unsorted_rows_come_back_in_time_order_from_the_earliest_stamp(tmp_path: Path) -> None:
    """Test that rows out of order are sorted and timed from the earliest timestamp."""
    path = _csv(
        tmp_path,
        "2023-11-16 18:00:05,300,30\n2023-11-16 18:00:01,100,10\n2023-11-16 18:00:03,200,20\n",
    )
    trace = read_azure_trace(path)
    assert trace.requests == [
        TraceRequest(0.0, 100, 10),
        TraceRequest(2.0, 200, 20),
        TraceRequest(4.0, 300, 30),
    ]
    assert trace.dropped == {}


def test_rows_the_model_cannot_serve_are_counted_by_reason(tmp_path: Path) -> None:
    """Test that zero-length outputs, empty prompts and unparseable rows are counted."""
    path = _csv(
        tmp_path,
        "2023-11-16 18:00:00,100,10\n"
        "2023-11-16 18:00:01,100,0\n"
        "2023-11-16 18:00:02,0,5\n"
        "not a time,100,10\n"
        "2023-11-16 18:00:03,many,10\n"
        "2023-11-16 18:00:04,900000,10\n",
    )
    trace = read_azure_trace(path)
    # The huge prompt is kept: the simulator refuses it as the live classifier does.
    assert trace.requests == [TraceRequest(0.0, 100, 10), TraceRequest(4.0, 900000, 10)]
    assert trace.dropped == {"bad_row": 2, "empty_output": 1, "empty_prompt": 1}


def test_a_window_keeps_its_rows_and_counts_only_its_own_drops(tmp_path: Path) -> None:
    """Test that the window's offsets start at its start and drops outside it are ignored."""
    path = _csv(
        tmp_path,
        "2023-11-16 18:00:00,100,0\n2023-11-16 18:00:10,100,10\n2023-11-16 18:00:20,100,10\n",
    )
    trace = read_azure_trace(path, start_s=5.0, duration_s=10.0)
    assert trace.requests == [TraceRequest(5.0, 100, 10)]
    assert trace.dropped == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (HEADER, "no request rows"),
        ("", "empty"),
        ("a,b\n1,2\n", "missing columns"),
        (HEADER + "never,1,1\n", "no row with a valid timestamp"),
    ],
)
def test_a_file_without_usable_rows_is_a_clear_error(
    tmp_path: Path, text: str, message: str
) -> None:
    """Test that header-only, empty, foreign and all-garbage files raise TraceFormatError."""
    path = tmp_path / "bad.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(TraceFormatError, match=message):
        read_azure_trace(path)

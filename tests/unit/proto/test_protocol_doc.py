"""docs/protocol.md stays true to the code: generated tables, subjects, keys, error codes."""

from __future__ import annotations

import re
from pathlib import Path

from proto.keys import Keys
from proto.subjects import Subjects
from tests.unit.proto.samples import load_tool

REPO = Path(__file__).resolve().parents[3]
DOC_PATH = REPO / "docs" / "protocol.md"
GEN = load_tool("gen_protocol_tables")
GENERATED = re.compile(r"<!-- generated:(\w+) -->.*?<!-- /generated:\1 -->", re.DOTALL)


def _doc() -> str:
    return DOC_PATH.read_text(encoding="utf-8")


def _prose() -> str:
    """The hand-written part of the document (generated blocks removed)."""
    return GENERATED.sub("", _doc())


def _public_members(cls: type) -> list[str]:
    return [n for n in vars(cls) if not n.startswith("_") and n != "prefix"]


def test_generated_tables_match_the_code() -> None:
    """Test that regenerating the tables from proto/ changes nothing in the document."""
    doc = _doc()
    assert GEN.update_document(doc, GEN.render_blocks()) == doc, (
        "docs/protocol.md is stale: run .venv/bin/python tools/gen_protocol_tables.py"
    )


def test_every_subject_is_described_in_the_prose() -> None:
    """Test that the hand-written subject table names every Subjects member."""
    prose = _prose()
    missing = [n for n in _public_members(Subjects) if f"`{n}`" not in prose]
    assert not missing


def test_every_redis_key_is_described_in_the_prose() -> None:
    """Test that the hand-written key table names every Keys member."""
    prose = _prose()
    missing = [n for n in _public_members(Keys) if f"`{n}`" not in prose and f"`{n}(" not in prose]
    assert not missing


def _codes_in_source() -> set[str]:
    """Error codes the services and shared helpers can emit, found in their source."""
    patterns = [
        re.compile(r"\bcode=\"([a-z_]+)\""),
        re.compile(r"(?:RequestRejected|BackendRefusal)Error\(\s*\"([a-z_]+)\""),
        re.compile(r"ERRORS\.labels\([^,()]+,\s*\"([a-z_]+)\"\)"),
    ]
    codes: set[str] = set()
    for folder in ("services", "shared"):
        for path in (REPO / folder).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            for pattern in patterns:
                codes.update(pattern.findall(text))
    return codes


def test_every_error_code_in_the_code_is_documented() -> None:
    """Test that each code the services emit appears in the errors section."""
    codes = _codes_in_source()
    assert {"malformed", "internal", "too_long", "kv_capacity"} <= codes
    errors_section = _prose().split("## Errors", 1)[1].split("\n## ", 1)[0]
    assert not [c for c in sorted(codes) if f"`{c}`" not in errors_section]

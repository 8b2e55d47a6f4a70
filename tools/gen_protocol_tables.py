"""Generate the reference tables of ``docs/protocol.md`` from the code, so they cannot drift.

Usage: ``.venv/bin/python tools/gen_protocol_tables.py [--check]``

Three blocks of the document are generated, each between ``<!-- generated:NAME -->`` and
``<!-- /generated:NAME -->`` markers: ``messages`` (every msgspec Struct of
``proto.messages`` with its wire tag, fields, types, limits, defaults and the attribute
docstrings of the source), ``subjects`` (every member of ``proto.subjects.Subjects``) and
``keys`` (every member of ``proto.keys.Keys``). Everything outside the markers is prose and
is left alone. ``--check`` exits 1 when the document is stale; a unit test does the same.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import itertools
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import msgspec.inspect as mi

from proto import messages
from proto.keys import Keys
from proto.subjects import Subjects

__all__ = [
    "DOC_PATH",
    "field_docstrings",
    "message_types",
    "render_blocks",
    "render_keys",
    "render_messages",
    "render_subjects",
    "update_document",
]

DOC_PATH = Path(__file__).resolve().parent.parent / "docs" / "protocol.md"
"""The document whose generated blocks this tool owns."""


def message_types() -> list[type[msgspec.Struct]]:
    """Every message Struct exported by ``proto.messages``, in ``__all__`` order."""
    out: list[type[msgspec.Struct]] = []
    for name in messages.__all__:
        obj = getattr(messages, name)
        if isinstance(obj, type) and issubclass(obj, msgspec.Struct):
            out.append(obj)
    return out


def field_docstrings(cls: type[Any]) -> dict[str, str]:
    """Attribute docstrings (a string literal right after a field) of one class's source."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for node, nxt in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[node.target.id] = _markdown(nxt.value.value)
    return docs


def _markdown(text: str) -> str:
    """One line of docstring text as Markdown: RST roles and double backticks become code."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", " ".join(text.split()))
    return text.replace("``", "`").replace("|", "\\|")


def _bounds(t: mi.IntType | mi.FloatType) -> str:
    lo = f"{t.ge} ≤ " if t.ge is not None else f"{t.gt} < " if t.gt is not None else ""
    hi = f" ≤ {t.le}" if t.le is not None else f" < {t.lt}" if t.lt is not None else ""
    return f"{lo}x{hi}" if lo or hi else ""


def _describe(t: mi.Type) -> tuple[str, list[str]]:
    """Type name and validation limits of one msgspec type."""
    if isinstance(t, mi.UnionType):
        parts = [_describe(sub) for sub in t.types]
        return " \\| ".join(name for name, _ in parts), [c for _, cs in parts for c in cs]
    if isinstance(t, mi.IntType | mi.FloatType):
        bound = _bounds(t)
        return ("int" if isinstance(t, mi.IntType) else "float"), [bound] if bound else []
    if isinstance(t, mi.StrType):
        limits = []
        if t.pattern is not None:
            limits.append(f"pattern `{t.pattern}`")
        if t.min_length is not None or t.max_length is not None:
            lo = f"{t.min_length} ≤ " if t.min_length is not None else ""
            hi = f" ≤ {t.max_length}" if t.max_length is not None else ""
            limits.append(f"{lo}len{hi}")
        return "str", limits
    if isinstance(t, mi.ListType):
        item, limits = _describe(t.item_type)
        return f"list[{item}]", limits
    if isinstance(t, mi.DictType):
        key, key_limits = _describe(t.key_type)
        value, value_limits = _describe(t.value_type)
        return f"dict[{key}, {value}]", key_limits + value_limits
    if isinstance(t, mi.StructType):
        return f"[{t.cls.__name__}](#{t.cls.__name__.lower()})", []
    if isinstance(t, mi.NoneType):
        return "None", []
    if isinstance(t, mi.BoolType):
        return "bool", []
    return type(t).__name__.removesuffix("Type").lower(), []


def _default(field: mi.Field) -> str:
    if field.required:
        return "required"
    if field.default_factory is not msgspec.NODEFAULT:
        return f"`{field.default_factory()!r}`"
    return f"`{field.default!r}`"


def render_messages() -> str:
    """One section per message type: tag, summary and a field table."""
    out: list[str] = []
    for cls in message_types():
        info = mi.type_info(cls)
        assert isinstance(info, mi.StructType)
        summary = _markdown(cls.__doc__ or "")
        docs = field_docstrings(cls)
        out += [f"#### {cls.__name__}", "", f"Tag `{info.tag}`. {summary}", ""]
        out += ["| field | type | limits | default | meaning |", "|---|---|---|---|---|"]
        for field in info.fields:
            type_name, limits = _describe(field.type)
            meaning = docs.get(field.name, "")
            out.append(
                f"| `{field.name}` | {type_name} | {'; '.join(limits)} | {_default(field)} "
                f"| {meaning} |"
            )
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def _members(cls: type[Any], instance: Any) -> list[tuple[str, str, str]]:
    """(name, example with ``{placeholders}``, summary) for every public member of a class."""
    rows: list[tuple[str, str, str]] = []
    for name, attr in vars(cls).items():
        if name.startswith("_") or name == "prefix":
            continue
        if isinstance(attr, property) and attr.fget is not None:
            getter: Callable[..., Any] = attr.fget
            example = str(getter(instance))
            label = name
        elif inspect.isfunction(attr):
            params = list(inspect.signature(attr).parameters)[1:]
            # Builders validate their tokens, so pass a valid marker and put braces back after.
            example = str(attr(instance, *(f"X{p}X" for p in params)))
            example = re.sub(r"X([a-z_]+)X", r"{\1}", example)
            label = f"{name}({', '.join(params)})"
        else:
            continue
        rows.append((label, example, _markdown(attr.__doc__ or "")))
    return rows


def render_subjects() -> str:
    """A table of every subject of ``Subjects()`` (prefix ``gs``)."""
    lines = ["| member | subject (prefix `gs`) | what |", "|---|---|---|"]
    lines += [f"| `{n}` | `{e}` | {s} |" for n, e, s in _members(Subjects, Subjects())]
    return "\n".join(lines) + "\n"


def render_keys() -> str:
    """A table of every Redis key of ``Keys()`` (prefix ``gs``)."""
    lines = ["| member | key (prefix `gs`) | what |", "|---|---|---|"]
    lines += [f"| `{n}` | `{e}` | {s} |" for n, e, s in _members(Keys, Keys())]
    return "\n".join(lines) + "\n"


def render_blocks() -> dict[str, str]:
    """Every generated block by name."""
    return {"messages": render_messages(), "subjects": render_subjects(), "keys": render_keys()}


def _block_replacer(body: str) -> Callable[[re.Match[str]], str]:
    def replace(match: re.Match[str]) -> str:
        return f"{match.group(1)}\n{body}\n{match.group(2)}"

    return replace


def update_document(text: str, blocks: dict[str, str]) -> str:
    """Replace each generated block of ``text`` with its fresh rendering.

    Raises:
        ValueError: a block's markers are missing from the document.
    """
    for name, body in blocks.items():
        pattern = re.compile(
            rf"(<!-- generated:{name} -->\n).*?(<!-- /generated:{name} -->)", re.DOTALL
        )
        if not pattern.search(text):
            raise ValueError(f"markers for generated block {name!r} are missing")
        text = pattern.sub(_block_replacer(body), text)
    return text


def main(argv: list[str] | None = None) -> int:
    """Rewrite the generated blocks, or with ``--check`` report whether they are stale."""
    parser = argparse.ArgumentParser(description="Regenerate docs/protocol.md tables.")
    parser.add_argument("--check", action="store_true", help="exit 1 if the doc is stale")
    parser.add_argument("--doc", type=Path, default=DOC_PATH)
    args = parser.parse_args(argv)
    text = args.doc.read_text(encoding="utf-8")
    fresh = update_document(text, render_blocks())
    if args.check:
        if fresh != text:
            print(f"{args.doc} is stale; run tools/gen_protocol_tables.py", file=sys.stderr)
            return 1
        return 0
    if fresh != text:
        args.doc.write_text(fresh, encoding="utf-8")
        print(f"updated {args.doc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

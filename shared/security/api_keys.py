"""The gateway's API key file: its format, how a key is hashed, and how one is issued.

A key file lists the keys the HTTP API accepts, each as the key itself or, better, its
SHA-256 (``sha256:<64 hex>``), so a copy of the file does not hand out keys. Two forms:

* lines: ``<key or sha256:hex> [requests per minute]``; blank lines and ``#`` comments
  are skipped;
* JSON (``.json``) or YAML (``.yaml``/``.yml``): ``{"keys": [{"key" or "sha256": …,
  "name": …, "requests_per_min": …}]}``.

Only hashes are kept in memory (:class:`ApiKeyEntry`). ``greenserve up --secure`` issues
one key (:func:`issue_api_key`): the key, owner-only, for the operator, and the hashed
key file for the gateway.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from shared.security.secrets import write_secret

__all__ = [
    "KEY_PREFIX",
    "ApiKeyEntry",
    "hash_api_key",
    "issue_api_key",
    "load_api_keys",
    "parse_api_keys",
]

KEY_PREFIX: Final = "sk-gs-"
"""Issued keys start with this (OpenAI's keys start with ``sk-``), so a leaked one is
recognisable in logs and by secret scanners."""

_SHA256: Final = re.compile(r"sha256:([0-9a-fA-F]{64})")


@dataclass(frozen=True, slots=True)
class ApiKeyEntry:
    """One accepted key, by its hash."""

    name: str
    """How the key is named in logs and metrics (never the key): its entry's ``name``, or
    ``key-<n>`` after its place in the file."""
    sha256: bytes
    """SHA-256 digest of the key (32 bytes)."""
    requests_per_min: int | None
    """Its rate limit; ``None``: the gateway's default for keys without one."""


def hash_api_key(key: str) -> bytes:
    """The SHA-256 digest a presented key is compared by."""
    return hashlib.sha256(key.encode("utf-8")).digest()


def _digest(text: str, where: str) -> bytes:
    match = _SHA256.fullmatch(text)
    if match:
        return bytes.fromhex(match.group(1))
    if text.startswith("sha256:"):
        raise ValueError(f"{where}: a sha256: entry needs 64 hex digits")
    if not text.isprintable() or any(c.isspace() for c in text):
        raise ValueError(f"{where}: a key must be printable and without spaces")
    return hash_api_key(text)


def _limit(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where}: requests_per_min must be a positive integer")
    return value


def _from_lines(text: str) -> list[ApiKeyEntry]:
    entries: list[ApiKeyEntry] = []
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        where = f"line {number}"
        if len(fields) > 2:
            raise ValueError(f"{where}: expected '<key> [requests per minute]'")
        limit = _limit(fields[1], where) if len(fields) == 2 else None
        entries.append(ApiKeyEntry(f"key-{len(entries) + 1}", _digest(fields[0], where), limit))
    return entries


def _from_document(document: Any) -> list[ApiKeyEntry]:
    items = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(items, list):
        # A bad file is one error type (ValueError) whatever is wrong in it.
        raise ValueError('expected an object with a list "keys"')  # noqa: TRY004
    entries = []
    for index, item in enumerate(items):
        where = f"keys[{index}]"
        if not isinstance(item, dict) or ("key" in item) == ("sha256" in item):
            raise ValueError(f"{where}: give exactly one of key and sha256")
        secret = item.get("key") or f"sha256:{item.get('sha256')}"
        if not isinstance(secret, str):
            raise ValueError(f"{where}: the key must be a string")  # noqa: TRY004
        name = item.get("name", f"key-{index + 1}")
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}: name must be a non-empty string")
        limit = _limit(item.get("requests_per_min"), where)
        entries.append(ApiKeyEntry(name, _digest(secret, where), limit))
    return entries


def parse_api_keys(text: str, suffix: str = "") -> tuple[ApiKeyEntry, ...]:
    """The entries of a key file's ``text``; ``suffix`` (``.json``, ``.yaml``) picks the form.

    Raises:
        ValueError: a malformed entry (named by line or index), or no key at all (a gateway
            that silently accepted no one would look like an outage).
    """
    try:
        if suffix == ".json":
            entries = _from_document(json.loads(text))
        elif suffix in {".yaml", ".yml"}:
            entries = _from_document(yaml.safe_load(text))
        else:
            entries = _from_lines(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"unreadable key file: {exc}") from None
    if not entries:
        raise ValueError("the key file lists no key")
    if len({e.name for e in entries}) != len(entries):
        raise ValueError("two keys share a name")
    return tuple(entries)


def load_api_keys(path: Path) -> tuple[ApiKeyEntry, ...]:
    """The entries of the key file at ``path``.

    Raises:
        ValueError: the file is malformed (the message names the file and the entry).
        OSError: it cannot be read.
    """
    try:
        return parse_api_keys(path.read_text(encoding="utf-8"), path.suffix.lower())
    except ValueError as exc:
        raise ValueError(f"API key file {path}: {exc}") from None


def issue_api_key(secrets_dir: Path) -> tuple[Path, Path]:
    """Issue one key: ``api-key`` (the key, for clients) and ``api-keys`` (its hash, for the
    gateway), both owner-only in ``secrets_dir``; returns their paths in that order."""
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    key_file = write_secret(secrets_dir / "api-key", key + "\n")
    keys_file = write_secret(
        secrets_dir / "api-keys",
        f"# issued by greenserve up --secure; the key is in {key_file.name}\n"
        f"sha256:{hash_api_key(key).hex()}\n",
    )
    return key_file, keys_file

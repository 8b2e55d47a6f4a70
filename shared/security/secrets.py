"""Secrets: generated, written owner-only, read from settings or files, never shown.

A password reaches a service in one of two ways: the environment
(``GREENSERVE_NATS__PASSWORD``, a :class:`pydantic.SecretStr`, masked in every repr, dump
and log line) or a file named by ``*_file`` (a Docker secret or an owner-only file written
by ``greenserve up --secure``). Files are preferred: they do not show in ``ps e`` or
``docker inspect``.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from pydantic import SecretStr

__all__ = ["generate_password", "read_secret", "redact_url", "url_with_user", "write_secret"]


def generate_password(nbytes: int = 24) -> str:
    """A random URL-safe password (``nbytes`` of entropy, no spaces, no ``$`` or quotes)."""
    return secrets.token_urlsafe(nbytes)


def read_secret(value: SecretStr | None, file: Path | None, what: str) -> str | None:
    """The secret given inline or in a file (trailing newline stripped), or ``None``.

    Raises:
        ValueError: both or an empty file were given (a silent fallback would hide a typo).
        OSError: the file cannot be read.
    """
    if value is not None and file is not None:
        raise ValueError(f"{what}: give the password or the password file, not both")
    if file is not None:
        text = Path(file).read_text(encoding="utf-8").rstrip("\r\n")
        if not text:
            raise ValueError(f"{what}: password file {file} is empty")
        return text
    return value.get_secret_value() if value is not None else None


def write_secret(path: Path, value: str) -> Path:
    """Write ``value`` to ``path`` readable by the owner only (created 0600, never wider)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(value)
    os.chmod(path, 0o600)  # an existing file keeps its old mode through O_CREAT
    return path


_TOKEN_SCHEMES = frozenset({"nats", "tls", "ws", "wss"})
"""Schemes of NATS URLs, where a user part without a password is the auth token."""


def redact_url(url: str) -> str:
    """``url`` with any password (or NATS token) replaced by ``***`` (for logs and messages).

    nats-py sends the user part of ``nats://<token>@host`` as the auth token, so on a NATS
    URL a user without a password is hidden whole; a Redis user name alone is no secret.
    """
    parts = urlsplit(url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if not at:
        return url
    user, colon, _password = userinfo.partition(":")
    if colon:
        netloc = f"{user}:***@{hostport}"
    elif parts.scheme.lower() in _TOKEN_SCHEMES:
        netloc = f"***@{hostport}"
    else:
        return url
    return urlunsplit(parts._replace(netloc=netloc))


def url_with_user(url: str, user: str, password: str) -> str:
    """``url`` authenticating as ``user`` with ``password`` (percent-encoded), in place of
    any user it named; a comma list of URLs (a NATS cluster) gets the user on each."""
    if "," in url:
        return ",".join(url_with_user(one, user, password) for one in url.split(","))
    parts = urlsplit(url)
    hostport = parts.netloc.rpartition("@")[2]
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{hostport}"
    return urlunsplit(parts._replace(netloc=netloc))

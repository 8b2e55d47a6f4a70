"""Secrets: masked in settings and logs, read from files, written owner-only."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import pytest
from pydantic import SecretStr

from shared.config import NatsSettings, RedisSettings, Settings
from shared.security.credentials import (
    issue_credentials,
    nats_password_env,
    service_overrides,
    write_credentials,
)
from shared.security.identities import Identity
from shared.security.secrets import (
    generate_password,
    read_secret,
    redact_url,
    url_with_user,
    write_secret,
)

SECRET = "hunter2-very-secret"


def test_passwords_are_masked_in_repr_dump_and_log_lines(caplog: pytest.LogCaptureFixture) -> None:
    """Test that a password set in settings never shows in repr, str, JSON or a log line."""
    settings = Settings(
        nats=NatsSettings(user="scheduler", password=SecretStr(SECRET)),
        redis=RedisSettings(username="scheduler", password=SecretStr(SECRET)),
    )
    with caplog.at_level(logging.INFO):
        logging.getLogger("test").info("settings: %s / %r", settings, settings.nats)
    shown = [repr(settings), str(settings), settings.model_dump_json(), caplog.text]
    for text in shown:
        assert SECRET not in text
    assert "**********" in caplog.text
    assert settings.nats.password is not None
    assert settings.nats.password.get_secret_value() == SECRET


def test_a_password_from_the_environment_is_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Test that GREENSERVE_NATS__PASSWORD loads as a SecretStr."""
    monkeypatch.setenv("GREENSERVE_NATS__PASSWORD", SECRET)
    settings = Settings()
    assert SECRET not in repr(settings)
    assert read_secret(settings.nats.password, None, "nats") == SECRET


def test_a_password_file_is_read_and_its_newline_dropped(tmp_path: Path) -> None:
    """Test the *_file variant: the file's content (minus trailing newline) is the secret."""
    path = tmp_path / "pw"
    path.write_text(SECRET + "\n")
    settings = NatsSettings(user="u", password_file=path)
    assert read_secret(settings.password, settings.password_file, "nats") == SECRET


def test_ambiguous_or_empty_secrets_are_refused(tmp_path: Path) -> None:
    """Test that both a password and a file, or an empty file, are errors."""
    path = tmp_path / "pw"
    path.write_text("\n")
    with pytest.raises(ValueError, match="not both"):
        read_secret(SecretStr("x"), path, "nats")
    with pytest.raises(ValueError, match="empty"):
        read_secret(None, path, "nats")
    assert read_secret(None, None, "nats") is None


def test_secret_files_are_owner_only(tmp_path: Path) -> None:
    """Test that write_secret creates 0600 files, also over a wider existing file."""
    path = tmp_path / "s"
    path.write_text("old")
    path.chmod(0o644)
    write_secret(path, "new")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == "new"


def test_urls_are_redacted() -> None:
    """Test that a URL's password is replaced and a URL without one is unchanged."""
    assert (
        redact_url("redis://monitor:pw@127.0.0.1:16379/0")
        == "redis://monitor:***@127.0.0.1:16379/0"
    )
    assert redact_url("nats://127.0.0.1:14222") == "nats://127.0.0.1:14222"


def test_a_nats_token_in_a_url_is_redacted() -> None:
    """Test that a NATS URL's lone user part, which nats-py sends as the auth token, is hidden.

    ``greenserve up --nats-url nats://<token>@host`` printed the token in clear: redact_url
    only looked for a password.
    """
    assert redact_url("nats://s3cr3t-token@10.0.0.1:4222") == "nats://***@10.0.0.1:4222"
    assert redact_url("tls://s3cr3t-token@nats:4222") == "tls://***@nats:4222"
    # A Redis user without a password carries no secret.
    assert redact_url("redis://monitor@127.0.0.1:16379/0") == "redis://monitor@127.0.0.1:16379/0"


def test_redacted_urls_keep_ipv6_hosts() -> None:
    """Test that a redacted IPv6 address keeps its brackets (and stays a valid URL)."""
    assert redact_url("redis://u:pw@[::1]:6379/0") == "redis://u:***@[::1]:6379/0"


def test_generated_passwords_are_long_distinct_and_space_free() -> None:
    """Test the password generator's output shape."""
    passwords = {generate_password() for _ in range(50)}
    assert len(passwords) == 50
    assert all(len(p) >= 32 and not any(c.isspace() for c in p) for p in passwords)


def test_credentials_become_files_env_and_settings_without_secrets(tmp_path: Path) -> None:
    """Test that service settings name files only and nats-server gets quoted passwords."""
    worker = Identity("worker-0", "worker", "worker-0")
    creds = issue_credentials([worker, Identity("admin", "admin")])
    assert creds[0].nats_password not in repr(creds)
    files = write_credentials(creds, tmp_path / "secrets")
    assert stat.S_IMODE((tmp_path / "secrets").stat().st_mode) == 0o700
    assert files["worker-0"].nats_password_file.read_text() == creds[0].nats_password
    overrides = service_overrides(worker, files["worker-0"])
    settings = Settings(**overrides)
    assert settings.nats.user == "worker-0"
    assert settings.redis.username == "worker-0"
    assert settings.nats.inbox_prefix == "_INBOX.worker-0"
    assert creds[0].nats_password not in settings.model_dump_json()
    env = nats_password_env(creds)
    assert env["GS_NATS_PASSWORD_WORKER_0"] == f'"{creds[0].nats_password}"'
    with pytest.raises(ValueError, match="duplicate"):
        issue_credentials([worker, worker])


def test_url_with_user_replaces_the_user_on_every_url_of_a_list() -> None:
    """Test that the given user replaces the one a URL named (or is added), the password
    percent-encoded, path kept, and that a NATS cluster's comma list gets it on each URL."""
    assert url_with_user("redis://monitor:pw@127.0.0.1:6379/0", "admin", "a/b") == (
        "redis://admin:a%2Fb@127.0.0.1:6379/0"
    )
    assert url_with_user("nats://127.0.0.1:4222", "admin", "x") == "nats://admin:x@127.0.0.1:4222"
    assert url_with_user("nats://u:p@h1:1,nats://u:p@h2:2", "admin", "x") == (
        "nats://admin:x@h1:1,nats://admin:x@h2:2"
    )

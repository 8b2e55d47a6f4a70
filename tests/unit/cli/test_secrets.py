"""``greenserve secrets``: every credential of the secure stack, random, owner-only, kept."""

from __future__ import annotations

import re
import stat
import subprocess
from pathlib import Path

import pytest

from greenserve.cli import main
from greenserve.secure_env import secure_env_names


def _read(path: Path) -> dict[str, str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def test_it_writes_every_password_owner_only(tmp_path: Path) -> None:
    """Test one distinct random URL-safe password per required variable, in a 0600 file."""
    out = tmp_path / "deploy" / "secure.env"
    assert main(["secrets", "--out", str(out)]) == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    values = _read(out)
    assert list(values) == secure_env_names()
    assert len(set(values.values())) == len(values)
    for value in values.values():
        assert re.fullmatch(r"[A-Za-z0-9_-]{32}", value), value


def test_a_shell_reads_the_file_as_compose_is_told_to(tmp_path: Path) -> None:
    """Test ``set -a; . ./secure.env`` exports each value unchanged (no quoting needed)."""
    out = tmp_path / "secure.env"
    assert main(["secrets", "--out", str(out)]) == 0
    values = _read(out)
    script = f"set -a; . {out}; set +a; env"
    env = subprocess.run(
        ["sh", "-c", script], capture_output=True, text=True, check=True, env={}
    ).stdout
    exported = dict(line.split("=", 1) for line in env.splitlines() if line.startswith("GS_"))
    assert exported == values


def test_an_existing_file_is_kept_unless_forced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Test that a second run exits 1 with one line and leaves the passwords; --force renews
    them and narrows a wider mode back to 0600."""
    out = tmp_path / "secure.env"
    assert main(["secrets", "--out", str(out)]) == 0
    before = out.read_text(encoding="utf-8")
    capsys.readouterr()
    assert main(["secrets", "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "--force" in err[0]
    assert out.read_text(encoding="utf-8") == before
    out.chmod(0o644)
    assert main(["secrets", "--out", str(out), "--force"]) == 0
    assert out.read_text(encoding="utf-8") != before
    assert set(_read(out)) == set(secure_env_names())
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


def test_beside_it_go_the_bcrypt_hashes_of_the_nats_passwords(tmp_path: Path) -> None:
    """Test that the hashes file (0600) defines one bcrypt hash per NATS password of the
    credentials file, each matching its password, holds no password, and that an existing
    hashes file alone also stops a run without --force (the pair stays consistent)."""
    import bcrypt

    from greenserve.secure_env import nats_hashes_path

    out = tmp_path / "secure.env"
    assert main(["secrets", "--out", str(out)]) == 0
    hashes_file = nats_hashes_path(out)
    assert hashes_file.name == "secure.nats-passwords.conf"
    assert stat.S_IMODE(hashes_file.stat().st_mode) == 0o600
    passwords = _read(out)
    defined: dict[str, str] = {}
    for line in hashes_file.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            match = re.fullmatch(r'(GS_NATS_PASSWORD_[A-Z0-9_]+): "(\$2b\$.+)"', line)
            assert match is not None, line
            defined[match[1]] = match[2]
    assert set(defined) == {n for n in passwords if n.startswith("GS_NATS_PASSWORD_")}
    for name, hashed in defined.items():
        assert bcrypt.checkpw(passwords[name].encode(), hashed.encode())
        assert passwords[name] not in hashes_file.read_text(encoding="utf-8")
    out.unlink()
    assert main(["secrets", "--out", str(out)]) == 1
    assert not out.exists()


def test_beside_it_goes_the_redis_acl_file_of_the_redis_passwords(tmp_path: Path) -> None:
    """Test that the Redis ACL file (0600) has one user per identity with the SHA-256 hash of
    its credentials-file password, the default user off, holds no password, and that an
    existing ACL file alone also stops a run without --force."""
    import hashlib

    from greenserve.secure_env import redis_users_path

    out = tmp_path / "secure.env"
    assert main(["secrets", "--out", str(out)]) == 0
    acl_file = redis_users_path(out)
    assert acl_file.name == "secure.redis-users.acl"
    assert stat.S_IMODE(acl_file.stat().st_mode) == 0o600
    text = acl_file.read_text(encoding="utf-8")
    passwords = _read(out)
    lines = text.splitlines()
    assert lines[0].startswith("user default off ")
    redis = {n: v for n, v in passwords.items() if n.startswith("GS_REDIS_PASSWORD_")}
    assert len(lines) == 1 + len(redis)
    for name, password in redis.items():
        digest = hashlib.sha256(password.encode()).hexdigest()
        user = name.removeprefix("GS_REDIS_PASSWORD_").lower().replace("_", "-")
        assert f"user {user} on #{digest} resetkeys " in text, name
    assert not any(value in text for value in passwords.values())
    out.unlink()
    redis_hashes = text
    assert main(["secrets", "--out", str(out)]) == 1
    assert not out.exists()
    assert acl_file.read_text(encoding="utf-8") == redis_hashes

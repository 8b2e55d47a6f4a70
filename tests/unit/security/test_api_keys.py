"""The API key file: its forms, its errors, and the key ``up --secure`` issues."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from shared.security import local_servers
from shared.security.api_keys import (
    KEY_PREFIX,
    hash_api_key,
    issue_api_key,
    load_api_keys,
    parse_api_keys,
)
from shared.security.identities import Identity
from shared.servers import ServerProcess


def test_a_line_file_takes_keys_hashes_limits_and_comments() -> None:
    """Test the line form: a key, a ``sha256:`` hash, an optional limit, ``#`` comments."""
    text = f"# keys\nsk-one\n\nsha256:{hash_api_key('sk-two').hex()} 30  # team b\n"
    one, two = parse_api_keys(text)
    assert (one.name, one.sha256, one.requests_per_min) == ("key-1", hash_api_key("sk-one"), None)
    assert (two.name, two.sha256, two.requests_per_min) == ("key-2", hash_api_key("sk-two"), 30)


def test_json_and_yaml_files_name_keys_and_their_limits() -> None:
    """Test the JSON and YAML forms, by key or by hash, with names and limits."""
    document = {
        "keys": [
            {"name": "team-a", "key": "sk-a", "requests_per_min": 600},
            {"name": "team-b", "sha256": hash_api_key("sk-b").hex()},
        ]
    }
    from_json = parse_api_keys(json.dumps(document), ".json")
    yaml_text = (
        "keys:\n  - {name: team-a, key: sk-a, requests_per_min: 600}\n"
        f"  - {{name: team-b, sha256: {hash_api_key('sk-b').hex()}}}\n"
    )
    assert parse_api_keys(yaml_text, ".yaml") == from_json
    assert [(e.name, e.requests_per_min) for e in from_json] == [("team-a", 600), ("team-b", None)]
    assert from_json[1].sha256 == hash_api_key("sk-b")


@pytest.mark.parametrize(
    ("text", "suffix", "says"),
    [
        ("", "", "no key"),
        ("# only a comment\n", "", "no key"),
        ("sk-a 0\n", "", "line 1: requests_per_min"),
        ("sk-a ten\n", "", "line 1: requests_per_min"),
        ("sk-a 1 2\n", "", "line 1: expected"),
        ("sha256:abc\n", "", "64 hex"),
        ('{"keys": [{"key": "a", "sha256": "b"}]}', ".json", "exactly one"),
        ('{"keys": [{"key": 5}]}', ".json", "string"),
        ('{"keys": [{"key": "a", "name": "x"}, {"key": "b", "name": "x"}]}', ".json", "name"),
        ("[1, 2]", ".json", "list"),
        ("{", ".json", "unreadable"),
    ],
)
def test_a_malformed_key_file_is_a_clear_error(text: str, suffix: str, says: str) -> None:
    """Test that each malformed file is a ValueError saying what is wrong."""
    with pytest.raises(ValueError, match=says):
        parse_api_keys(text, suffix)


def test_an_issued_key_is_owner_only_and_accepted_by_its_hashed_file(tmp_path: Path) -> None:
    """Test that ``issue_api_key`` writes the key and a file holding only its hash, 0600."""
    key_file, keys_file = issue_api_key(tmp_path / "secrets")
    key = key_file.read_text().strip()
    assert key.startswith(KEY_PREFIX)
    assert key not in keys_file.read_text()
    (entry,) = load_api_keys(keys_file)
    assert entry.sha256 == hash_api_key(key)
    for path in (key_file, keys_file):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


def _fake_server(name: str, port: int) -> Any:
    def start(workdir: Path, *_args: Any, **_kwargs: Any) -> ServerProcess:
        workdir.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen([sys.executable, "-c", "pass"])
        proc.wait()
        return ServerProcess(name, port, proc, workdir)

    return start


def test_a_secured_stack_points_its_gateway_at_an_issued_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Test that ``start_secure_servers`` gives the gateway (only) an ``api_keys_file``
    that accepts the key it names in ``api_key_file``; a stack without one issues none."""
    monkeypatch.setattr(local_servers, "start_nats", _fake_server("nats", 4222))
    monkeypatch.setattr(local_servers, "start_redis", _fake_server("redis", 6379))
    identities = [Identity("gateway", "gateway"), Identity("scheduler", "scheduler")]
    secured = local_servers.start_secure_servers(identities, "gs", tmp_path / "with")
    assert secured.api_key_file is not None
    keys_file = Path(secured.overrides["gateway"]["gateway"]["api_keys_file"])
    key = secured.api_key_file.read_text().strip()
    assert [e.sha256 for e in load_api_keys(keys_file)] == [hash_api_key(key)]
    assert "gateway" not in secured.overrides["scheduler"]
    bare = local_servers.start_secure_servers(identities[1:], "gs", tmp_path / "without")
    assert bare.api_key_file is None
    assert not (tmp_path / "without" / "secrets" / "api-key").exists()

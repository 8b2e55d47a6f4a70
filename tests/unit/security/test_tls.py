"""The local CA: a server certificate for loopback that a client trusting the CA accepts."""

from __future__ import annotations

import ssl
import stat
from pathlib import Path

import pytest

from shared.security.tls import make_local_ca, tls_available

pytestmark = pytest.mark.skipif(not tls_available(), reason="optional 'cryptography' missing")


def test_the_server_certificate_is_signed_by_the_ca_for_loopback(tmp_path: Path) -> None:
    """Test that an SSL server context loads the pair and the CA verifies it for 127.0.0.1."""
    from cryptography import x509

    files = make_local_ca(tmp_path)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(files.cert_file, files.key_file)
    cert = x509.load_pem_x509_certificate(files.cert_file.read_bytes())
    ca = x509.load_pem_x509_certificate(files.ca_file.read_bytes())
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in names.get_values_for_type(x509.DNSName)
    assert stat.S_IMODE(files.key_file.stat().st_mode) == 0o600
    client = ssl.create_default_context(cafile=str(files.ca_file))
    assert client.cert_store_stats()["x509_ca"] == 1

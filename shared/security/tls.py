"""A self-signed CA and a server certificate for the local stack's optional TLS.

Needs the optional ``cryptography`` package; without it :func:`make_local_ca` raises
``RuntimeError`` saying how to install it, and ``greenserve up --secure`` runs without TLS.
The certificate is for loopback only (``localhost``, ``127.0.0.1``); a deployment brings
its own certificates and names them in the NATS/Redis configuration.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from shared.security.secrets import write_secret

__all__ = ["TlsFiles", "make_local_ca", "tls_available"]


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """PEM files: the CA certificate clients trust, and the servers' certificate and key."""

    ca_file: Path
    cert_file: Path
    key_file: Path


def tls_available() -> bool:
    """Whether the ``cryptography`` package is importable."""
    try:
        import cryptography  # noqa: F401
    except ImportError:
        return False
    return True


def make_local_ca(folder: Path, valid_days: int = 30) -> TlsFiles:
    """Generate a CA and a server certificate it signs, for localhost and 127.0.0.1.

    Keys are written owner-only. Both are ECDSA P-256.

    Raises:
        RuntimeError: ``cryptography`` is not installed.
    """
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError as exc:
        raise RuntimeError(
            "TLS needs the 'cryptography' package: .venv/bin/pip install cryptography"
        ) from exc

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "GreenServe local CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=valid_days))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    folder.mkdir(parents=True, exist_ok=True)
    pem = serialization.Encoding.PEM
    ca_file = folder / "ca.pem"
    cert_file = folder / "server.pem"
    ca_file.write_bytes(ca_cert.public_bytes(pem))
    cert_file.write_bytes(cert.public_bytes(pem))
    key_pem = key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    key_file = write_secret(folder / "server-key.pem", key_pem)
    return TlsFiles(ca_file=ca_file, cert_file=cert_file, key_file=key_file)

"""Throwaway certificates for the TLS tests: an authority, the server's, clients' and a stranger's.

Made with ``cryptography`` (EC P-256 keys: fast to make) into a folder, as PEM
files the server and the clients read.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pem:
    """A certificate and its key, as files."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class Certificates:
    ca: Path  # the authority the server trusts, and clients trust the server by
    server: Pem  # CN localhost, for localhost and 127.0.0.1
    client: Pem  # CN alice, signed by the authority
    stranger: Pem  # CN alice too, signed by another authority


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _issue(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
    *,
    authority: bool = False,
    server: bool = False,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, issuer_key = issuer if issuer is not None else (_name(subject), key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=authority, path_length=None), critical=True)
    )
    if server:
        names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        usage = [ExtendedKeyUsageOID.SERVER_AUTH]
        builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    elif not authority:
        usage = [ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(folder: Path, name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> Pem:
    pem = Pem(folder / f"{name}.crt", folder / f"{name}.key")
    pem.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return pem


def make_certificates(folder: Path) -> Certificates:
    folder.mkdir(parents=True, exist_ok=True)
    ca_key, other_key = (
        ec.generate_private_key(ec.SECP256R1()),
        ec.generate_private_key(ec.SECP256R1()),
    )
    ca = _issue("wiremq test authority", ca_key, None, authority=True)
    other = _issue("another authority", other_key, None, authority=True)
    ca_pem = _write(folder, "ca", ca, ca_key)
    server_key, client_key, stranger_key = (ec.generate_private_key(ec.SECP256R1()) for _ in "abc")
    return Certificates(
        ca_pem.cert,
        _write(
            folder,
            "server",
            _issue("localhost", server_key, (ca.subject, ca_key), server=True),
            server_key,
        ),
        _write(folder, "alice", _issue("alice", client_key, (ca.subject, ca_key)), client_key),
        _write(
            folder,
            "stranger",
            _issue("alice", stranger_key, (other.subject, other_key)),
            stranger_key,
        ),
    )

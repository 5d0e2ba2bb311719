"""Certificates for servers that take TLS only: a CA of their own and a server certificate it signs.

`dbsurge embedded start postgres --tls` and the tests use them to meet TLS as the clouds require it
(verify-full against a CA file) on 127.0.0.1. `make_ca` writes ``<name>-ca.pem`` (the certificate a client
passes as ``sslrootcert`` / ``tls_ca_file``) and keeps the CA's key in memory only; `make_server_cert` writes
``<name>.crt`` and ``<name>.key`` (mode 0600, as PostgreSQL requires of its key) for the host names and
addresses given, valid for the days given (negative: already expired, to test that a client refuses it).
Keys are ECDSA P-256: fast to make, and accepted by every TLS library dbsurge's drivers use.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CertAuthority", "ServerCert", "make_ca", "make_server_cert", "write_pkcs12"]


@dataclass(frozen=True)
class CertAuthority:
    """A CA: its certificate file (what a client trusts) and its key and certificate objects (to sign with)."""

    ca_file: Path
    key: object
    cert: object


@dataclass(frozen=True)
class ServerCert:
    """A server's certificate and key files, signed by a `CertAuthority`."""

    cert_file: Path
    key_file: Path


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def make_ca(directory: Path, name: str = "dbsurge-test") -> CertAuthority:
    """A new self-signed CA whose certificate is written to ``directory/<name>-ca.pem``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} CA")])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    ca_file = directory / f"{name}-ca.pem"
    ca_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return CertAuthority(ca_file=ca_file, key=key, cert=cert)


def make_server_cert(ca: CertAuthority, directory: Path, name: str = "server", *,
                     hosts: tuple[str, ...] = ("localhost",), days: float = 365.0) -> ServerCert:
    """A server certificate for ``hosts`` (names and IP addresses) signed by ``ca``, valid for ``days`` from now.

    ``days`` < 0 gives a certificate that expired that long ago (it was valid for a day before that).
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    if days >= 0:
        not_before, not_after = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)
    else:
        not_after = now + datetime.timedelta(days=days)
        not_before = not_after - datetime.timedelta(days=1)
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0] if hosts else name)]))
        .issuer_name(ca.cert.subject)  # type: ignore[attr-defined]
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),  # type: ignore[attr-defined]
                       critical=False)
        .sign(ca.key, hashes.SHA256())  # type: ignore[arg-type]
    )
    cert_file, key_file = directory / f"{name}.crt", directory / f"{name}.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
    return ServerCert(cert_file=cert_file, key_file=key_file)


def write_pkcs12(cert: ServerCert, path: Path, password: str, *, ca_file: Path | None = None) -> Path:
    """`cert` and its key (and the CA of `ca_file`, for the chain) as a PKCS12 keystore at `path`, mode 0600.

    What a Java server reads (Cassandra's ``keystore_type: PKCS12``). The keystore is encrypted with the legacy
    PBE (SHA-1, 3DES) and a SHA-1 MAC, which every Java 11 and 17 reads; the password is the server's own.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    key = serialization.load_pem_private_key(Path(cert.key_file).read_bytes(), password=None)
    leaf = x509.load_pem_x509_certificate(Path(cert.cert_file).read_bytes())
    cas = [x509.load_pem_x509_certificate(Path(ca_file).read_bytes())] if ca_file else None
    encryption = (serialization.PrivateFormat.PKCS12.encryption_builder().kdf_rounds(50000)
                  .key_cert_algorithm(pkcs12.PBES.PBESv1SHA1And3KeyTripleDESCBC).hmac_hash(hashes.SHA1())
                  .build(password.encode()))
    data = pkcs12.serialize_key_and_certificates(b"server", key, leaf, cas, encryption)  # type: ignore[arg-type]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    return Path(path)

"""A throwaway certificate authority for test and local servers: a CA, server and client certificates as PEM.

The files are what TLS servers and clients read directly: ``<name>.crt`` (the certificate) and
``<name>.key`` (its private key, PKCS#8, unencrypted, mode 0600), with ``ca.crt`` beside them for the
peer that verifies. Kafka reads them with ``ssl.keystore.type=PEM``, librdkafka with
``ssl.ca.location``, PostgreSQL with ``ssl_cert_file``/``ssl_key_file`` and libpq with ``sslrootcert``.

Nothing here is meant for production: keys are EC P-256, certificates live a few days, and the CA's key
sits unencrypted beside its certificate.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: How long an issued certificate (and the CA) is valid: long enough for a session or a demo.
DEFAULT_VALIDITY = datetime.timedelta(days=7)
#: Certificates start this long before "now", so that a peer's clock a little behind still accepts them.
CLOCK_SKEW = datetime.timedelta(minutes=5)
DEFAULT_HOSTS: tuple[str, ...] = ("127.0.0.1", "localhost")


@dataclass(frozen=True)
class IssuedCert:
    """A certificate and its private key, as PEM files; ``ca_path`` is the CA certificate that signed it."""

    name: str
    cert_path: Path
    key_path: Path
    ca_path: Path


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` readable by its owner only, from the moment it exists."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(path, 0o600)  # an existing file keeps its mode through O_CREAT


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _subject_alt_names(hosts: Sequence[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


class CertificateAuthority:
    """A self-signed CA that issues server and client certificates into its directory."""

    def __init__(self, directory: Path, certificate: x509.Certificate, key: ec.EllipticCurvePrivateKey,
                 validity: datetime.timedelta) -> None:
        self.directory = directory
        self.certificate = certificate
        self._key = key
        self.validity = validity

    @property
    def cert_path(self) -> Path:
        """The CA certificate: what a client gives as ``ssl.ca.location`` / a server as its truststore."""
        return self.directory / "ca.crt"

    def issue(self, name: str, hosts: Sequence[str] = DEFAULT_HOSTS, directory: Path | None = None,
              *, client: bool = True, server: bool = True) -> IssuedCert:
        """Issue a certificate with common name ``name`` and ``hosts`` (IP addresses or DNS names) as its
        subject alternative names, for TLS servers and/or clients, into ``directory`` (the CA's own by
        default) as ``<name>.crt`` and ``<name>.key``."""
        if not (client or server):
            raise ValueError("a certificate must be for a server, a client or both")
        if server and not hosts:
            raise ValueError("a server certificate needs at least one host name or address")
        target = directory or self.directory
        key = _new_key()
        now = datetime.datetime.now(datetime.UTC)
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
            [ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - CLOCK_SKEW)
            # never past the CA's own end: a verifier would refuse the chain from then on anyway
            .not_valid_after(min(now + self.validity, self.certificate.not_valid_after_utc))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False, content_commitment=False,
                                         data_encipherment=False, key_agreement=True, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                           critical=False)
        )
        if hosts:
            builder = builder.add_extension(_subject_alt_names(hosts), critical=False)
        certificate = builder.sign(self._key, hashes.SHA256())
        target.mkdir(parents=True, exist_ok=True)
        cert_path, key_path = target / f"{name}.crt", target / f"{name}.key"
        _write_private(key_path, _key_pem(key))
        cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        return IssuedCert(name=name, cert_path=cert_path, key_path=key_path, ca_path=self.cert_path)


def make_ca(directory: Path, name: str = "reclaim test CA",
            validity: datetime.timedelta = DEFAULT_VALIDITY) -> CertificateAuthority:
    """Create a new CA in ``directory``: ``ca.crt`` and ``ca.key`` (mode 0600), replacing any there."""
    key = _new_key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False, content_commitment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    ca = CertificateAuthority(directory, certificate, key, validity)
    _write_private(directory / "ca.key", _key_pem(key))
    ca.cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return ca


def load_ca(directory: Path, validity: datetime.timedelta = DEFAULT_VALIDITY) -> CertificateAuthority:
    """The CA :func:`make_ca` left in ``directory`` (to issue more certificates from it later)."""
    certificate = x509.load_pem_x509_certificate((directory / "ca.crt").read_bytes())
    key = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{directory / 'ca.key'} is not an EC private key")
    return CertificateAuthority(directory, certificate, key, validity)


def ensure_ca(directory: Path, validity: datetime.timedelta = DEFAULT_VALIDITY) -> CertificateAuthority:
    """The CA in ``directory`` while it is still valid for a day or more, else a new one made there."""
    if (directory / "ca.crt").exists() and (directory / "ca.key").exists():
        ca = load_ca(directory, validity)
        remaining = ca.certificate.not_valid_after_utc - datetime.datetime.now(datetime.UTC)
        if remaining > datetime.timedelta(days=1):
            return ca
    return make_ca(directory, validity=validity)

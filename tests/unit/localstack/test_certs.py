"""The test CA: what it issues verifies as a TLS server and client would, with private keys kept private."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import stat
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from reclaim.localstack.certs import ensure_ca, load_ca, make_ca


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_ca_and_issued_files_are_pem_with_private_keys_0600(tmp_path: Path) -> None:
    ca = make_ca(tmp_path / "ca")
    issued = ca.issue("broker", hosts=("127.0.0.1", "localhost", "::1"))
    assert _mode(tmp_path / "ca" / "ca.key") == 0o600
    assert _mode(issued.key_path) == 0o600
    assert issued.ca_path == ca.cert_path
    assert issued.key_path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")  # PKCS#8, unencrypted
    serialization.load_pem_private_key(issued.key_path.read_bytes(), password=None)
    cert = x509.load_pem_x509_certificate(issued.cert_path.read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1"),
                                                        ipaddress.ip_address("::1")]
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    assert cert.not_valid_after_utc <= ca.certificate.not_valid_after_utc
    assert cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC) < datetime.timedelta(days=8)


def test_issue_into_another_directory_and_for_clients_only(tmp_path: Path) -> None:
    ca = make_ca(tmp_path / "ca")
    issued = ca.issue("alice", hosts=(), directory=tmp_path / "clients", server=False)
    assert issued.cert_path.parent == tmp_path / "clients"
    cert = x509.load_pem_x509_certificate(issued.cert_path.read_bytes())
    assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.CLIENT_AUTH]
    with pytest.raises(ValueError, match="at least one host"):
        ca.issue("server", hosts=())


def test_ensure_ca_keeps_a_valid_ca_and_load_ca_issues_from_it(tmp_path: Path) -> None:
    first = make_ca(tmp_path)
    again = ensure_ca(tmp_path)
    assert again.certificate == first.certificate
    assert load_ca(tmp_path).issue("x").ca_path == first.cert_path
    short = make_ca(tmp_path / "short", validity=datetime.timedelta(hours=2))
    assert ensure_ca(tmp_path / "short").certificate != short.certificate


def test_a_tls_server_and_client_verify_each_other(tmp_path: Path) -> None:
    """Mutual TLS on loopback with Python's ssl module: the chain, the IP SAN and the key usages hold."""
    ca = make_ca(tmp_path)
    server_cert, client_cert = ca.issue("server"), ca.issue("client", hosts=(), server=False)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(ca.cert_path))
    server_ctx.load_cert_chain(server_cert.cert_path, server_cert.key_path)
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    client_ctx = ssl.create_default_context(cafile=str(ca.cert_path))
    client_ctx.load_cert_chain(client_cert.cert_path, client_cert.key_path)
    peers: list[object] = []
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def serve() -> None:
            conn, _ = listener.accept()
            with server_ctx.wrap_socket(conn, server_side=True) as tls:
                peers.append(tls.getpeercert())
                tls.sendall(b"ok")

        thread = threading.Thread(target=serve)
        thread.start()
        with socket.create_connection(("127.0.0.1", port)) as raw, \
                client_ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            assert tls.recv(2) == b"ok"
        thread.join(timeout=10)
    assert peers and peers[0]

"""TLS for our Kafka connections, configured with librdkafka's names, through a TLS-terminating proxy in front of
a local broker (the local cluster speaks plaintext only)."""

from __future__ import annotations

import contextlib
import socket
import ssl
import subprocess
import threading
from pathlib import Path

import pytest

from streamplane.client.kafka import ConnectionConfig, KafkaConnection, metadata
from streamplane.client.tls import tls_context
from streamplane.errors import InvalidArgumentError, UnavailableError
from tests.helpers import wait_until


def _pipe(a: socket.socket, b: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := a.recv(65536):
            b.sendall(data)
    for s in (a, b):
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def tls_proxy(local_cluster, tmp_path: Path):
    """(host, port, CA file) of a TLS endpoint forwarding to the local cluster's first broker."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    host, port = local_cluster[0].split(",")[0].rsplit(":", 1)
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                raw, _ = listener.accept()
            except OSError:
                return
            try:
                client = server_ctx.wrap_socket(raw, server_side=True)
            except (OSError, ssl.SSLError):
                raw.close()
                continue
            upstream = socket.create_connection((host, int(port)))
            threading.Thread(target=_pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield "localhost", listener.getsockname()[1], str(cert)
    listener.close()


def test_a_kafka_connection_speaks_tls_with_librdkafka_style_settings(tls_proxy) -> None:
    host, port, ca = tls_proxy
    config = ConnectionConfig.from_settings({"security.protocol": "SSL", "ssl.ca.location": ca})
    with KafkaConnection(host, port, config) as conn:
        versions = conn.versions
        # read as it comes (the fetch loop does while it decodes): a TLS record not whole yet is not an error
        v = conn.version(metadata.KEY, metadata.VERSIONS)
        conn.send(metadata.KEY, v, metadata.encode(v, None))
        conn.receive_some()
        wait_until(conn.receive_some, timeout=10)
        assert metadata.decode(v, conn.receive()).brokers
    assert 1 in versions and 3 in versions  # Fetch and Metadata, through the TLS tunnel
    untrusted = ConnectionConfig.from_settings({"security.protocol": "ssl"})  # the system CAs do not know it
    with pytest.raises(UnavailableError, match="certificate verify failed"):
        KafkaConnection(host, port, untrusted)
    unchecked = ConnectionConfig.from_settings(
        {"security.protocol": "ssl", "enable.ssl.certificate.verification": "false"}
    )
    with KafkaConnection(host, port, unchecked) as conn:
        assert conn.metadata().brokers


def test_bad_tls_settings_name_the_setting(tmp_path: Path) -> None:
    assert tls_context({}) is None and tls_context({"security.protocol": "plaintext"}) is None
    with pytest.raises(InvalidArgumentError, match=r"ssl\.ca\.location"):
        tls_context({"security.protocol": "ssl", "ssl.ca.location": str(tmp_path / "missing.pem")})
    with pytest.raises(InvalidArgumentError, match=r"sasl\.mechanism"):
        ConnectionConfig.from_settings({"security.protocol": "SASL_SSL"})  # GSSAPI, librdkafka's default
    with pytest.raises(InvalidArgumentError, match=r"sasl\.username"):
        ConnectionConfig.from_settings({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"})
    with pytest.raises(InvalidArgumentError, match=r"security\.protocol"):
        ConnectionConfig.from_settings({"security.protocol": "tls"})
    with pytest.raises(InvalidArgumentError, match=r"enable\.ssl\.certificate\.verification"):
        tls_context({"security.protocol": "ssl", "enable.ssl.certificate.verification": "maybe"})
